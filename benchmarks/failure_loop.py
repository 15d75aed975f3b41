"""The failure loop closed (issue 36's `failure_suite_gain`): mine a run's failures, export them, train on them,
evaluate on the exported suite's held-out half.

Per seed, every stage through the CLI a user runs:
1. a mining run: the addition recipe (`examples/addition.toml`, the built-in base) with `train.curriculum =
   "scheduler"`, so every failed trajectory is categorised and stored;
2. `posttrain failures RUN --since S --min-fail-rate R --export FILE`: the tasks its late policy (steps >= S, the
   last quarter) still failed in at least a share R of their samples (0.5; 0 exports every task with one failed
   sample, which the start model mostly solves greedily: a suite of sampling slips), split by a hash of the task id
   into a training half and a held-out half, the failure suite;
3. from the mining run's final model, arm F trains on the training half beside the ordinary domain (equal weights),
   arm C on the ordinary domain alone, the same steps and recipe (both fixed before any run);
4. greedy evaluation (`posttrain eval --json`) of the start model, F and C on both halves of the suite and on the
   ordinary held-out problems (`arith:add`'s held-out split, never trained on by any run).
`failure_suite_gain` = F - start on the whole exported suite (points: what the issue asks, the failures fixed,
the half F trained on included); `failure_heldout_gain` = F - start on the held-out half alone (whether fixing
failures carries over to failures not trained on); `ordinary_regression` = start - F on the ordinary held-out
problems (goal <= 1 point); beside them `failure_vs_control` = F - C on the held-out half: what the failure
curriculum adds over as much training without it. Each half's pass rates with 95% Wilson interval bounds.

    python benchmarks/failure_loop.py [--seeds 1 2 3] [--mine-steps 400] [--steps 100] [--min-fail-rate 0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from posttrain.eval.metrics import wilson_interval
from posttrain.tasks.base import split_of

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "examples" / "addition.toml"
ORDINARY = 'source="arith:add", options={digits=2, held_out_fraction=0.15}'


def _cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "posttrain.cli", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"posttrain {' '.join(args[:2])} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def train(name: str, out: Path, seed: int, sets: list[str]) -> Path:
    t0 = time.perf_counter()
    _cli("train", str(RECIPE), "--set", f"run_dir='{out}'", "--set", f"name='{name}'", "--set", f"seed={seed}",
         "--set", "tensorboard=false", *[x for s in sets for x in ("--set", s)])
    print(f"  {name}: trained in {time.perf_counter() - t0:.0f} s", flush=True)
    return out / name


def greedy(model: Path, suite: str, out: Path) -> tuple[int, int]:
    """(passed, tasks) of one greedy sample per task."""
    last = _cli("eval", "--model", str(model), "--suite", suite, "--temperature", "0", "--samples", "1", "--json",
                "--out", str(out)).strip().splitlines()[-1]
    r = json.loads(last)
    return round(r["pass@1"] * r["n_tasks"]), r["n_tasks"]


def split_suite(suite: Path) -> tuple[Path, Path, int, int]:
    """The exported suite's training half and held-out half (by a hash of the task id)."""
    lines = [x for x in suite.read_text().splitlines() if x.strip()]
    halves: dict[str, list[str]] = {"train": [], "held_out": []}
    for x in lines:
        halves[split_of(json.loads(x)["id"], 0.5)].append(x)
    train_path, test_path = suite.with_name("suite_train.jsonl"), suite.with_name("suite_test.jsonl")
    train_path.write_text("\n".join(halves["train"]) + "\n")
    test_path.write_text("\n".join(halves["held_out"]) + "\n")
    return train_path, test_path, len(halves["train"]), len(halves["held_out"])


def one_seed(seed: int, out: Path, mine_steps: int, steps: int, min_fail_rate: float) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    mined = train("mine", out, seed, ["train.curriculum='scheduler'", f"train.steps={mine_steps}",
                                      f"train.checkpoint_every={mine_steps}"])
    since = mine_steps - mine_steps // 4
    exported = json.loads(_cli("failures", str(mined), "--since", str(since), "--min-fail-rate", str(min_fail_rate),
                               "--export", str(out / "suite.jsonl"),
                               "--json"))
    train_half, test_half, n_train, n_test = split_suite(out / "suite.jsonl")
    print(f"  suite: {exported['export']['tasks']} tasks failed at steps >= {since} "
          f"({exported['by_category']}); {n_train} to train on, {n_test} held out", flush=True)
    start = mined / "final"
    arm = [f"train.steps={steps}", f"train.checkpoint_every={steps}", "eval.every=0",
           "eval.at_start=false", f"model.path='{start}'"]
    f = train("failures", out, seed, arm + [f'domains=[{{source="{train_half}", options={{held_out_fraction=0.01}}}},'
                                            f' {{{ORDINARY}}}]'])
    c = train("control", out, seed, arm + [f"domains=[{{{ORDINARY}}}]"])
    res: dict[str, dict[str, tuple[int, int]]] = {}
    for label, model in (("start", start), ("failures", f / "final"), ("control", c / "final")):
        res[label] = {"suite": greedy(model, str(test_half), out / f"eval-{label}-suite"),
                      "trained": greedy(model, str(train_half), out / f"eval-{label}-trained"),
                      "ordinary": greedy(model, "arith:add", out / f"eval-{label}-ordinary")}
        print(f"  {label}: suite {res[label]['suite']}, trained half {res[label]['trained']}, "
              f"ordinary {res[label]['ordinary']}", flush=True)
    acc = {k: {s: p / n for s, (p, n) in v.items()} for k, v in res.items()}

    def whole(label: str) -> float:
        (p1, n1), (p2, n2) = res[label]["suite"], res[label]["trained"]
        return (p1 + p2) / (n1 + n2)

    row = {"seed": seed, "min_fail_rate": min_fail_rate, "suite_tasks": n_test, "suite_train_tasks": n_train, "since": since,
           "failure_suite_gain": 100 * (whole("failures") - whole("start")),
           "failure_heldout_gain": 100 * (acc["failures"]["suite"] - acc["start"]["suite"]),
           "failure_trained_gain": 100 * (acc["failures"]["trained"] - acc["start"]["trained"]),
           "ordinary_regression": 100 * (acc["start"]["ordinary"] - acc["failures"]["ordinary"]),
           "failure_vs_control": 100 * (acc["failures"]["suite"] - acc["control"]["suite"]),
           "control_suite_gain": 100 * (acc["control"]["suite"] - acc["start"]["suite"]),
           "counts": res}
    for k in ("start", "failures", "control"):
        for half in ("suite", "trained"):
            p, n = res[k][half]
            ci = wilson_interval(p, n)
            row[f"{k}_{half}_ci"] = [round(100 * ci.lo, 1), round(100 * ci.hi, 1)]
    print(f"seed {seed}: failure_suite_gain {row['failure_suite_gain']:+.1f} pts on the whole suite (trained half "
          f"{100 * acc['start']['trained']:.1f} -> {100 * acc['failures']['trained']:.1f}); held-out half "
          f"{100 * acc['start']['suite']:.1f} -> {100 * acc['failures']['suite']:.1f} on {n_test} failures "
          f"({row['failure_heldout_gain']:+.1f}; control {100 * acc['control']['suite']:.1f}), ordinary held-out "
          f"{100 * acc['start']['ordinary']:.1f} -> "
          f"{100 * acc['failures']['ordinary']:.1f} (regression {row['ordinary_regression']:+.1f})", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--mine-steps", type=int, default=400)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--min-fail-rate", type=float, default=0.5)
    ap.add_argument("--out", type=Path, default=Path("runs") / f"failure-loop-{time.strftime('%H%M%S')}")
    a = ap.parse_args()
    rows = [one_seed(s, a.out / f"seed{s}", a.mine_steps, a.steps, a.min_fail_rate) for s in a.seeds]
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    print(json.dumps({"failure_suite_gain": med("failure_suite_gain"),
                      "min_failure_suite_gain": min(r["failure_suite_gain"] for r in rows),
                      "failure_heldout_gain": med("failure_heldout_gain"),
                      "ordinary_regression": med("ordinary_regression"),
                      "max_ordinary_regression": max(r["ordinary_regression"] for r in rows),
                      "failure_vs_control": med("failure_vs_control"), "runs": rows}))


if __name__ == "__main__":
    main()
