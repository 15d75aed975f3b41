"""Pre-training curve of a built-in base model: held-out accuracy every K steps for a fixed step budget.

A tool for choosing a family's base settings (`config.FAMILY_BASE_DEFAULTS`, docs/recipe.md): it runs the
same `builtin.pretrain_base` a base build runs, with the band stop switched off (target 1.0), so the whole
curve is seen rather than the first check that lands in the band. Accuracy is on the base's stopping set
(never the RL run's held-out problems).

    python benchmarks/base_curve.py --family mul --steps 1500 --every 100 --lr 1e-3 --threads 1

Prints one JSON object per check, and last one with the settings, the final accuracy and the seconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from posttrain.config import BaseModelConfig
from posttrain.recipes import builtin


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="mul")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--every", type=int, default=100, help="held-out check every K steps")
    # unset: the base model's own defaults (config.BaseModelConfig, with the family's FAMILY_BASE_DEFAULTS)
    ap.add_argument("--lr", type=float, default=None, help="pre-training rate")
    ap.add_argument("--hidden", type=int, default=None, help="hidden_size")
    ap.add_argument("--layers", type=int, default=None, help="num_layers")
    ap.add_argument("--intermediate", type=int, default=None, help="intermediate_size")
    ap.add_argument("--worked", action="store_true", help="mul: worked solutions (BaseModelConfig.worked)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    given = {"lr": args.lr, "hidden_size": args.hidden, "num_layers": args.layers,
             "intermediate_size": args.intermediate,
             "worked": args.worked or None}
    cfg = BaseModelConfig(family=args.family, max_steps=args.steps, target_low=1.0, target_high=1.0,
                          eval_every=args.every, seed=args.seed, **{k: v for k, v in given.items() if v is not None})
    t0 = time.perf_counter()

    def on_eval(step: int, acc: float) -> None:
        print(json.dumps({"step": step, "accuracy": round(acc, 4), "s": round(time.perf_counter() - t0, 1)}),
              flush=True)

    with tempfile.TemporaryDirectory() as d:
        acc, n = builtin.pretrain_base(cfg, Path(d), on_eval)
    print(json.dumps({"family": cfg.family, "lr": cfg.lr, "hidden": cfg.hidden_size, "layers": cfg.num_layers,
                      "intermediate": cfg.intermediate_size, "seed": cfg.seed, "steps": n, "final_accuracy": round(acc, 4),
                      "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
