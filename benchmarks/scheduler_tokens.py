"""Sampled tokens to a held-out competence target over 528 real domains (issue 36's `tokens_ratio`): the built-in
base model trained jointly on `examples/many_domains.toml`'s domains by four arms, each until the same budget of
sampled tokens; the figure is the tokens each arm needed to reach a target mean held-out competence, over uniform's.

The arms (one config each, the same but for these settings; `ARMS`):
- scheduler: `train.curriculum = "scheduler"` with its defaults (learnability weights, retirement of domains that
  never or always pass, re-check probes, failure replays), zero-variance groups dropped and refilled, as the example;
- uniform: `train.curriculum = "uniform"`, `train.drop_zero_variance = false` (the sampling recipe off);
- dapo: uniform sampling with the DAPO-style zero-variance filter, `train.drop_zero_variance = true` (groups whose
  rewards are all equal are dropped and the batch refilled, within the same `max_fill_rounds`);
- learnability: the same scheduler with `scheduler.retire = false` and `scheduler.replay_share = 0`: per-task
  E[p(1-p)] weights and per-domain informative shares only, nothing retired, no probes, no replays.
Tokens: every token sampled for any group, kept or dropped (the step metric `sampled_tokens`, stored in the run
store's `steps` table and read back from it). An arm trains until its sampled tokens reach `--budget-tokens`
(the step that crosses it finishes), or until `--max-wall-s` (then its curve ends short, and says so). The arms run
two at a time, one torch thread each: uniform and dapo first; then, unless `--full`, scheduler and learnability
stop at their first evaluation at or above the target uniform's curve fixes (their first crossing is known then,
and nothing after it changes it; their curves at the budgets past it print as "-").

Competence: the mean over the learnable domains of greedy accuracy on `--eval-size` held-out tasks per domain (the
held-out split, disjoint from training by hash; the same tasks for every arm of a seed, drawn with the seed),
evaluated at the start and whenever an arm's sampled tokens first pass one of `--evals` equal marks of the budget,
or one of `--early-evals` marks below the first (halving: budget / 16, / 32, / 64 at the defaults).
The learnable list is fixed before any arm runs, by a probe of the base model alone on another seed (`PROBE_SEED`):
`--probe-tasks` training-split tasks per domain, `PROBE_SAMPLES` samples each at the run's temperature, through
the training rollouter; learnable = a sampled pass rate above 0 and at most `PROBE_HIGH`. The probe is written to
`<out>/learnable.json` and printed; later seeds (and `--learnable FILE`) reuse it.

The domains: the example's 528, less, at each seed, those the trainer's preflight would refuse at that seed (none of
the gold answers it draws fits the completion cap; the example's own rule checked seed 0): found once per seed
before its arms (`<out>/refused.json`), left out of every arm alike, printed. The preflight's sample depends on
generator speed, so a domain at the edge can pass this check and be refused by an arm's own build (the arm then
exits saying which); add it to that file for every seed and rerun (benchmarks/RESULTS.md, tenth session).

The target, fixed before the runs: the start competence plus `TARGET_FRACTION` of uniform's gain at its last
evaluation (uniform reaches it by construction). Where uniform gained less than `MIN_GAIN`, the target is instead
the start plus `TARGET_FRACTION` of the scheduler's gain, and the uniform arm's tokens to it are only bounded
(more than its budget): the ratios are then upper bounds, reported as such. Tokens to target: the first crossing of
the curve, interpolated linearly between the evaluations around it; a curve that never reaches it gives no number,
only the bound "more than its last evaluation's tokens" (`tokens_to_target`, `token_ratio`). The figure: the median
over seeds of scheduler / uniform when every seed's ratio is exact; `met` needs `GOAL_SEEDS` seeds and a median at
most `GOAL`.

    python benchmarks/scheduler_tokens.py --seeds 1 [--budget-tokens 400000] [--evals 8] [--eval-size 64]
    python benchmarks/scheduler_tokens.py --seeds 1 2 3 --budget-tokens 800000 --evals 32 --early-evals 3 \
        --max-wall-s 3600 --out runs/tokens-s10          # the tenth session's settings, with a longer wall
The last line is one JSON object. An arm whose result file exists under `--out` is read, not run again (`--arms`
runs only some; the figure waits for all four).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "many_domains.toml"
GOAL, GOAL_SEEDS = 0.4, 3  # the issue: scheduler / uniform tokens at most 0.4, over at least 3 seeds
TARGET_FRACTION = 0.5  # the target: start + this share of uniform's gain (fixed before the runs)
MIN_GAIN = 0.02  # uniform's gain below this (2 points) is no gain: the fallback target (see the module docstring)
PROBE_SEED, PROBE_SAMPLES, PROBE_HIGH = 0, 4, 0.9


@dataclass(frozen=True)
class Arm:
    """One arm's settings: the curriculum, the zero-variance filter, and `[scheduler]` overrides."""

    name: str
    curriculum: str
    drop_zero_variance: bool
    scheduler: dict = field(default_factory=dict)


ARMS: tuple[Arm, ...] = (
    Arm("uniform", "uniform", False),
    Arm("dapo", "uniform", True),
    Arm("scheduler", "scheduler", True),
    Arm("learnability", "scheduler", True, {"retire": False, "replay_share": 0.0}),
)
ARM_NAMES = tuple(a.name for a in ARMS)


# ---------------------------------------------------------------- the curve arithmetic (pure)
@dataclass(frozen=True)
class Crossing:
    """Tokens an arm needed to reach a target: `tokens` when it did (`reached`), else only `bound`, the tokens of
    its last evaluation (it needed more than that, or never gets there)."""

    reached: bool
    tokens: float | None
    bound: float


@dataclass(frozen=True)
class Ratio:
    """arm tokens / baseline tokens to a target. `kind`: "exact"; "lower_bound" (the arm never reached it: the
    ratio is above `value`); "upper_bound" (only the baseline never did: below `value`); "undefined" (neither did,
    or the baseline was there at no cost, `value` None)."""

    value: float | None
    kind: str


def tokens_to_target(curve: list[tuple[float, float]], target: float) -> Crossing:
    """The first point where `curve` ((cumulative tokens, competence) pairs, tokens increasing) reaches `target`,
    linearly interpolated between the evaluation below it and the one at or above it; a start already at the
    target costs its own tokens (0 at the start). Never reached: no tokens, only the bound."""
    if not curve:
        raise ValueError("an empty curve")
    if any(b[0] < a[0] for a, b in zip(curve, curve[1:])):
        raise ValueError("a curve's tokens must not decrease")
    t0, v0 = curve[0]
    if v0 >= target:
        return Crossing(True, float(t0), float(t0))
    for t1, v1 in curve[1:]:
        if v1 >= target:
            return Crossing(True, t0 + (t1 - t0) * (target - v0) / (v1 - v0), float(t1))
        t0, v0 = t1, v1
    return Crossing(False, None, float(curve[-1][0]))


def token_ratio(arm: Crossing, base: Crossing) -> Ratio:
    """arm / base tokens to the same target. An arm that never reached it is never given a number below what it
    spent: its ratio is a lower bound (its last tokens over the baseline's), never an exact figure."""
    if arm.reached and base.reached:
        if not base.tokens:  # the baseline was at the target at no cost: no ratio says anything
            return Ratio(None, "undefined")
        return Ratio(arm.tokens / base.tokens, "exact")
    if not arm.reached and base.reached:
        return Ratio(arm.bound / base.tokens, "lower_bound") if base.tokens else Ratio(None, "undefined")
    if arm.reached and not base.reached:
        return Ratio(arm.tokens / base.bound, "upper_bound") if base.bound else Ratio(None, "undefined")
    return Ratio(None, "undefined")


def value_at(curve: list[tuple[float, float]], tokens: float) -> float | None:
    """Competence at `tokens` sampled tokens, interpolated between the evaluations around it; None past the curve's
    last evaluation (not extrapolated)."""
    if tokens > curve[-1][0]:
        return None
    t0, v0 = curve[0]
    if tokens <= t0:
        return v0
    for t1, v1 in curve[1:]:
        if tokens <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (tokens - t0) / (t1 - t0)
        t0, v0 = t1, v1
    return curve[-1][1]


def eval_marks(budget: float, evals: int, early: int) -> list[float]:
    """Where an arm is evaluated (besides its start): `evals` equal marks up to the budget, and `early` more below the
    first, halving (budget / evals / 2, / 4, ...), so an arm that gets there within the first mark is still resolved."""
    step = budget / evals
    return sorted({step * (i + 1) for i in range(evals)} | {step / 2 ** (k + 1) for k in range(early)})


def choose_target(start: float, uniform_end: float, scheduler_end: float) -> tuple[float | None, str]:
    """The target and its rule: start + TARGET_FRACTION x uniform's gain when uniform gained at least MIN_GAIN;
    else start + TARGET_FRACTION x the scheduler's gain when that is at least MIN_GAIN; else none."""
    if uniform_end - start >= MIN_GAIN:
        return start + TARGET_FRACTION * (uniform_end - start), "uniform_gain"
    if scheduler_end - start >= MIN_GAIN:
        return start + TARGET_FRACTION * (scheduler_end - start), "scheduler_gain"
    return None, "no_gain"


def competence(accuracy: dict[str, float], learnable: list[str]) -> float:
    """The mean over the learnable domains of their held-out accuracy."""
    missing = [d for d in learnable if d not in accuracy]
    if missing or not learnable:
        raise KeyError(f"no accuracy for {missing or 'any domain'}")
    return sum(accuracy[d] for d in learnable) / len(learnable)


def learnable_rule(passes: int, samples: int) -> bool:
    """The probe's rule: the base model passes some samples of the domain and at most PROBE_HIGH of them."""
    return samples > 0 and 0 < passes <= PROBE_HIGH * samples


def summarise(per_seed: list[dict[str, Ratio]]) -> dict[str, dict]:
    """Per arm: the median ratio over seeds when every seed's ratio is exact (else None), and every seed's ratio
    with its kind."""
    out = {}
    for arm in (a for a in ARM_NAMES if a != "uniform"):
        rs = [s[arm] for s in per_seed]
        exact = all(r.kind == "exact" for r in rs) and rs
        out[arm] = {"median": statistics.median(r.value for r in rs) if exact else None,
                    "per_seed": [r.value for r in rs], "kinds": [r.kind for r in rs]}
    return out


# ---------------------------------------------------------------- configs
def _toml_value(v: object) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)  # strings, numbers, booleans and lists of them: JSON and TOML agree


def domains_toml(example: Path, exclude: list[str] = ()) -> str:
    """The example's `[[domains]]` entries, each also excluding `exclude` (names outside an entry match nothing)."""
    import tomllib

    out = []
    for entry in tomllib.loads(example.read_text())["domains"]:
        entry = {**entry, "exclude": [*entry.get("exclude", []), *exclude]} if exclude else entry
        out.append("[[domains]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in entry.items()))
    return "\n".join(out)


def config_text(run_dir: Path, arm: Arm, seed: int, example: Path = EXAMPLE, model: str | None = None,
                exclude: list[str] = ()) -> str:
    """One arm's run over the example's `[[domains]]` (less `exclude`), with the example's sampling and batch
    settings; `train.steps` is only a ceiling (the token budget stops the loop); the trainer's own evaluation is
    off (this script evaluates the learnable domains itself)."""
    sched = "".join(f"{k} = {json.dumps(v)}\n" for k, v in arm.scheduler.items())
    return f"""name = "{arm.name}"
run_dir = "{run_dir}"
seed = {seed}
tensorboard = false
""" + (f'[model]\npath = "{model}"\n' if model else "") + f"""[sampling]
n = 4
[train]
steps = 100000
prompts_per_step = 32
max_fill_rounds = 2
curriculum = "{arm.curriculum}"
drop_zero_variance = {str(arm.drop_zero_variance).lower()}
checkpoint_every = 0
store_samples = false
[eval]
every = 0
at_start = false
size = 1
selection_fraction = 0.0
keep_best = false
[scheduler]
{sched}
""" + domains_toml(example, exclude)


# ---------------------------------------------------------------- the probe (the learnable list, before any arm)
def probe(config: Path, tasks: int, out: Path) -> dict:
    """The base model alone on `tasks` training tasks per domain, PROBE_SAMPLES samples each, through the
    training rollouter (overlong prompts come back as failures, not errors); writes and returns the record."""
    import torch

    from posttrain.config import load_config
    from posttrain.rl.build import build
    from posttrain.rl.rollout import run_sync
    from posttrain.types import DOMAIN_KEY

    torch.set_num_threads(1)
    cfg = load_config(config)
    t0 = time.perf_counter()
    parts = build(cfg, store=False)
    batch: list = []
    for d in parts.domains:
        batch += [replace(t, meta={**t.meta, DOMAIN_KEY: d.name}) for t in d.source.take(tasks, "train", seed=PROBE_SEED)]
    counts: dict[str, list[int]] = {d.name: [0, 0] for d in parts.domains}
    for i in range(0, len(batch), 64):
        for g in run_sync(parts.rollouter, batch[i:i + 64], PROBE_SAMPLES):
            c = counts[str(g.task.meta[DOMAIN_KEY])]
            c[0] += sum(int(t.verdict is not None and t.verdict.passed) for t in g.trajectories)
            c[1] += len(g.trajectories)
    parts.sandboxes.close()
    learnable = sorted(d for d, (p, n) in counts.items() if learnable_rule(p, n))
    record = {"rule": f"sampled pass rate in (0, {PROBE_HIGH}] over {tasks} training tasks x {PROBE_SAMPLES} "
                      f"samples, base model, seed {PROBE_SEED}",
              "learnable": learnable, "domains": len(counts), "seconds": time.perf_counter() - t0,
              "passed": {d: c for d, c in counts.items() if c[0]}}
    out.write_text(json.dumps(record, indent=1))
    return record


def preflight_refused(config: Path, seeds: list[int]) -> dict[int, list[str]]:
    """Per seed, the domains the trainer's preflight would refuse (`rl/preflight.py`: none of the gold answers it
    draws with the run's seed fits the run's completion cap; the example's own rule R4 checked seed 0 only): left
    out of that seed's runs, every arm alike. The domains are built once."""
    from posttrain.config import load_config
    from posttrain.rl.backends import OneProcess
    from posttrain.rl.build import build_domains, build_policy, sampling_params
    from posttrain.rl.preflight import domain_rooms

    cfg = load_config(config)
    _, tokenizer, *_ = build_policy(cfg, OneProcess())
    domains = build_domains(cfg)
    cap = sampling_params(cfg, domains).max_tokens
    return {seed: [r.domain for r in domain_rooms(domains, [cap] * len(domains), tokenizer, seed)
                   if r.lengths and r.fitting == 0] for seed in seeds}


# ---------------------------------------------------------------- one arm (a child process)
def run_arm(config: Path, learnable: list[str], budget: float, marks: list[float], eval_size: int, max_wall_s: float,
            stop_at: float | None, out: Path) -> None:
    """Build, evaluate the learnable domains at the start, train until `budget` sampled tokens (or `max_wall_s`, or an
    evaluation at `stop_at` competence or above: the first crossing is then known, and nothing after it changes
    it), evaluating each time the tokens pass one of `marks`; write `out`."""
    import torch

    from posttrain.config import load_config
    from posttrain.eval.training import evaluate_in_training
    from posttrain.rl.trainer import Trainer
    from posttrain.tasks.suites import Suite

    torch.set_num_threads(1)
    cfg = load_config(config)
    trainer = Trainer(cfg, overwrite=True)
    p = trainer.parts
    by_name = {d.name: d for d in p.domains}
    suites = [Suite(n, by_name[n].held_out(eval_size, seed=cfg.seed), by_name[n].verifier) for n in learnable]
    points: list[dict] = []

    def evaluate(tokens: float) -> None:
        t0 = time.perf_counter()
        acc, tasks = {}, {}
        for s in suites:
            m = evaluate_in_training(p.engine, s, f"tokens:{s.name}", trainer.store, trainer.step, p.params.max_tokens,
                                     p.renderer, p.sandboxes)
            acc[s.name] = m["pass@1"]
            tasks[s.name] = int(m["n_tasks"])
        points.append({"step": trainer.step, "tokens": tokens, "accuracy": acc, "n_tasks": tasks,
                       "competence": competence(acc, learnable), "eval_s": time.perf_counter() - t0})
        print(f"{cfg.name} step {trainer.step} tokens {tokens:.0f} competence {points[-1]['competence']:.4f}",
              flush=True)

    evaluate(0.0)
    tokens, w0, c0 = 0.0, time.perf_counter(), time.process_time()
    stopped = "budget"
    while tokens < budget:
        if time.perf_counter() - w0 > max_wall_s:
            stopped = "wall"
            break
        tokens += trainer.train_step().metrics["sampled_tokens"]
        if marks and tokens >= marks[0]:
            evaluate(tokens)
            marks = [m for m in marks if m > tokens]
            if stop_at is not None and points[-1]["competence"] >= stop_at:
                stopped = "target"
                break
    if points[-1]["tokens"] != tokens:  # stopped by the wall clock between marks: its last state counts too
        evaluate(tokens)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    trainer.log.flush()
    stored = sum(m.get("sampled_tokens", 0.0) for _, m in trainer.store.steps())
    if stored != tokens:
        raise RuntimeError(f"the store's sampled tokens {stored} differ from the loop's {tokens}")
    steps = trainer.store.steps()
    drawn: dict[str, float] = {}
    for _, r in trainer.store.domains():  # the scheduler's own record (the uniform arms have none)
        drawn[r.domain] = drawn.get(r.domain, 0.0) + r.metrics.get("drawn", 0.0)
    out.write_text(json.dumps({
        "arm": cfg.name, "seed": cfg.seed, "steps": trainer.step, "tokens": tokens, "stopped": stopped, "stop_at": stop_at,
        "wall_s": wall, "cpu_s": cpu, "points": points,
        "groups_sampled": sum(m.get("groups_sampled", 0.0) for _, m in steps),
        "groups_kept": sum(m.get("groups_kept", 0.0) for _, m in steps),
        "drawn_learnable": sum(v for d, v in drawn.items() if d in set(learnable)) if drawn else None,
        "drawn_total": sum(drawn.values()) if drawn else None}))
    trainer.close()


# ---------------------------------------------------------------- a seed: the four arms, two at a time
def one_seed(seed: int, out: Path, learnable: list[str], exclude: list[str], a: argparse.Namespace) -> dict | None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    todo = [arm for arm in ARMS if arm.name in a.arms and not (out / f"{arm.name}.json").exists()]
    for arm in ARMS:
        if (out / f"{arm.name}.json").exists():
            print(f"seed {seed} {arm.name}: read from {out / f'{arm.name}.json'}", flush=True)
    marks = eval_marks(a.budget_tokens, a.evals, a.early_evals)
    while todo:  # ARMS' order: the uniform arms first, so the later ones may stop at the target they fix
        wave, todo = todo[:a.parallel], todo[a.parallel:]
        stop_at = None
        if not a.full and (out / "uniform.json").exists():
            uniform = json.loads((out / "uniform.json").read_text())["points"]
            target, rule = choose_target(uniform[0]["competence"], uniform[-1]["competence"], float("-inf"))
            stop_at = target if rule == "uniform_gain" else None
        procs = []
        for arm in wave:
            cfg = out / f"{arm.name}.toml"
            cfg.write_text(config_text(out / "runs", arm, seed, a.example, a.model, exclude))
            log = open(out / f"{arm.name}.log", "w")
            print(f"seed {seed} {arm.name}: started {time.strftime('%H:%M:%S')}"
                  + (f", stops at competence {stop_at:.4f}" if stop_at is not None else ""), flush=True)
            procs.append((arm, subprocess.Popen(
                [sys.executable, __file__, "--child", str(cfg), json.dumps(learnable), str(a.budget_tokens),
                 json.dumps(marks), str(a.eval_size), str(a.max_wall_s), json.dumps(stop_at),
                 str(out / f"{arm.name}.json")], env=env, stdout=log, stderr=subprocess.STDOUT), log))
        for arm, proc, log in procs:
            rc = proc.wait()
            log.close()
            if rc != 0:
                raise SystemExit(f"seed {seed} arm {arm.name} exited {rc}:\n{(out / f'{arm.name}.log').read_text()[-3000:]}")
    missing = [arm for arm in ARM_NAMES if not (out / f"{arm}.json").exists()]
    if missing:  # `--arms` ran only some: no figure for the seed yet
        print(f"seed {seed}: no figure yet, arms not run: {', '.join(missing)}", flush=True)
        return None
    res = {arm: json.loads((out / f"{arm}.json").read_text()) for arm in ARM_NAMES}
    curves = {arm: [(pt["tokens"], pt["competence"]) for pt in res[arm]["points"]] for arm in ARM_NAMES}
    starts = {arm: curves[arm][0][1] for arm in ARM_NAMES}
    if len(set(starts.values())) != 1:  # the same base model on the same tasks: said, and uniform's start counts
        print(f"seed {seed}: WARNING the arms' start competences differ: {starts}", flush=True)
    start = starts["uniform"]
    target, rule = choose_target(start, curves["uniform"][-1][1], curves["scheduler"][-1][1])
    crossings = {arm: tokens_to_target(curves[arm], target) for arm in ARM_NAMES} if target is not None else {}
    ratios = {arm: token_ratio(crossings[arm], crossings["uniform"]) if target is not None else Ratio(None, "undefined")
              for arm in ARM_NAMES if arm != "uniform"}
    print(f"seed {seed}: start competence {start:.4f} over {len(learnable)} learnable domains; target "
          + (f"{target:.4f} ({rule})" if target is not None else f"none ({rule})"), flush=True)
    for arm in ARM_NAMES:
        r = res[arm]
        c = crossings.get(arm)
        reach = ("-" if c is None else f"{c.tokens:,.0f}" if c.reached else f"not reached (> {c.bound:,.0f})")
        print(f"  {arm:12s} steps {r['steps']:4d} tokens {r['tokens']:>10,.0f} ({r['stopped']}) wall {r['wall_s']:7.0f} s "
              f"final {curves[arm][-1][1]:.4f}  tokens to target {reach}"
              + (f"  ratio {ratios[arm].value if ratios[arm].value is None else round(ratios[arm].value, 3)}"
                 f" ({ratios[arm].kind})" if arm in ratios else ""), flush=True)
    marks = [0.0, *marks]
    print("  competence at fixed sampled-token budgets: " + " ".join(f"{m:,.0f}" for m in marks), flush=True)
    for arm in ARM_NAMES:
        vals = [value_at(curves[arm], m) for m in marks]
        print(f"  {arm:12s} " + " ".join("   -  " if v is None else f"{v:.4f}" for v in vals), flush=True)
    return {"seed": seed, "start": start, "target": target, "target_rule": rule,
            "ratios": {k: {"value": v.value, "kind": v.kind} for k, v in ratios.items()},
            "crossings": {k: {"reached": c.reached, "tokens": c.tokens, "bound": c.bound} for k, c in crossings.items()},
            "curves": curves, "_ratios": ratios,
            "arms": {arm: {k: v for k, v in res[arm].items() if k != "points"} for arm in ARM_NAMES},
            "per_domain_end": {arm: res[arm]["points"][-1]["accuracy"] for arm in ARM_NAMES}}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        config, learnable, budget, marks, size, wall, stop_at, out = sys.argv[2:10]
        run_arm(Path(config), json.loads(learnable), float(budget), json.loads(marks), int(size), float(wall),
                json.loads(stop_at), Path(out))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--preflight":
        refused = preflight_refused(Path(sys.argv[2]), [int(x) for x in sys.argv[4:]])
        Path(sys.argv[3]).write_text(json.dumps(refused))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        print(json.dumps(probe(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--budget-tokens", type=float, default=400_000, help="sampled tokens per arm")
    ap.add_argument("--evals", type=int, default=8, help="evaluations after the start, at equal token marks")
    ap.add_argument("--arms", nargs="+", choices=ARM_NAMES, default=list(ARM_NAMES),
                    help="run only these (the figure needs all four; finished arms are read from --out)")
    ap.add_argument("--early-evals", type=int, default=3, help="more below the first mark, halving")
    ap.add_argument("--full", action="store_true", help="every arm to its budget (else the arms after uniform stop "
                    "at the first evaluation at or above the target uniform fixes)")
    ap.add_argument("--eval-size", type=int, default=64, help="held-out tasks per learnable domain")
    ap.add_argument("--max-wall-s", type=float, default=3600.0, help="an arm stops here, short of its budget")
    ap.add_argument("--parallel", type=int, default=2, help="arms at once (one thread each)")
    ap.add_argument("--probe-tasks", type=int, default=8, help="training tasks per domain in the probe")
    ap.add_argument("--learnable", type=Path, default=None, help="a probe record to reuse (default <out>/learnable.json)")
    ap.add_argument("--example", type=Path, default=EXAMPLE)
    ap.add_argument("--model", default=None, help="a model path (default: the built-in base, built once)")
    ap.add_argument("--out", type=Path, default=Path("runs") / "scheduler-tokens")
    a = ap.parse_args()
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    record_path = a.learnable or a.out / "learnable.json"
    if not record_path.exists():
        cfg = a.out / "probe.toml"
        cfg.write_text(config_text(a.out / "probe-run", ARMS[0], PROBE_SEED, a.example, a.model))
        subprocess.run([sys.executable, __file__, "--probe", str(cfg), str(a.probe_tasks), str(record_path)],
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, stdout=subprocess.DEVNULL)
    record = json.loads(record_path.read_text())
    learnable = record["learnable"]
    print(f"learnable domains (fixed before the arms, {record['rule']}; {len(learnable)} of {record['domains']}): "
          + ", ".join(f"{d} {record['passed'][d][0]}/{record['passed'][d][1]}" for d in learnable), flush=True)
    if not learnable:
        raise SystemExit("the probe found no learnable domain: no competence to measure")
    refused_path = a.out / "refused.json"
    refused = {int(k): v for k, v in json.loads(refused_path.read_text()).items()} if refused_path.exists() else {}
    missing = [s for s in a.seeds if s not in refused]
    if missing:  # the preflight's refusals at each seed, before any arm of it
        cfg = a.out / "preflight.toml"
        cfg.write_text(config_text(a.out / "preflight-run", ARMS[0], PROBE_SEED, a.example, a.model))
        part = a.out / "refused.part.json"
        subprocess.run([sys.executable, __file__, "--preflight", str(cfg), str(part), *map(str, missing)],
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)
        refused.update({int(k): v for k, v in json.loads(part.read_text()).items()})
        refused_path.write_text(json.dumps(refused))
    for s in a.seeds:
        print(f"seed {s}: left out, the preflight refuses them at this seed (no gold answer fits the cap): "
              f"{', '.join(refused[s]) or 'none'}", flush=True)
    rows = [one_seed(s, a.out / f"seed{s}", learnable, refused[s], a) for s in a.seeds]
    if any(r is None for r in rows):
        print(json.dumps({"tokens_ratio": None, "complete": False, "seeds": a.seeds}))
        return
    summary = summarise([r.pop("_ratios") for r in rows])
    sched = summary["scheduler"]["median"]
    print(json.dumps({
        "tokens_ratio": sched, "tokens_ratio_dapo": summary["dapo"]["median"],
        "tokens_ratio_learnability": summary["learnability"]["median"],
        "per_seed": {arm: {"ratio": s["per_seed"], "kind": s["kinds"]} for arm, s in summary.items()},
        "seeds": a.seeds, "target": {r["seed"]: {"value": r["target"], "rule": r["target_rule"], "start": r["start"]}
                                      for r in rows},
        "target_rule": f"start + {TARGET_FRACTION} x uniform's gain at its last evaluation (fallback: the scheduler's; "
                       f"gains under {MIN_GAIN} count as none)",
        "left_out": {s: refused[s] for s in a.seeds},
        "budget_tokens": a.budget_tokens, "evals": a.evals, "eval_size": a.eval_size, "learnable": learnable,
        "met": sched is not None and sched <= GOAL and len(a.seeds) >= GOAL_SEEDS,
        "runs": rows}))


if __name__ == "__main__":
    main()
