"""Build the built-in agent base (`agent:lookup`, `model.base.family = "lookup"`) the agent RL benchmark starts from.

The base of a seed is exactly the one `posttrain quickstart --agent` (the recipe `quickstart.AGENT_OVERRIDES`,
`examples/agent.toml`) builds for it: `builtin.ensure_base` of that run's `model.base`, content-addressed in the
cache, so `benchmarks/agent_rl.py` (which calls `build_agent_base` before each seed) and the quickstart reuse it.
Held-out greedy episode success on the base's stopping set (real episodes in the sandbox, never the RL run's
held-out tasks) is printed at every band check.

    python benchmarks/agent_base.py --seeds 0 --threads 1 --cache /work/cache_agent
    python benchmarks/agent_base.py --seeds 3 4 --set model.base.max_steps=1500

Last line, one JSON object: per seed the steps, held-out episode success at the stop, whether it is in the band,
the seconds, whether it came from the cache, and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def agent_base_config(seed: int, sets: list[str] = ()) -> Any:
    """The recipe's `model.base` for base seed `seed`, with config overrides `sets` (KEY=VALUE) applied on top."""
    from posttrain.config import load_config
    from posttrain.recipes.quickstart import AGENT_OVERRIDES

    return load_config(None, [*AGENT_OVERRIDES, f"model.base.seed={seed}", *sets]).model.base


def build_agent_base(seed: int, sets: list[str] = (), log=print) -> dict[str, Any]:
    """Build (or find cached) the recipe's base for `seed`; its figures as one row."""
    from posttrain.recipes.builtin import ensure_base

    cfg = agent_base_config(seed, sets)
    t0 = time.perf_counter()

    def on_eval(step: int, acc: float) -> None:
        log(json.dumps({"seed": seed, "step": step, "held_out_episode_success": round(acc, 4),
                        "s": round(time.perf_counter() - t0, 1), "load": os.getloadavg()[0]}))

    b = ensure_base(cfg, on_eval=on_eval)
    return {"seed": seed, "path": str(b.path), "steps": b.steps, "held_out_episode_success": b.accuracy,
            "in_band": b.in_band, "band": [cfg.target_low, cfg.target_high], "seconds": b.seconds, "cached": b.cached,
            "hops": cfg.digits, "stopping_set": cfg.eval_size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default=None, help="model.base.cache_dir (default: $POSTTRAIN_CACHE or ~/.cache/posttrain)")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides, KEY=VALUE")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    sets = list(args.set) + ([f"model.base.cache_dir='{args.cache}'"] if args.cache else [])
    load_start = os.getloadavg()
    rows = [build_agent_base(seed, sets, log=lambda line: print(line, flush=True)) for seed in args.seeds]
    for r in rows:
        print(f"seed {r['seed']}: held-out episode success {r['held_out_episode_success']:.3f} after {r['steps']} steps "
              f"({'in' if r['in_band'] else 'OUT OF'} band {r['band']}), {r['seconds']:.0f}s"
              + (" (cached)" if r["cached"] else ""), flush=True)
    print(json.dumps({"bases": rows, "threads": args.threads, "load_start": load_start, "load_end": os.getloadavg()}))


if __name__ == "__main__":
    main()
