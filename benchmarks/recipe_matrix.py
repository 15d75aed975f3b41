"""The robustness matrix: the default recipe on every built-in single-turn family x several seeds.

Each cell is one `posttrain quickstart --json` process (base model built per family and seed, in a cache
shared by the cells), so a cell is exactly what a user gets from changing only the task family:
held-out greedy accuracy and sampled pass@1 before (the base) and after (the best checkpoint, selected on
the selection half of the held-out problems), both measured on the reporting half, which selection never
sees; plus the selection-half curve every `--eval-every` steps from the run store.

    python benchmarks/recipe_matrix.py                      # 6 families x 3 seeds, each recipe's own steps
    python benchmarks/recipe_matrix.py --families add sub --seeds 0 --steps 100 --eval-size 200

Prints one line per cell and, last, one JSON object: `worst_gain`, `mean_gain` (greedy, as fractions),
`worst_pass1_gain`, `cells`, `regressions` (cells whose reported model, `best/`, is below its base: `best/` is
chosen among checkpoints that include the step-0 base, so this can only count a selection-half/reporting-half
disagreement), `final_regressions` (cells whose final weights are below the base: a run that only hurt shows
here, never in `regressions`) with `worst_final_gain`, the settings,
the machine's load average at start and end, and every cell.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ["add", "sub", "addsub", "mul", "chain", "code:ops"]


def cell_args(family: str, seed: int, args: argparse.Namespace, runs: str) -> list[str]:
    """A user's quickstart for this family: nothing but the family (and, for code, its example config) changes;
    `--steps`, `--eval-every`, `--eval-size` override the recipe's own values only when given."""
    sets = [f"run_dir='{runs}'", f"name='{family.replace(':', '-')}-s{seed}'", "tensorboard=false"]
    for key, value in (("train.steps", args.steps), ("eval.every", args.eval_every), ("eval.size", args.eval_size)):
        if value is not None:
            sets.append(f"{key}={value}")
    cmd = [sys.executable, "-m", "posttrain.cli", "quickstart", "--seed", str(seed), "--json"]
    if family.startswith("code:"):
        cmd += ["--config", str(REPO / "examples" / "code.toml")]
        sets += [f"tasks.source='{family}'", f"model.base.family='{family}'"]
    else:
        sets += [f"tasks.source='arith:{family}'", f"model.base.family='{family}'"]
    for s in sets + args.set:
        cmd += ["--set", s]
    return cmd


def curve(run_dir: Path) -> list[tuple[int, float]]:
    db = sqlite3.connect(run_dir / "run.sqlite")
    rows = db.execute("SELECT step, metrics FROM evals WHERE name = 'held_out' ORDER BY step").fetchall()
    db.close()
    return [(s, json.loads(m)["greedy_accuracy"]) for s, m in rows]


def run_cell(family: str, seed: int, args: argparse.Namespace, runs: str, env: dict[str, str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(cell_args(family, seed, args, runs), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{family} seed {seed}: FAILED\n{proc.stderr[-2000:]}", file=sys.stderr, flush=True)
        return {"family": family, "seed": seed, "failed": True}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    cell = {
        "family": family, "seed": seed,
        "greedy_before": r["greedy_before"], "greedy_after": r["greedy_after"],
        "pass1_before": r["pass1_before"], "pass1_after": r["pass1_after"],
        "greedy_final": r["greedy_final"], "best_step": r["best_step"], "base_in_band": r["base_in_band"],
        "n_reporting": r["n_held_out"], "n_selection": r["n_selection"],
        "curve": curve(Path(r["run_dir"])), "seconds": round(time.perf_counter() - t0, 1),
        "sets": args.set, "tag": args.tag,
    }
    cell["gain"] = cell["greedy_after"] - cell["greedy_before"]
    cell["pass1_gain"] = cell["pass1_after"] - cell["pass1_before"]
    print(f"{family:>8} seed {seed}: greedy {cell['greedy_before']:.3f} -> {cell['greedy_after']:.3f} "
          f"({cell['gain']:+.3f}, best step {cell['best_step']}, final {cell['greedy_final']:.3f}), "
          f"pass@1 {cell['pass1_before']:.3f} -> {cell['pass1_after']:.3f}, base in band: "
          f"{cell['base_in_band']}, {cell['seconds']:.0f}s  curve {cell['curve']}", flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(cell) + "\n")
    return cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", nargs="+", default=FAMILIES)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help="RL steps (default: the recipe's: 300; code.toml: 100)")
    ap.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every K steps (default 50)")
    ap.add_argument("--eval-size", type=int, default=None,
                    help="held-out problems per cell, split selection/reporting (default 500; code.toml: 200)")
    ap.add_argument("--cache", default=None, help="base-model cache (default: a fresh temporary directory)")
    ap.add_argument("--set", action="append", default=[], help="extra --set overrides for every cell")
    ap.add_argument("--jobs", type=int, default=2, help="cells run at once (each with --threads torch threads)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per cell (OMP_NUM_THREADS)")
    ap.add_argument("--tag", default="", help="a label stored with every cell (for comparing recipes)")
    ap.add_argument("--out", default=None, help="also append every finished cell to this JSONL file")
    ap.add_argument("--summarize", default=None, metavar="JSONL", help="only summarise cells stored by --out")
    ap.add_argument("--tags", nargs="*", default=[], help="with --summarize: only cells with these tags")
    args = ap.parse_args()
    if args.summarize:
        summarize(args.summarize, args.tags)
        return
    load_start = os.getloadavg()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache or str(Path(tmp) / "cache")
        runs = str(Path(tmp) / "runs")
        env = {**os.environ, "POSTTRAIN_CACHE": cache, "PYTHONPATH": str(REPO / "src"),
               "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
        todo = [(family, seed) for family in args.families for seed in args.seeds]
        # a family's seeds share nothing, but two cells of one base key would build it twice: the base cache's
        # lock makes the second wait, so cells are ordered family-major and run `--jobs` at a time
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            cells = list(pool.map(lambda fs: run_cell(fs[0], fs[1], args, runs, env), todo))
    print(json.dumps({**summary(cells), "steps": args.steps, "eval_size": args.eval_size,
                      "seconds": round(time.perf_counter() - start, 1), "load_start": load_start,
                      "load_end": os.getloadavg(), "cells_detail": cells}))


def summary(cells: list[dict]) -> dict:
    """The matrix's figures over its cells (failed cells counted apart, never as gains)."""
    done = [c for c in cells if not c.get("failed")]
    finals = [c for c in done if c.get("greedy_final") is not None]
    gains = [c["gain"] for c in done]
    return {
        "worst_gain": min(gains) if gains else None,
        "mean_gain": statistics.fmean(gains) if gains else None,
        "worst_pass1_gain": min(c["pass1_gain"] for c in done) if done else None,
        "cells": len(done),
        "failed_cells": len(cells) - len(done),
        "regressions": sum(c["greedy_after"] < c["greedy_before"] for c in done),
        "final_regressions": sum(c["greedy_final"] < c["greedy_before"] for c in finals),
        "worst_final_gain": min((c["greedy_final"] - c["greedy_before"] for c in finals), default=None),
        "bases_out_of_band": sum(not c["base_in_band"] for c in done),
    }


def summarize(path: str, tags: list[str]) -> None:
    """Re-read cells appended by `--out` (several invocations, e.g. a matrix run in parts): a table, then the
    same JSON figures; a (family, seed) measured twice keeps its last cell."""
    cells: dict[tuple[str, int], dict] = {}
    for line in Path(path).read_text().splitlines():
        c = json.loads(line)
        if not tags or c.get("tag") in tags:
            cells[(c["family"], c["seed"])] = c
    rows = sorted(cells.values(), key=lambda c: (FAMILIES.index(c["family"]), c["seed"]))
    print("| family | seed | greedy base -> best/ (gain) | pass@1 base -> best/ (gain) | best step | final model "
          "| curve (selection half) | s |")
    print("|---|---|---|---|---|---|---|---|")
    for c in rows:
        curve_s = " ".join(f"{100 * v:.1f}" for _, v in c["curve"])
        print(f"| {c['family']} | {c['seed']} | {100 * c['greedy_before']:.1f} -> {100 * c['greedy_after']:.1f} "
              f"({100 * c['gain']:+.1f}) | {100 * c['pass1_before']:.1f} -> {100 * c['pass1_after']:.1f} "
              f"({100 * c['pass1_gain']:+.1f}) | {c['best_step']} | {100 * c['greedy_final']:.1f} | {curve_s} | "
              f"{c['seconds']:.0f} |")
    print(json.dumps({**summary(rows), "cell_seconds": round(sum(c["seconds"] for c in rows), 1),
                      "tags": tags, "assembled_from": path}))

if __name__ == "__main__":
    main()
