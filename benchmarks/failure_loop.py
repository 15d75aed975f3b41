"""The failure loop closed (issue 36's `failure_suite_gain`): mine a run's failures, export them, train on them,
evaluate on the exported suite's held-out half.

Per seed, every stage through the CLI a user runs:
1. a mining run: the addition recipe (`examples/addition.toml`, the built-in base) with `train.curriculum =
   "scheduler"`, so every failed trajectory is categorised and stored;
2. `posttrain failures RUN --since S --min-fail-rate R --export FILE`: the tasks its late policy (steps >= S, the
   last quarter) still failed in at least a share R of their samples (0.5; 0 exports every task with one failed
   sample, which the start model mostly solves greedily: a suite of sampling slips), split by a hash of the task id
   into a training half and a held-out half, the failure suite;
3. from the mining run's final model, arm F trains on the training half beside the ordinary domain (weight
   `--ordinary-weight` against the failures' 1), arm C on the ordinary domain alone, the same steps and recipe, a
   checkpoint every `--every` steps;
4. a regression gate picks each arm's checkpoint: the latest whose greedy pass rate on the selection half of the
   ordinary held-out problems (`arith:add`'s held-out split, never trained on by any run, halved by a hash of the
   task id) is at most `--tolerance` points below the start model's (none: the start model itself);
5. greedy evaluation (`posttrain eval --json`) of the start model and the kept checkpoints on both halves of the
   suite, and of every checkpoint on the ordinary problems.
`failure_suite_gain` = F - start on the whole exported suite (points: what the issue asks, the failures fixed,
the half F trained on included); `failure_heldout_gain` = F - start on the held-out half alone (whether fixing
failures carries over to failures not trained on); `ordinary_regression` = start - F on the ordinary problems'
reporting half, the half the gate never read (goal <= 1 point); beside them `failure_vs_control` = F - C on the
held-out half: what the failure curriculum adds over as much training without it, and `last_*`: F's last step,
ungated. Each half's pass rates with 95% Wilson interval bounds.

    python benchmarks/failure_loop.py [--seeds 1 2 3] [--mine-steps 400] [--steps 100] [--min-fail-rate 0.5]
        [--ordinary-weight 1] [--every 20] [--tolerance 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from posttrain.eval.metrics import wilson_interval
from posttrain.store.checkpoints import list_checkpoints
from posttrain.tasks.base import split_of

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "examples" / "addition.toml"
ORDINARY = 'source="arith:add", options={digits=2, held_out_fraction=0.15}'


def _cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "posttrain.cli", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"posttrain {' '.join(args[:2])} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def train(name: str, out: Path, seed: int, sets: list[str]) -> Path:
    """`posttrain train` of the recipe into `out/name`; a run already finished there (final/) is reused: each stage
    is deterministic per seed at one thread, so a rerun with the same `--out` and settings only evaluates."""
    if (out / name / "final").exists():
        print(f"  {out.name} {name}: reused {out / name}", flush=True)
        return out / name
    t0 = time.perf_counter()
    _cli("train", str(RECIPE), "--set", f"run_dir='{out}'", "--set", f"name='{name}'", "--set", f"seed={seed}",
         "--set", "tensorboard=false", *[x for s in sets for x in ("--set", s)])
    print(f"  {out.name} {name}: trained in {time.perf_counter() - t0:.0f} s", flush=True)
    return out / name


def _greedy_eval(model: Path | str, suite: str, out: Path) -> dict:
    """`posttrain eval --json` of one greedy sample per task (per-task results under 'tasks')."""
    return json.loads(_cli("eval", "--model", str(model), "--suite", suite, "--temperature", "0", "--samples", "1",
                           "--json", "--out", str(out)).strip().splitlines()[-1])


def greedy(model: Path | str, suite: str, out: Path) -> tuple[int, int]:
    """(passed, tasks) of one greedy sample per task."""
    r = _greedy_eval(model, suite, out)
    return round(r["pass@1"] * r["n_tasks"]), r["n_tasks"]


def split_suite(suite: Path) -> tuple[Path, Path, int, int]:
    """The exported suite's training half and held-out half (by a hash of the task id)."""
    lines = [x for x in suite.read_text().splitlines() if x.strip()]
    halves: dict[str, list[str]] = {"train": [], "held_out": []}
    for x in lines:
        halves[split_of(json.loads(x)["id"], 0.5)].append(x)
    train_path, test_path = suite.with_name("suite_train.jsonl"), suite.with_name("suite_test.jsonl")
    train_path.write_text("\n".join(halves["train"]) + "\n")
    test_path.write_text("\n".join(halves["held_out"]) + "\n")
    return train_path, test_path, len(halves["train"]), len(halves["held_out"])


def ordinary_halves(model: str, out: Path) -> dict[str, tuple[int, int]]:
    """Greedy on the ordinary held-out problems, split by a hash of the task id into the selection half (what the
    gate reads) and the reporting half (what `ordinary_regression` reports): (passed, tasks) of each."""
    r = _greedy_eval(model, "arith:add", out)
    counts = {"selection": [0, 0], "reporting": [0, 0]}
    for t in r["tasks"]:
        half = counts["selection" if split_of(t["task_id"], 0.5) == "held_out" else "reporting"]
        half[0] += t["c"]
        half[1] += t["n"]
    return {k: (p, n) for k, (p, n) in counts.items()}


def gate(start: tuple[int, int], curve: dict[int, tuple[int, int]], tolerance: float) -> int:
    """The checkpoint an arm keeps: the latest step whose pass rate on the ordinary selection half is at most
    `tolerance` points below the start model's (0: none passes, keep the start model). Pure."""
    floor = start[0] / start[1] - tolerance / 100
    ok = [s for s, (p, n) in curve.items() if p / n >= floor - 1e-12]
    return max(ok, default=0)


def arm(name: str, out: Path, seed: int, start: Path, domains: str, steps: int, every: int) -> Path:
    """Train one arm from the mining run's final model, a checkpoint every `every` steps, all kept for the gate."""
    return train(name, out, seed, [f"train.steps={steps}", f"train.checkpoint_every={every}",
                                   f"train.keep_checkpoints={steps // every + 1}", "eval.every=0",
                                   "eval.at_start=false", f"model.path='{start}'", f"domains=[{domains}]"])


def one_seed(seed: int, out: Path, mine_steps: int, steps: int, min_fail_rate: float, weight: float, every: int,
             tolerance: float, mine_only: bool = False) -> dict | None:
    out.mkdir(parents=True, exist_ok=True)
    mined = train("mine", out, seed, ["train.curriculum='scheduler'", f"train.steps={mine_steps}",
                                      f"train.checkpoint_every={mine_steps}"])
    since = mine_steps - mine_steps // 4
    exported = json.loads(_cli("failures", str(mined), "--since", str(since), "--min-fail-rate", str(min_fail_rate),
                               "--export", str(out / "suite.jsonl"),
                               "--json"))
    train_half, test_half, n_train, n_test = split_suite(out / "suite.jsonl")
    print(f"  {out.name} suite: {exported['export']['tasks']} tasks failed at steps >= {since} "
          f"({exported['by_category']}); {n_train} to train on, {n_test} held out", flush=True)
    if mine_only:
        return None
    start = mined / "final"
    failures = f'{{source="{train_half}", options={{held_out_fraction=0.01}}}}, {{{ORDINARY}, weight={weight:g}}}'
    runs = {"failures": arm("failures", out, seed, start, failures, steps, every),
            "control": arm("control", out, seed, start, f"{{{ORDINARY}}}", steps, every)}
    ordinary = {"start": ordinary_halves(str(start), out / "eval-start-ordinary")}
    chosen: dict[str, int] = {}
    curves: dict[str, dict[int, tuple[int, int]]] = {}
    ckpt: dict[str, dict[int, str]] = {}  # each arm's checkpoint directories by step (evaluated as plain weights,
    # like the start model: `RUN@STEP` would evaluate the run's own split of the suite instead)
    for label, run in runs.items():
        saved = dict(list_checkpoints(run))
        ckpt[label] = {s: str(saved[s]) for s in range(every, steps + 1, every)}
        halves = {s: ordinary_halves(path, out / f"eval-{label}-ordinary-{s}") for s, path in ckpt[label].items()}
        curves[label] = {s: h["selection"] for s, h in halves.items()}
        chosen[label] = gate(ordinary["start"]["selection"], curves[label], tolerance)
        ordinary[label] = halves[chosen[label]] if chosen[label] else ordinary["start"]
        if label == "failures":  # F's last step, ungated, is reported beside the gated figure
            ordinary["failures_last"] = halves[steps]
        print(f"  {out.name} {label}: ordinary selection half by step {curves[label]} (start "
              f"{ordinary['start']['selection']}); kept step {chosen[label]}", flush=True)
    models = {"start": str(start), **{k: ckpt[k][chosen[k]] if chosen[k] else str(start) for k in runs},
              "failures_last": ckpt["failures"][steps]}
    res: dict[str, dict[str, tuple[int, int]]] = {}
    for label, model in models.items():
        res[label] = {"suite": greedy(model, str(test_half), out / f"eval-{label}-suite"),
                      "trained": greedy(model, str(train_half), out / f"eval-{label}-trained"),
                      "ordinary": ordinary[label]["reporting"]}
        print(f"  {out.name} {label}: suite {res[label]['suite']}, trained half {res[label]['trained']}, "
              f"ordinary reporting half {res[label]['ordinary']}", flush=True)
    acc = {k: {s: p / n for s, (p, n) in v.items()} for k, v in res.items()}

    def whole(label: str) -> float:
        (p1, n1), (p2, n2) = res[label]["suite"], res[label]["trained"]
        return (p1 + p2) / (n1 + n2)

    row = {"seed": seed, "min_fail_rate": min_fail_rate, "suite_tasks": n_test, "suite_train_tasks": n_train, "since": since,
           "kept_step": chosen["failures"], "control_kept_step": chosen["control"],
           "failure_suite_gain": 100 * (whole("failures") - whole("start")),
           "failure_heldout_gain": 100 * (acc["failures"]["suite"] - acc["start"]["suite"]),
           "failure_trained_gain": 100 * (acc["failures"]["trained"] - acc["start"]["trained"]),
           "ordinary_regression": 100 * (acc["start"]["ordinary"] - acc["failures"]["ordinary"]),
           "failure_vs_control": 100 * (acc["failures"]["suite"] - acc["control"]["suite"]),
           "control_suite_gain": 100 * (acc["control"]["suite"] - acc["start"]["suite"]),
           "last_suite_gain": 100 * (whole("failures_last") - whole("start")),
           "last_ordinary_regression": 100 * (acc["start"]["ordinary"] - acc["failures_last"]["ordinary"]),
           "selection_curves": {k: {str(s): list(v) for s, v in c.items()} for k, c in curves.items()},
           "counts": res}
    for k in ("start", "failures", "control"):
        for half in ("suite", "trained"):
            p, n = res[k][half]
            ci = wilson_interval(p, n)
            row[f"{k}_{half}_ci"] = [round(100 * ci.lo, 1), round(100 * ci.hi, 1)]
    print(f"seed {seed}: failure_suite_gain {row['failure_suite_gain']:+.1f} pts on the whole suite at step "
          f"{chosen['failures']} (trained half {100 * acc['start']['trained']:.1f} -> "
          f"{100 * acc['failures']['trained']:.1f}); held-out half {100 * acc['start']['suite']:.1f} -> "
          f"{100 * acc['failures']['suite']:.1f} on {n_test} failures ({row['failure_heldout_gain']:+.1f}; control "
          f"{100 * acc['control']['suite']:.1f}), ordinary reporting half {100 * acc['start']['ordinary']:.1f} -> "
          f"{100 * acc['failures']['ordinary']:.1f} (regression {row['ordinary_regression']:+.1f}); ungated step "
          f"{steps}: {row['last_suite_gain']:+.1f}, regression {row['last_ordinary_regression']:+.1f}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--mine-steps", type=int, default=400)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--min-fail-rate", type=float, default=0.5)
    ap.add_argument("--ordinary-weight", type=float, default=1.0, help="the ordinary domain's weight in arm F")
    ap.add_argument("--every", type=int, default=20, help="steps between the checkpoints the gate reads")
    ap.add_argument("--tolerance", type=float, default=1.0, help="points below the start the gate accepts")
    ap.add_argument("--parallel", action="store_true", help="the seeds at the same time (every stage is a CLI "
                    "process, so this is one process per seed)")
    ap.add_argument("--mine-only", action="store_true", help="only the mining runs and their suites (a later run "
                    "with the same --out reuses them)")
    ap.add_argument("--out", type=Path, default=Path("runs") / f"failure-loop-{time.strftime('%H%M%S')}")
    a = ap.parse_args()
    if a.steps % a.every:
        raise SystemExit(f"--steps ({a.steps}) must be a multiple of --every ({a.every})")
    def seed_row(s: int) -> dict | None:
        return one_seed(s, a.out / f"seed{s}", a.mine_steps, a.steps, a.min_fail_rate, a.ordinary_weight, a.every,
                        a.tolerance, a.mine_only)

    with ThreadPoolExecutor(len(a.seeds) if a.parallel else 1) as pool:
        rows = list(pool.map(seed_row, a.seeds))
    if a.mine_only:
        return
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    print(json.dumps({"failure_suite_gain": med("failure_suite_gain"),
                      "min_failure_suite_gain": min(r["failure_suite_gain"] for r in rows),
                      "failure_heldout_gain": med("failure_heldout_gain"),
                      "ordinary_regression": med("ordinary_regression"),
                      "max_ordinary_regression": max(r["ordinary_regression"] for r in rows),
                      "failure_vs_control": med("failure_vs_control"),
                      "last_suite_gain": med("last_suite_gain"), "last_ordinary_regression": med("last_ordinary_regression"),
                      "met": med("failure_suite_gain") >= 20 and max(r["ordinary_regression"] for r in rows) <= 1,
                      "settings": {"steps": a.steps, "every": a.every, "ordinary_weight": a.ordinary_weight,
                                   "tolerance": a.tolerance, "min_fail_rate": a.min_fail_rate, "seeds": a.seeds},
                      "runs": rows}))


if __name__ == "__main__":
    main()
