"""Multi-turn RL on the built-in agent domain: held-out episode success before and after, per seed, and
token-in-token-out checked on every training episode.

Each seed is `posttrain quickstart --agent` (the built-in lookup base for that seed, built once per machine
and cached; then GRPO over whole episodes in the sandbox, best checkpoint by the selection half), measured
on the reporting half of the held-out tasks: greedy episode success before (the base) and after (the best
checkpoint), sampled pass@1 too. The baseline in the same run: the same base answering the same held-out
tasks in one turn, without tools (the domain's single-response view): the value exists only in the
workspace, so this is chance. Every training episode is checked against an independent record of what the
engine was given and sampled (`agent.tito.RecordingEngine`, `tito_mismatch`).

    python benchmarks/agent_rl.py                 # seeds 0 1 2, the quickstart's recipe
    python benchmarks/agent_rl.py --seeds 0 --steps 20
    python benchmarks/agent_rl.py --base-seed 0           # three RL seeds from one base

Last line, one JSON object: `agent_gain` (the worst seed's greedy gain, as a fraction), `tito_mismatches`
(over `tito_episodes` training episodes), every seed's figures, RL wall seconds per seed, and the load.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the quickstart's)")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides, KEY=VALUE")
    ap.add_argument("--runs", default=None, help="where the runs go (default: a temporary directory)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base-seed", type=int, default=None,
                    help="one base model for every seed (default: each seed builds its own, as the quickstart does)")
    args = ap.parse_args()

    import tempfile

    import torch

    from posttrain.agent.tito import RecordingEngine, tito_mismatch
    from posttrain.config import load_config
    from posttrain.eval.accuracy import evaluate_accuracy
    from posttrain.quickstart import AGENT_OVERRIDES, run_quickstart

    torch.set_num_threads(args.threads)
    runs = args.runs or tempfile.mkdtemp(prefix="agent-rl-")
    load_start = os.getloadavg()
    seeds = []
    total_checked = total_bad = 0
    for seed in args.seeds:
        base_seed = seed if args.base_seed is None else args.base_seed
        sets = [*AGENT_OVERRIDES, f"seed={seed}", f"model.base.seed={base_seed}", f"run_dir='{runs}'",
                f"name='agent-s{seed}'", "tensorboard=false", *args.set]
        if args.steps is not None:
            sets.append(f"train.steps={args.steps}")
        cfg = load_config(None, sets)
        tito = {"checked": 0, "bad": 0, "first": None}
        chance: dict[str, float] = {}

        def prepare(trainer, tito=tito, chance=chance) -> None:
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
            # the baseline: one turn, no tools, the same reporting tasks, judged by the domain's own verifier
            chance["single_turn"] = evaluate_accuracy(trainer.engine, trainer.reporting, trainer.verifier,
                                                      max_tokens=8).accuracy

        t0 = time.perf_counter()
        r = run_quickstart(cfg, prepare=prepare)
        row = {"seed": seed, "base_seed": base_seed, "greedy_before": r.greedy_before, "greedy_after": r.greedy_after,
               "gain": r.greedy_after - r.greedy_before, "pass1_before": r.pass1_before, "pass1_after": r.pass1_after,
               "greedy_final": r.greedy_final, "best_step": r.best_step, "steps": r.steps,
               "rl_seconds": r.train_seconds, "base_seconds": r.base_seconds, "base_cached": r.base_cached,
               "base_in_band": r.base_in_band, "n_reporting": r.n_held_out, "single_turn_baseline": chance["single_turn"],
               "tito_episodes": tito["checked"], "tito_mismatches": tito["bad"], "tito_first": tito["first"],
               "wall_seconds": time.perf_counter() - t0}
        seeds.append(row)
        total_checked += tito["checked"]
        total_bad += tito["bad"]
        if not tito["checked"]:
            print(f"seed {seed}: token in, token out NOT checked (0 episodes: with rollout.mode = async the episodes "
                  "are sampled in producer processes, out of reach of this process's recording engine)", flush=True)
        print(f"seed {seed}: greedy episode success {r.greedy_before:.3f} -> {r.greedy_after:.3f} "
              f"({row['gain']:+.3f}; single-turn baseline {chance['single_turn']:.3f}), pass@1 {r.pass1_before:.3f} -> "
              f"{r.pass1_after:.3f}, {r.steps} steps in {r.train_seconds:.0f}s (best step {r.best_step}), "
              f"tito {tito['bad']}/{tito['checked']}", flush=True)
    print(json.dumps({
        "agent_gain": min(s["gain"] for s in seeds), "tito_mismatches": total_bad, "tito_episodes": total_checked,
        "mean_gain": sum(s["gain"] for s in seeds) / len(seeds), "max_rl_seconds": max(s["rl_seconds"] for s in seeds),
        "seeds": seeds, "threads": args.threads, "load_start": load_start, "load_end": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
