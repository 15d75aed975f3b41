"""The scheduler on real domains with the built-in model: many domains from one glob, killed and resumed.

Covers `real_smoke()` (used by `benchmarks/scheduler.py --real-smoke`, or run alone): a config whose
`[[domains]]` expand reasoning-gym's generators x levels and the arithmetic families x digit counts (single-turn
domains: an agent domain still trains alone), trained with `train.curriculum = "scheduler"` in a child process
that is SIGKILLed after its first checkpoint and then resumed to the end; it reports whether it completed, the
domain count, and `wasted_frac`: the share of rollouts (groups) spent on domains that never produced a passing
sample, after their first `threshold` groups (the issue's threshold is 50 attempts: read as 50 groups for
`wasted_frac`, and as 50 rollouts, 13 groups of 4, for `wasted_frac_50_rollouts`; the figure at the scheduler's
`retire_after_groups` is printed beside them). Beside it: `real_domains_passed` (domains with a passing sample)
and `probe_frac` (the share of groups drawn for retired domains' re-checks).
Not measured here: tokens_ratio, real_gain_ratio, failure_suite_gain, async_time_ratio (hours of CPU).

    python benchmarks/scheduler_real.py [--steps 40] [--levels 0 1 2]
    python benchmarks/scheduler_real.py --steps 200 --example examples/many_domains.toml   # 500+ domains
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SAMPLES = 4  # per group
MAX_TOKENS = 24  # the short arithmetic answers fit with room; the rule below leaves out generators none of whose fit
ARITH_LEVELS = [1, 2, 3, 4, 5, 6, 7, 8, 9]  # digit counts; the same rule leaves out those whose answers do not fit

CHILD = """
import sys
from posttrain.config import load_config
from posttrain.rl.trainer import Trainer
cfg = load_config(sys.argv[1])
t = Trainer(cfg, resume=sys.argv[2] == "resume", overwrite=sys.argv[2] == "again")
t.run()
t.close()
"""


class _Slow(Exception):
    pass


def _on_alarm(*_: object) -> None:
    raise _Slow()


def broken(levels: list[int] | None, limit_s: float = 5.0, source: str = "rg:*") -> list[str]:
    """The generator x level pairs of `source` (each generator at its default configuration with `levels` None)
    left out of the run, by a rule fixed before it: those whose level is
    not a valid configuration of the generator (`knight_swap` at level 0, say), and those that take over `limit_s`
    to build and give one held-out and one training task (sokoban and jugs at higher levels search for minutes), and
    those neither of whose two gold answers fits `MAX_TOKENS` (the run's preflight would refuse the config).
    Prompts longer than the built-in model's context stay in: they come back as OVERLONG failures, and the
    scheduler must stop spending on them (that is what `wasted_frac` measures).
    Printed, and counted in the report."""
    from posttrain.config import DomainConfig
    from posttrain.models import char_tokenizer
    from posttrain.rl.preflight import answer_room
    from posttrain.tasks.domains import load_domain
    from posttrain.tasks.expand import expand_entry

    tokenizer = char_tokenizer()  # the built-in model's
    bad = []
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        for d in expand_entry(DomainConfig(source=source, levels=levels)):
            signal.setitimer(signal.ITIMER_REAL, limit_s)
            try:
                dom = load_domain(str(d.source), **d.options)
                tasks = list(dom.held_out(1)) + list(dom.source.take(1, "train"))
                room = answer_room(d.label, tasks, tokenizer, MAX_TOKENS)
                why = "" if room.fitting or not room.lengths else f"no gold answer in {MAX_TOKENS} tokens (preflight)"
            except _Slow:
                why = f"over {limit_s:g} s"
            except Exception as exc:  # noqa: BLE001 - any failure to build leaves the pair out
                why = type(exc).__name__
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if why:
                print(f"left out {d.label}: {why}", file=sys.stderr, flush=True)
                bad.append(d.label)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return bad


def write_config(run_dir: Path, steps: int, levels: list[int], every: int, model: str | None,
                 left_out: list[str] | None = None, plain: list[str] | None = None,
                 arith_out: list[str] | None = None) -> Path:
    """`plain`: also every generator at its default configuration, less those named (None: not at all)."""
    path = run_dir / "many.toml"
    run_dir.mkdir(parents=True, exist_ok=True)
    if model == "tiny":  # a random tiny model (tests/tiny_models.py): no base build, pass rates near the floor
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.tiny_models import make_tiny_model

        model = str(make_tiny_model(run_dir / "tiny-model"))
    path.write_text(f"""
name = "many"
run_dir = "{run_dir}"
tensorboard = false
""" + (f'[model]\npath = "{model}"\n' if model else "") + f"""[sampling]
n = {SAMPLES}
max_tokens = {MAX_TOKENS}
[train]
steps = {steps}
prompts_per_step = 32
max_fill_rounds = 2
curriculum = "scheduler"
checkpoint_every = {every}
store_samples = false
[eval]
every = 0
at_start = false
size = 1
""" + (f"""[[domains]]
source = "rg:*"
levels = {levels}
exclude = {json.dumps(left_out if left_out is not None else broken(levels))}
""" if levels else "") + (f"""[[domains]]
source = "rg:*"
exclude = {json.dumps(plain)}
""" if plain is not None else "") + f"""[[domains]]
source = "arith:*"
levels = {ARITH_LEVELS}
exclude = {json.dumps(arith_out if arith_out is not None else broken(ARITH_LEVELS, source="arith:*"))}
""")
    return path


def wasted(rows: list[tuple[int, str, dict]], threshold: int) -> float:
    """Groups on never-passing domains beyond their first `threshold`, over all groups."""
    final_passed = {d: m.get("ever_passed", 0.0) for _, d, m in rows}
    seen: dict[str, float] = {}
    waste = total = 0.0
    for _, d, m in rows:
        drawn = m.get("drawn", 0.0)
        before = seen.get(d, 0.0)
        seen[d] = before + drawn
        total += drawn
        if not final_passed[d]:
            waste += max(0.0, before + drawn - max(before, threshold))
    return waste / total if total else 0.0


def example_config(run_dir: Path, steps: int, every: int, model: str | None, example: Path) -> Path:
    """The run over an example's `[[domains]]` (`examples/many_domains.toml`: its left-out pairs are chosen by
    `benchmarks/many_domains.py`), each domain at its own completion cap; the run settings are this script's."""
    text = write_config(run_dir, steps, [], every, model, arith_out=[]).read_text()
    head = text[:text.index("[[domains]]")].replace(f"max_tokens = {MAX_TOKENS}\n", "")
    body = example.read_text()
    path = run_dir / "many.toml"
    path.write_text(head + body[body.index("[[domains]]"):])
    return path


def _rss_gib(pid: int) -> float:
    try:
        return int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (OSError, ValueError, IndexError):  # the process is gone
        return 0.0


def real_smoke(steps: int = 40, levels: list[int] | None = None, out: Path | None = None,
               model: str | None = None, plain: bool = False, example: Path | None = None) -> dict:
    run_dir = out or Path("runs") / f"scheduler-smoke-{time.strftime('%H%M%S')}"
    every = max(1, steps // 2)
    levels = [0, 1, 2] if levels is None else levels
    if example is not None:
        left_out, plain_out, arith_out = [], None, []
        cfg = example_config(run_dir.resolve(), steps, every, model, example)
    else:
        left_out = broken(levels) if levels else []
        plain_out = broken(None) if plain else None
        arith_out = broken(ARITH_LEVELS, source="arith:*")
        cfg = write_config(run_dir.resolve(), steps, levels, every, model, left_out, plain_out, arith_out)
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(cfg), "fresh"], env=env)
    ckpt = run_dir / "many" / "checkpoints"
    peak = 0.0  # the first child's largest resident set seen (GiB), sampled every 2 s
    while child.poll() is None and not (ckpt.exists() and any(ckpt.iterdir())):
        peak = max(peak, _rss_gib(child.pid))
        time.sleep(2)
    time.sleep(5)  # a few steps past the checkpoint: the resume must redo them
    killed = child.poll() is None
    if killed:
        child.send_signal(signal.SIGKILL)
        child.wait()
    elif child.returncode != 0:  # it died on its own (an exception, or the kernel's OOM killer: -9)
        print(f"the first training child exited with {child.returncode} before it was killed", flush=True)
    # resume whenever a checkpoint exists (a child that died on its own is resumed too); else a fresh run
    started = ckpt.exists() and any(ckpt.iterdir())
    resumed = subprocess.run([sys.executable, "-c", CHILD, str(cfg), "resume" if started else "again"], env=env)
    seconds = time.perf_counter() - t0
    from posttrain.store import RunStore

    with RunStore(run_dir / "many" / "run.sqlite", readonly=True) as store:
        rows = [(s, r.domain, r.metrics) for s, r in store.domains()]
        info = store.info()
        last = max((s for s, _ in store.steps()), default=0)
        fails = store.failures()
    domains = sorted({d for _, d, _ in rows})
    retired = {d for s, d, m in rows if s == last and m.get("retired")}
    drawn = sum(m.get("drawn", 0.0) for _, _, m in rows) or 1.0
    probes = sum(m.get("probes", 0.0) for _, _, m in rows)
    cats: dict[str, int] = {}
    for _, f in fails:
        cats[f.category] = cats.get(f.category, 0) + 1
    return {"real_model": model or "builtin", "real_domains": len(domains),
            "real_left_out": len(left_out) + len(plain_out or []) + len(arith_out), "real_steps": last,
            "real_completed": info.get("status") == "finished",
            "real_killed_and_resumed": killed and info.get("resumed_from") is not None,
            "real_first_child_rc": None if killed else child.returncode, "real_first_child_peak_rss_gib": round(peak, 2),
            "real_resumed_from": info.get("resumed_from"), "real_seconds": seconds,
            "real_retired_domains": len(retired), "wasted_frac": wasted(rows, 50),
            "wasted_frac_50_rollouts": wasted(rows, -(-50 // SAMPLES)), "wasted_frac_at_8": wasted(rows, 8),
            "real_domains_passed": len({d for _, d, m in rows if m.get("ever_passed")}), "probe_frac": probes / drawn,
            "real_failures": cats, "real_child_rc": resumed.returncode}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--levels", type=int, nargs="*", default=[0, 1, 2], help="reasoning-gym levels (none: no rg)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--plain", action="store_true", help="also every reasoning-gym generator at its default configuration")
    ap.add_argument("--model", default=None, help="a model path, or 'tiny' (default: the built-in base, built once)")
    ap.add_argument("--example", type=Path, default=None,
                    help="train an example's [[domains]] instead (examples/many_domains.toml: 500+ domains)")
    a = ap.parse_args()
    print(json.dumps(real_smoke(a.steps, a.levels, a.out, a.model, a.plain, a.example)))
