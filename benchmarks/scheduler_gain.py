"""The scheduler against uniform sampling on real domains (issue 36's `real_gain_ratio`): the built-in base model
trained jointly on a fixed list of domains, once with `train.curriculum = "scheduler"` and once with "uniform", for
the same wall time; the figure is the mean held-out gain over the learnable domains, scheduler / uniform.

The domain list (`DOMAINS`, printed at the start) is fixed before any run, and so is which of them count as
learnable: those where the built-in base's sampled pass@1 was at least 0.05 and its greedy accuracy below 0.9 in a
probe of the base alone (64 held-out tasks, 8 samples at temperature 1; the probe is recorded in
benchmarks/RESULTS.md). The others are domains it never solved in that probe (long-digit sums, subtraction and
products it was never pre-trained on, the code domain, reasoning-gym generators): samples spent on them are wasted.
`agent:lookup` is left out: an agent domain trains alone (`rl/build.py` refuses to mix it with single-turn ones).

Equal wall time: per seed, the two arms run at the same time as two processes, one torch thread each, so they see
the same load from the rest of the machine; each builds its run, evaluates the start model, waits for the other at
a barrier, then trains steps until `--budget-s` wall seconds have passed (a step begun before the deadline
finishes), then evaluates again. Steps, wall and CPU seconds of each arm are reported.
Evaluation: greedy accuracy on each domain's held-out tasks (never trained on; the same tasks for both arms: they
are drawn with the run's seed), `--eval-size` tasks on a learnable domain (fewer where the domain has fewer), 64
on the others. Gain = mean over the learnable domains of (end - start); ratio = scheduler gain / uniform gain per
seed (null where uniform's gain is <= 0). The interval: a paired bootstrap over held-out tasks (resampled within
each seed and domain) of the gain difference, scheduler - uniform, in points, per seed and pooled.

    python benchmarks/scheduler_gain.py [--seeds 1 2 3] [--budget-s 900] [--eval-size 256]
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ARMS = ("scheduler", "uniform")
MAX_TOKENS = 24  # one completion cap for every domain: every gold answer here fits (the preflight checks it)
GOAL, GOAL_SEEDS = 1.3, 3  # the figure: a median ratio of at least 1.3, over at least 3 seeds
OTHER_EVAL_SIZE = 64  # held-out tasks evaluated on a domain outside the learnable list (for the record only)


@dataclass(frozen=True)
class GainDomain:
    """One `[[domains]]` entry of the run, and whether its held-out gain counts in the figure."""

    source: str
    options: dict = field(default_factory=dict)
    learnable: bool = False

    @property
    def name(self) -> str:
        """The domain's name in the run (and its store): the source with its options, `arith:add@digits2`."""
        return self.source + "".join(f"@{k}{v}" for k, v in sorted(self.options.items()))


# Fixed before any run, from a probe of the built-in base alone (2026-12-06 18:42-18:53 UTC, benchmarks/RESULTS.md:
# 64 held-out tasks, greedy, and 8 samples at temperature 1). Learnable: sampled pass@1 >= 0.05 and greedy < 0.9.
# Figures in the comments: greedy accuracy / sampled pass@1.
DOMAINS: tuple[GainDomain, ...] = (
    GainDomain("arith:add", {"digits": 2}, learnable=True),  # the base's own band: 0.61 / 0.39
    GainDomain("arith:addsub", {"digits": 2}, learnable=True),  # 0.38 / 0.26 (its sums; differences never)
    GainDomain("arith:add", {"digits": 2, "min_digits": 1}, learnable=True),  # mixed operand lengths: 0.42 / 0.27
    GainDomain("arith:add", {"digits": 3, "min_digits": 1}, learnable=True),  # 1-3 digit operands: 0.16 / 0.13
    GainDomain("arith:add", {"digits": 4}),  # long-digit sums: 0 / 0
    GainDomain("arith:add", {"digits": 6}),  # 0 / 0
    GainDomain("arith:sub", {"digits": 2}),  # never pre-trained on: 0 / 0
    GainDomain("arith:mul", {"digits": 1}),  # 0 / 0
    GainDomain("code:ops", {"digits": 1}),  # the code domain, verified by running the program: 0 / 0
    GainDomain("code:linear", {"digits": 1}),  # 0 / 0
    GainDomain("rg:chain_sum", {"level": 0}),  # reasoning-gym, English prompts: 0 / 0
    GainDomain("rg:products", {"level": 0}),  # 0 / 0
    GainDomain("rg:count_bits", {"level": 0}),  # 0 / 0
    GainDomain("rg:lcm", {"level": 0}),  # 0 / 0.002 (1 of 512 samples)
)


def learnable_names(domains: tuple[GainDomain, ...] = DOMAINS) -> list[str]:
    return [d.name for d in domains if d.learnable]


def check_domains(domains: tuple[GainDomain, ...]) -> None:
    """At least 8 distinct domains, some learnable and some not (what the figure is about)."""
    names = [d.name for d in domains]
    if len(set(names)) != len(names):
        raise ValueError(f"domain names repeat: {names}")
    if len(names) < 8:
        raise ValueError(f"{len(names)} domains; the figure asks for at least 8")
    n_learn = sum(d.learnable for d in domains)
    if not 0 < n_learn < len(domains):
        raise ValueError(f"{n_learn} of {len(domains)} domains learnable: the figure needs both kinds")


def domains_toml(domains: tuple[GainDomain, ...]) -> str:
    """The `[[domains]]` entries, each named as `GainDomain.name` says."""
    out = []
    for d in domains:
        opts = ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.options.items())
        out.append(f'[[domains]]\nsource = "{d.source}"\nname = "{d.name}"\noptions = {{ {opts} }}\n')
    return "\n".join(out)


def config_text(run_dir: Path, arm: str, seed: int, eval_size: int, model: str | None = None,
                domains: tuple[GainDomain, ...] = DOMAINS, n: int = 8, prompts: int = 16) -> str:
    """One arm's run: the same for both arms but `train.curriculum`. `train.steps` is only a ceiling: the wall
    budget stops the loop."""
    if arm not in ARMS:
        raise ValueError(f"arm {arm!r}: one of {ARMS}")
    return f"""name = "{arm}"
run_dir = "{run_dir}"
seed = {seed}
tensorboard = false
""" + (f'[model]\npath = "{model}"\n' if model else "") + f"""[sampling]
n = {n}
max_tokens = {MAX_TOKENS}
[rl]
lr = 3e-4
[train]
steps = 100000
prompts_per_step = {prompts}
curriculum = "{arm}"
checkpoint_every = 0
store_samples = false
[eval]
every = 0
at_start = false
size = {eval_size}
selection_fraction = 0.0
keep_best = false
""" + domains_toml(domains)


# ---------------------------------------------------------------- the figure's arithmetic (pure)
def domain_gains(start: dict[str, float], end: dict[str, float], learnable: list[str]) -> dict[str, float]:
    """end - start per learnable domain (accuracies in [0, 1])."""
    missing = [d for d in learnable if d not in start or d not in end]
    if missing:
        raise KeyError(f"no start or end accuracy for {missing}")
    return {d: end[d] - start[d] for d in learnable}


def mean_gain(start: dict[str, float], end: dict[str, float], learnable: list[str]) -> float:
    """The mean over the learnable domains of (end - start)."""
    g = domain_gains(start, end, learnable)
    return sum(g.values()) / len(g)


def gain_ratio(scheduler_gain: float, uniform_gain: float) -> float | None:
    """Scheduler gain / uniform gain; None where uniform gained nothing (or lost): no ratio says how much better."""
    return scheduler_gain / uniform_gain if uniform_gain > 0 else None


def bootstrap_gain_diff(per_task: list[dict[str, dict[str, tuple[list[int], list[int]]]]], samples: int = 2000,
                        seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Paired bootstrap of (scheduler gain - uniform gain), in points. `per_task`: one dict per seed, domain ->
    arm -> (start passes, end passes), lists over the same held-out tasks in the same order for both arms. Tasks
    are resampled within each seed and domain (`eval.metrics.bootstrap_indices`); a seed's difference is the mean
    over its domains, the pooled one the mean over seeds. Returns (point estimate, low, high)."""
    import numpy as np

    from posttrain.eval.metrics import pooled_paired_diff

    per_seed = []
    for seed_rows in per_task:
        groups = []
        for arms in seed_rows.values():
            s0, e0 = (np.asarray(x, dtype=float) for x in arms["scheduler"])
            s1, e1 = (np.asarray(x, dtype=float) for x in arms["uniform"])
            groups.append((e0 - s0) - (e1 - s1))  # per task, paired across the arms
        per_seed.append(groups)
    point, lo, hi = pooled_paired_diff(per_seed, samples, seed, level)
    return 100 * point, 100 * lo, 100 * hi


def summarise(rows: list[dict]) -> dict:
    """The last line: per seed gains and ratio, the median ratio, the ratio of the mean gains; `met` only over
    `GOAL_SEEDS` seeds or more (one seed's ratio is printed, never called met)."""
    ratios = [r["ratio"] for r in rows]
    defined = [x for x in ratios if x is not None]
    sched = statistics.mean(r["gain"]["scheduler"] for r in rows)
    uni = statistics.mean(r["gain"]["uniform"] for r in rows)
    ratio = statistics.median(defined) if defined and len(defined) == len(rows) else None
    return {"real_gain_ratio": ratio, "ratio_per_seed": ratios, "ratio_of_mean_gains": gain_ratio(sched, uni),
            "mean_gain_scheduler": sched, "mean_gain_uniform": uni,
            "met": ratio is not None and ratio >= GOAL and len(rows) >= GOAL_SEEDS}


# ---------------------------------------------------------------- one arm (a child process)
def _accuracies(store, step: int) -> dict[str, tuple[list[str], list[int]]]:
    """Domain -> (task ids, greedy passes) of the evaluation stored at `step`."""
    out = {}
    for s, name, per in store.eval_per_task():
        if s == step:
            ids = sorted(per)
            out[name] = (ids, [int(per[t] >= 1.0) for t in ids])
    return out


def run_arm(config: Path, barrier: Path, peers: int, budget_s: float, out: Path) -> None:
    """Build, evaluate at step 0, wait for the peer, train for `budget_s` wall seconds, evaluate, write `out`."""
    import dataclasses

    import torch

    from posttrain.config import load_config
    from posttrain.eval.training import evaluate_in_training
    from posttrain.rl.trainer import Trainer

    torch.set_num_threads(1)
    cfg = load_config(config)
    trainer = Trainer(cfg, overwrite=True)
    p = trainer.parts
    learn = set(learnable_names())
    suites = [s if s.name in learn else dataclasses.replace(s, tasks=s.tasks[:OTHER_EVAL_SIZE]) for s in p.held_out]

    def evaluate(step: int) -> float:
        t0 = time.perf_counter()
        for s in suites:
            evaluate_in_training(p.engine, s, s.name, trainer.store, step, MAX_TOKENS, p.renderer, p.sandboxes)
        return time.perf_counter() - t0

    eval_start_s = evaluate(0)
    barrier.mkdir(parents=True, exist_ok=True)
    (barrier / f"{cfg.name}.ready").touch()
    while len(list(barrier.glob("*.ready"))) < peers:
        time.sleep(0.2)
    w0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - w0 < budget_s:
        trainer.train_step()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    eval_end_s = evaluate(trainer.step)
    trainer.log.flush()
    steps = trainer.store.steps()
    start, end = _accuracies(trainer.store, 0), _accuracies(trainer.store, trainer.step)
    share: dict[str, float] = {}
    for _, r in trainer.store.domains():  # the scheduler's own record (uniform has none)
        share[r.domain] = share.get(r.domain, 0.0) + r.metrics.get("drawn", 0.0)
    out.write_text(json.dumps({
        "arm": cfg.name, "steps": trainer.step, "wall_s": wall, "cpu_s": cpu, "eval_start_s": eval_start_s,
        "eval_end_s": eval_end_s, "start": start, "end": end,
        "groups_sampled": sum(m.get("groups_sampled", 0.0) for _, m in steps),
        "groups_kept": sum(m.get("groups_kept", 0.0) for _, m in steps), "scheduler_drawn": share}))
    trainer.close()


# ---------------------------------------------------------------- a seed: both arms at once
def one_seed(seed: int, out: Path, budget_s: float, eval_size: int, model: str | None) -> dict:
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = {}
    for arm in ARMS:
        cfg = out / f"{arm}.toml"
        cfg.write_text(config_text(out / "runs", arm, seed, eval_size, model))
        log = open(out / f"{arm}.log", "w")
        procs[arm] = (subprocess.Popen([sys.executable, __file__, "--child", str(cfg), str(out / "barrier"),
                                        str(len(ARMS)), str(budget_s), str(out / f"{arm}.json")],
                                       env=env, stdout=log, stderr=subprocess.STDOUT), log)
    for arm, (proc, log) in procs.items():
        rc = proc.wait()
        log.close()
        if rc != 0:
            tail = (out / f"{arm}.log").read_text()[-3000:]
            raise SystemExit(f"seed {seed} arm {arm} exited {rc}:\n{tail}")
    res = {arm: json.loads((out / f"{arm}.json").read_text()) for arm in ARMS}
    learn = learnable_names()
    acc = {arm: {k: {d: sum(v[1]) / len(v[1]) for d, v in res[arm][k].items()} for k in ("start", "end")}
           for arm in ARMS}
    gain = {arm: mean_gain(acc[arm]["start"], acc[arm]["end"], learn) for arm in ARMS}
    for d in learn:  # the two arms were evaluated on the same tasks
        assert res["scheduler"]["start"][d][0] == res["uniform"]["start"][d][0], d
    per_task = {d: {arm: (res[arm]["start"][d][1], res[arm]["end"][d][1]) for arm in ARMS} for d in learn}
    point, lo, hi = bootstrap_gain_diff([per_task], seed=seed)
    row = {"seed": seed, "gain": gain, "ratio": gain_ratio(gain["scheduler"], gain["uniform"]),
           "diff_points": point, "diff_ci95": [lo, hi],
           "steps": {a: res[a]["steps"] for a in ARMS}, "wall_s": {a: round(res[a]["wall_s"], 1) for a in ARMS},
           "cpu_s": {a: round(res[a]["cpu_s"], 1) for a in ARMS},
           "groups_sampled": {a: res[a]["groups_sampled"] for a in ARMS},
           "groups_kept": {a: res[a]["groups_kept"] for a in ARMS},
           "accuracy": acc, "n_eval": {d: len(res["scheduler"]["start"][d][1]) for d in acc["scheduler"]["start"]},
           "scheduler_drawn": res["scheduler"]["scheduler_drawn"], "per_task": per_task}
    print(f"seed {seed}: gain scheduler {100 * gain['scheduler']:+.1f} pts, uniform {100 * gain['uniform']:+.1f} pts, "
          f"ratio {row['ratio'] if row['ratio'] is None else round(row['ratio'], 3)}; difference {point:+.1f} pts "
          f"[{lo:+.1f}, {hi:+.1f}]; steps {row['steps']}, wall {row['wall_s']}, cpu {row['cpu_s']}", flush=True)
    for d in acc["scheduler"]["start"]:
        mark = "*" if d in learn else " "
        print(f"  {mark} {d:34s} start {acc['scheduler']['start'][d]:.3f}  end scheduler "
              f"{acc['scheduler']['end'][d]:.3f}  uniform {acc['uniform']['end'][d]:.3f}  (n={row['n_eval'][d]})",
              flush=True)
    return row


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        config, barrier, peers, budget, out = sys.argv[2:7]
        run_arm(Path(config), Path(barrier), int(peers), float(budget), Path(out))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--budget-s", type=float, default=900.0, help="wall seconds of training per arm")
    ap.add_argument("--eval-size", type=int, default=256, help="held-out tasks per learnable domain")
    ap.add_argument("--model", default=None, help="a model path (default: the built-in base, built once)")
    ap.add_argument("--out", type=Path, default=Path("runs") / f"scheduler-gain-{time.strftime('%H%M%S')}")
    a = ap.parse_args()
    check_domains(DOMAINS)
    print(f"{len(DOMAINS)} domains (* learnable, fixed before the run): "
          + ", ".join(("*" if d.learnable else "") + d.name for d in DOMAINS), flush=True)
    print("agent:lookup left out: an agent domain trains alone (rl/build.py refuses to mix it)", flush=True)
    rows = [one_seed(s, a.out / f"seed{s}", a.budget_s, a.eval_size, a.model) for s in a.seeds]
    point, lo, hi = bootstrap_gain_diff([r["per_task"] for r in rows])
    summary = summarise(rows)
    print(f"pooled gain difference (scheduler - uniform) {point:+.1f} pts, 95% bootstrap [{lo:+.1f}, {hi:+.1f}]")
    print(json.dumps({**summary, "diff_points": point, "diff_ci95": [lo, hi], "budget_s": a.budget_s,
                      "domains": [d.name for d in DOMAINS], "learnable": learnable_names(),
                      "runs": [{k: v for k, v in r.items() if k != "per_task"} for r in rows]}))


if __name__ == "__main__":
    main()
