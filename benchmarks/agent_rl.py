"""Multi-turn RL on the built-in agent domain: held-out episode success before and after, per seed and per hop
count, with a chance baseline, and token-in-token-out checked on every training episode.

Each seed is `posttrain quickstart --agent` (the recipe `AGENT_OVERRIDES` = `examples/agent.toml`): its base built
first by the committed script (`benchmarks/agent_base.py`, `build_agent_base`: `ensure_base` of the recipe's
`model.base`, cached), then GRPO over whole episodes in the sandbox, best checkpoint by the selection half.
Two modes, so that nothing reported was tuned on:
- `--select` (seeds 100-102 by default): measured on the *selection* half (the tasks best/ is chosen on). Use it to
  compare recipes; its figures are never the figure of record.
- `--report` (the default; seeds 1000-1004): the committed recipe on fresh seeds, each with its own base and its own
  held-out draw (the draw is seeded by the run's seed), measured on the *reporting* half, which no recipe was
  judged on: greedy episode success before (the base) and after (best/), sampled pass@1 too.
Every seed's figures, the mean, the worst, a Wilson 95% interval on each proportion, the greedy success by hop
count (the same reporting tasks, base and after), and the chance baseline: the analytic 1/36 (a value is one of 36
symbols) and an agent that submits a uniformly drawn symbol without reading, run through the same evaluation.
Every training episode is checked against an independent record of what the engine was given and sampled
(`tests/_harness/tito.py`: `RecordingEngine`, `tito_mismatch`; one segment per episode asserted under the recipe's linear policy).

    python benchmarks/agent_rl.py --select --set rl.lr=3e-4        # a recipe trial, selection half
    python benchmarks/agent_rl.py --report                         # the figure of record: 5 fresh seeds
    python benchmarks/agent_rl.py --report --seeds 1000 --steps 20

Last line, one JSON object: `agent_gain` (the worst seed's greedy gain, as a fraction), `mean_gain`, `mode`,
`chance` (analytic and measured), `tito_mismatches` (over `tito_episodes` training episodes), every seed's figures
with their intervals and hop counts, RL wall seconds per seed, and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))  # the shared test harnesses (`_harness`)


def by_hops(engine, tasks, spec, sandboxes) -> dict[int, list[int]]:
    """Greedy episode success per hop count: {hops: [solved, tasks]}. More than 10% of the episodes ending in an
    environment error raises: a closed or failing sandbox pool, not the model (no figure to report)."""
    from posttrain.eval.episodes import check_env_errors, evaluate_agent
    from posttrain.types import SamplingParams

    result = evaluate_agent(engine, tasks, spec, sandboxes.workspaces, sandboxes=sandboxes,
                            params=SamplingParams(temperature=0.0, max_tokens=spec.max_tokens))
    check_env_errors((ep for eps in result.episodes for ep in eps), 0.1)
    out: dict[int, list[int]] = {}
    for task, eps in zip(tasks, result.episodes):
        row = out.setdefault(int(task.meta["hops"]), [0, 0])
        row[0] += int(eps[0].passed)
        row[1] += 1
    return dict(sorted(out.items()))


def engine_for(path):
    from posttrain.engine.build import build_engine
    from posttrain.models.io import load_model

    model, tokenizer = load_model(path)
    return build_engine(None, model, tokenizer)


def blind_submitter(seed: int):
    """An agent that submits a uniformly drawn symbol at once, never reading: what chance scores in an episode."""
    import random

    from posttrain.agent import format as fmt
    from posttrain.agent.lookup import SYMBOLS
    from posttrain.agent.scripted import call
    from posttrain.engine.mock import MockEngine
    from posttrain.models.tokenizer import char_tokenizer

    rng = random.Random(seed)
    return MockEngine(lambda prompt: fmt.render_call(call("submit", answer=rng.choice(SYMBOLS))),
                      tokenizer=char_tokenizer(), max_concurrency=64)


def proportion(p: float, n: int) -> dict[str, float]:
    from posttrain.eval.metrics import wilson_interval

    i = wilson_interval(round(p * n), n)
    return {"rate": p, "lo": round(i.lo, 4), "hi": round(i.hi, 4), "n": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--select", action="store_true", help="measure on the selection half (recipe trials)")
    mode.add_argument("--report", action="store_true", help="measure on the reporting half (default)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="default: 100 101 102 with --select, 1000-1004 with --report (never the selection seeds)")
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the quickstart's)")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides, KEY=VALUE")
    ap.add_argument("--runs", default=None, help="where the runs go (default: a temporary directory)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base-seed", type=int, default=None,
                    help="one base model for every seed (default: each seed builds its own, as the quickstart does)")
    args = ap.parse_args()
    select = args.select
    seeds = args.seeds or ([100, 101, 102] if select else [1000, 1001, 1002, 1003, 1004])

    import tempfile

    import torch
    from agent_base import build_agent_base

    from _harness.tito import RecordingEngine, tito_mismatch
    from posttrain.agent.lookup import SYMBOLS
    from posttrain.config import load_config
    from posttrain.recipes.quickstart import AGENT_OVERRIDES, run_quickstart
    from posttrain.rl.build import build_sandboxes

    torch.set_num_threads(args.threads)
    runs = args.runs or tempfile.mkdtemp(prefix="agent-rl-")
    load_start = os.getloadavg()
    rows = []
    total_checked = total_bad = 0
    half = "selection" if select else "reporting"
    for seed in seeds:
        base_seed = seed if args.base_seed is None else args.base_seed
        base_sets = [s for s in args.set if s.startswith("model.base.")]
        base = build_agent_base(base_seed, base_sets, log=lambda line: print(line, flush=True))
        sets = [*AGENT_OVERRIDES, f"seed={seed}", f"model.base.seed={base_seed}", f"run_dir='{runs}'",
                f"name='agent-s{seed}'", "tensorboard=false", *args.set]
        if args.steps is not None:
            sets.append(f"train.steps={args.steps}")
        cfg = load_config(None, sets)
        tito = {"checked": 0, "bad": 0, "first": None}
        seen: dict = {}

        def prepare(trainer, tito=tito, seen=seen, seed=seed) -> None:
            rec = RecordingEngine(trainer.engine)
            trainer.rollouter.model = rec  # training episodes only: evaluation keeps the plain engine
            run = trainer.rollouter.run
            rewrites = trainer.rollouter.spec.policy.rewrites_history  # if not: one segment per episode, asserted

            async def checked_run(tasks, n):
                groups = await run(tasks, n)
                for g in groups:
                    for ep in g.episodes:
                        why = tito_mismatch(ep, rec.calls, rewrites)
                        tito["checked"] += 1
                        if why is not None:
                            tito["bad"] += 1
                            tito["first"] = tito["first"] or why
                rec.calls.clear()
                return groups

            trainer.rollouter.run = checked_run
            if select:  # the quickstart measures `trainer.reporting`: here, the half best/ is chosen on
                trainer.reporting = trainer.held_out
            spec, sandboxes = trainer.domains[0].agent, trainer.parts.sandboxes
            seen.update(trainer=trainer, tasks=list(trainer.reporting), spec=spec, sandboxes=sandboxes,
                        base_hops=by_hops(trainer.engine, trainer.reporting, spec, sandboxes),
                        blind=by_hops(blind_submitter(seed), trainer.reporting, spec, sandboxes))

        t0 = time.perf_counter()
        r = run_quickstart(cfg, prepare=prepare)
        trainer = seen["trainer"]
        after_dir = trainer.best_model_dir() if r.best_step != r.steps else None
        after_dir = after_dir or trainer.run_dir / "final"
        sandboxes = build_sandboxes(trainer.cfg)  # the run's pool is closed with its trainer
        try:
            after_hops = by_hops(engine_for(after_dir), seen["tasks"], seen["spec"], sandboxes)
        finally:
            sandboxes.close()
        n_tasks = r.n_held_out
        blind = sum(v[0] for v in seen["blind"].values()) / max(1, n_tasks)
        row = {"seed": seed, "base_seed": base_seed, "half": half, "greedy_before": proportion(r.greedy_before, n_tasks),
               "greedy_after": proportion(r.greedy_after, n_tasks), "gain": r.greedy_after - r.greedy_before,
               "pass1_before": r.pass1_before, "pass1_after": r.pass1_after, "greedy_final": r.greedy_final,
               "best_step": r.best_step, "steps": r.steps, "rl_seconds": r.train_seconds, "base": base,
               "by_hops_before": seen["base_hops"], "by_hops_after": after_hops, "blind_submitter": blind,
               "n": n_tasks, "tito_episodes": tito["checked"], "tito_mismatches": tito["bad"], "tito_first": tito["first"],
               "wall_seconds": time.perf_counter() - t0}
        rows.append(row)
        total_checked += tito["checked"]
        total_bad += tito["bad"]
        if not tito["checked"]:
            print(f"seed {seed}: token in, token out NOT checked (0 episodes: with rollout.mode = async the episodes "
                  "are sampled in producer processes, out of reach of this process's recording engine)", flush=True)
        b, a = row["greedy_before"], row["greedy_after"]
        hops = ", ".join(f"{h} hops {seen['base_hops'][h][0]}/{seen['base_hops'][h][1]} -> "
                         f"{after_hops.get(h, [0, 0])[0]}/{after_hops.get(h, [0, 0])[1]}" for h in seen["base_hops"])
        print(f"seed {seed} ({half} half, {n_tasks} tasks): greedy episode success {r.greedy_before:.3f} "
              f"[{b['lo']:.3f}, {b['hi']:.3f}] -> {r.greedy_after:.3f} [{a['lo']:.3f}, {a['hi']:.3f}] "
              f"({row['gain']:+.3f}); by hops: {hops}; blind submitter {blind:.3f}; pass@1 {r.pass1_before:.3f} -> "
              f"{r.pass1_after:.3f}, {r.steps} steps in {r.train_seconds:.0f}s (best step {r.best_step}), "
              f"tito {tito['bad']}/{tito['checked']}", flush=True)
    gains = [r["gain"] for r in rows]
    n_all = sum(r["n"] for r in rows)
    pooled_after = sum(round(r["greedy_after"]["rate"] * r["n"]) for r in rows) / n_all
    pooled_blind = sum(r["blind_submitter"] * r["n"] for r in rows) / n_all
    print(f"{half} half, {len(rows)} seeds: gains " + " / ".join(f"{g:+.3f}" for g in gains)
          + f"; mean {sum(gains) / len(gains):+.3f}, worst {min(gains):+.3f}; chance: 1/{len(SYMBOLS)} = "
          f"{1 / len(SYMBOLS):.3f}, blind submitter {pooled_blind:.3f}", flush=True)
    print(json.dumps({
        "mode": "select" if select else "report", "agent_gain": min(gains), "mean_gain": sum(gains) / len(gains),
        "pooled_after": proportion(pooled_after, n_all),
        "chance": {"analytic": 1 / len(SYMBOLS), "blind_submitter": proportion(pooled_blind, n_all)},
        "tito_mismatches": total_bad, "tito_episodes": total_checked,
        "max_rl_seconds": max(r["rl_seconds"] for r in rows), "seeds": rows, "threads": args.threads,
        "load_start": load_start, "load_end": os.getloadavg(),
    }, default=str))


if __name__ == "__main__":
    main()
