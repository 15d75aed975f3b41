"""The quickstart's figures for several seeds, each from an empty base-model cache.

Runs `posttrain quickstart --seed S --json` as a fresh process per seed with
POSTTRAIN_CACHE pointing at a new empty directory, so every run includes the
base model's pre-training, as on a fresh install. Prints one line per seed and,
last, one JSON object with the per-seed results and the medians of
`greedy_gain`, `pass1_gain` (points) and `seconds`.

    python benchmarks/quickstart.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra --set overrides")
    args = ap.parse_args()
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as runs:
            env = {**os.environ, "POSTTRAIN_CACHE": cache}
            cmd = [sys.executable, "-m", "posttrain.cli", "quickstart", "--seed", str(seed), "--json",
                   "--set", f"run_dir='{runs}'"]
            for o in args.overrides:
                cmd += ["--set", o]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"quickstart failed for seed {seed}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["greedy_gain"] = 100 * (r["greedy_after"] - r["greedy_before"])
        r["pass1_gain"] = 100 * (r["pass1_after"] - r["pass1_before"])
        rows.append(r)
        print(
            f"seed {seed}: greedy {r['greedy_before']:.3f} -> {r['greedy_after']:.3f} ({r['greedy_gain']:+.1f} pts), "
            f"pass@1 {r['pass1_before']:.3f} -> {r['pass1_after']:.3f} ({r['pass1_gain']:+.1f} pts), "
            f"{r['seconds']:.0f}s total (base {r['base_seconds']:.0f}s, GRPO {r['train_seconds']:.0f}s, {r['steps']} steps)",
            flush=True,
        )
    keep = ("seed", "greedy_before", "greedy_after", "pass1_before", "pass1_after", "seconds", "base_seconds", "train_seconds")
    print(json.dumps({
        "greedy_gain": statistics.median(r["greedy_gain"] for r in rows),
        "pass1_gain": statistics.median(r["pass1_gain"] for r in rows),
        "seconds": statistics.median(r["seconds"] for r in rows),
        "min_greedy_gain": min(r["greedy_gain"] for r in rows),
        "min_pass1_gain": min(r["pass1_gain"] for r in rows),
        "max_seconds": max(r["seconds"] for r in rows),
        "runs": [{k: r[k] for k in keep} for r in rows],
    }))


if __name__ == "__main__":
    main()
