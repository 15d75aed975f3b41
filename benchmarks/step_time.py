"""Per-step training time of two source trees on the same run: the guard that a refactor costs no speed.

Runs the addition recipe (`examples/addition.toml`: 16 prompts x 16 samples, 8 tokens, GRPO) for
`--steps` steps from each tree in a fresh process (`PYTHONPATH=<tree>/src`), the trees alternating run by
run (A, B, A, B, ...) so both sides see the same machine, with the same initial weights (`--model`, an
HF checkpoint: the built-in base model by default), seed and interpreter. Only `Trainer.train_step` is
timed (no evaluation, no checkpoint, no start-up; one discarded warm-up run per tree first, so each
tree's compiled decode kernel is built before the clock), in wall seconds and in process CPU seconds (all
threads; less sensitive to other load than wall time). Prints every run and, last, one JSON object with
the medians per tree, their ratios (B / A) and the load average at start and end.

    python benchmarks/step_time.py --a /path/to/old/checkout --b . --runs 3 --steps 300
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
from posttrain.config import ConfigError, load_config
from posttrain.rl.trainer import Trainer
common = [f"model.path='{sys.argv[2]}'", f"run_dir='{sys.argv[3]}'", f"train.steps={sys.argv[4]}",
          "train.checkpoint_every=0", "tensorboard=false"]
try:
    cfg = load_config(sys.argv[1], common + ["eval.every=0"])
except ConfigError:  # a tree from before the [eval] section
    cfg = load_config(sys.argv[1], common + ["train.eval_every=0"])
trainer = Trainer(cfg, overwrite=True)
wall = cpu = 0.0
for _ in range(cfg.train.steps):
    w, c = time.perf_counter(), time.process_time()
    trainer.train_step()
    wall += time.perf_counter() - w
    cpu += time.process_time() - c
trainer.close()
print(json.dumps({"wall_per_step_ms": 1e3 * wall / cfg.train.steps, "cpu_per_step_ms": 1e3 * cpu / cfg.train.steps}))
"""


def run(tree: Path, model: str, steps: int, config: Path) -> dict:
    with tempfile.TemporaryDirectory() as runs:
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        proc = subprocess.run([sys.executable, "-c", CHILD, str(config), model, runs, str(steps)], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: {proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])


def config_of(tree: Path) -> Path:
    """Each tree's own `examples/addition.toml` (the same recipe; its keys follow that tree's config sections)."""
    return tree / "examples" / "addition.toml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="the baseline checkout")
    ap.add_argument("--b", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout measured")
    ap.add_argument("--model", default=None, help="initial weights (default: the built-in base model, seed 0)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    model = args.model
    if model is None:
        from posttrain.config import BaseModelConfig
        from posttrain.recipes.builtin import ensure_base

        model = str(ensure_base(BaseModelConfig()).path)
    for side in ("a", "b"):  # warm-up, discarded: each tree builds (or finds) its compiled decode kernel
        run(getattr(args, side), model, 2, config_of(getattr(args, side)))
    load_start = os.getloadavg()
    results: dict[str, list[dict]] = {"a": [], "b": []}
    for i in range(args.runs):
        for side in ("a", "b"):
            r = run(getattr(args, side), model, args.steps, config_of(getattr(args, side)))
            results[side].append(r)
            print(f"run {i} {side}: {r['wall_per_step_ms']:.1f} ms/step wall, {r['cpu_per_step_ms']:.1f} ms/step CPU",
                  flush=True)
    med = {s: {k: statistics.median(r[k] for r in rs) for k in ("wall_per_step_ms", "cpu_per_step_ms")}
           for s, rs in results.items()}
    print(json.dumps({
        "wall_ratio": med["b"]["wall_per_step_ms"] / med["a"]["wall_per_step_ms"],
        "cpu_ratio": med["b"]["cpu_per_step_ms"] / med["a"]["cpu_per_step_ms"],
        "a": med["a"], "b": med["b"], "runs": results, "steps": args.steps, "model": model,
        "load_start": load_start, "load_end": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
