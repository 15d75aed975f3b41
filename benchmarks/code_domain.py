"""The code-writing domain's before/after figures: examples/code.toml, each seed from an empty base cache.

For each seed: pre-train the built-in code base (`model.base.family = "code:ops"`) until its
held-out pass rate is in the band, measure it on the held-out problems (greedy pass rate and
sampled pass@1, every program run against its tests in the sandbox), run GRPO, measure again
on the same problems. The baseline is the base model measured in the same run. Prints one
line per seed and, last, one JSON object with the medians.

    nice -n 5 python benchmarks/code_domain.py [--seeds 0 1 2] [--set train.steps=150]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "code.toml"


def main() -> None:
    from posttrain.config import load_config
    from posttrain.recipes.quickstart import run_quickstart

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra config overrides")
    args = ap.parse_args()
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as runs:
            cfg = load_config(EXAMPLE, [f"seed={seed}", f"model.base.seed={seed}", f"model.base.cache_dir='{cache}'",
                                        f"run_dir='{runs}'", "tensorboard=false", *args.overrides])
            r = run_quickstart(cfg).to_dict()
        r["greedy_gain"] = 100 * (r["greedy_after"] - r["greedy_before"])
        r["pass1_gain"] = 100 * (r["pass1_after"] - r["pass1_before"])
        r["greedy_ratio"] = r["greedy_after"] / max(r["greedy_before"], 1e-9)
        rows.append(r)
        print(
            f"seed {seed}: greedy pass rate {r['greedy_before']:.3f} -> {r['greedy_after']:.3f} ({r['greedy_gain']:+.1f} pts), "
            f"sampled pass@1 {r['pass1_before']:.3f} -> {r['pass1_after']:.3f} ({r['pass1_gain']:+.1f} pts), "
            f"{r['seconds']:.0f}s total (base {r['base_seconds']:.0f}s, GRPO {r['train_seconds']:.0f}s, {r['steps']} steps, "
            f"{r['n_held_out']} held-out problems)",
            flush=True,
        )
    keep = ("seed", "greedy_before", "greedy_after", "pass1_before", "pass1_after", "seconds", "base_seconds", "train_seconds")
    print(json.dumps({
        "greedy_gain": statistics.median(r["greedy_gain"] for r in rows),
        "pass1_gain": statistics.median(r["pass1_gain"] for r in rows),
        "greedy_ratio": statistics.median(r["greedy_ratio"] for r in rows),
        "seconds": statistics.median(r["seconds"] for r in rows),
        "min_greedy_gain": min(r["greedy_gain"] for r in rows),
        "runs": [{k: r[k] for k in keep} for r in rows],
    }))


if __name__ == "__main__":
    main()
