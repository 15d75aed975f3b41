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

WANT = [3, 4, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16]


def got():
    return [int(x) for x in open(os.path.join(APP, "invalid.txt")).read().split()]


@check
def type_and_range_errors():
    for n in (3, 4, 6, 9, 11, 12, 15, 16):
        assert n in got(), n


@check
def malformed_lines():
    for n in (7, 10, 14):
        assert n in got(), n


@check
def duplicates_after_the_first():
    assert 5 in got() and 2 not in got()


@check
def exactly_the_invalid_lines_in_order():
    assert got() == WANT, got()


if __name__ == "__main__":
    report(partial=True)
