"""Hidden checks for this task: each check passes or fails on its own; the exit status is 0 only when all pass."""
import json
import os
import subprocess
import sys

APP = "/app"
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def run(cmd, timeout=30, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", APP), capture_output=True, text=True, timeout=timeout, **kw)


def report(partial=False):
    passed = 0
    for fn in CHECKS:
        try:
            fn()
            passed += 1
            print("PASS", fn.__name__)
        except Exception as e:  # a failing check is a result, not a crash
            print("FAIL", fn.__name__, type(e).__name__, str(e)[:300])
    print(f"{passed}/{len(CHECKS)} checks passed")
    if partial:
        os.makedirs("/logs/verifier", exist_ok=True)
        with open("/logs/verifier/reward.json", "w") as f:
            json.dump({"reward": round(passed / len(CHECKS), 4), "checks_passed": passed, "checks": len(CHECKS)}, f)
    sys.exit(0 if passed == len(CHECKS) else 1)

sys.path.insert(0, APP)
from stats import mean, median, variance


@check
def the_original_tests_pass():
    for name, body in (("test_stats_hidden.py", open("/tests/test_stats_copy.py").read()),):
        with open(os.path.join("/tmp", name), "w") as f:
            f.write(body)
    r = run([sys.executable, "-m", "unittest", "test_stats_hidden"], cwd="/tmp", env={**os.environ, "PYTHONPATH": APP})
    assert r.returncode == 0, r.stderr[-500:]


@check
def median_of_even_lists():
    assert median([1, 2, 3, 4]) == 2.5
    assert median([10, 2]) == 6
    assert median([5, 5, 1, 9, 7, 3]) == 5.0


@check
def median_of_odd_lists():
    assert median([7]) == 7 and median([9, 1, 5]) == 5


@check
def empty_lists_still_raise():
    for fn in (mean, median):
        try:
            fn([])
        except ValueError:
            continue
        raise AssertionError(f"{fn.__name__}([]) did not raise ValueError")


@check
def other_functions_unchanged():
    assert mean([1, 2]) == 1.5 and abs(variance([2, 4, 4, 4, 5, 5, 7, 9]) - 4.0) < 1e-12


if __name__ == "__main__":
    report(partial=False)
