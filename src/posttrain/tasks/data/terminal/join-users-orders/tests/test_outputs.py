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

WANT = {"1": {"name": "Ada", "orders": 3, "total": 12.8}, "2": {"name": "Alan", "orders": 0, "total": 0},
        "3": {"name": "Grace", "orders": 2, "total": 7.45}, "4": {"name": "Edsger", "orders": 0, "total": 0},
        "unmatched_orders": 1}


def got():
    return json.load(open(os.path.join(APP, "user_totals.json")))


@check
def every_user_with_totals():
    g = got()
    for k in ("1", "2", "3", "4"):
        assert g[k]["name"] == WANT[k]["name"] and g[k]["orders"] == WANT[k]["orders"], k
        assert abs(g[k]["total"] - WANT[k]["total"]) < 1e-9 and round(g[k]["total"], 2) == g[k]["total"], (k, g[k])


@check
def unmatched_counted_and_nothing_else():
    assert got().get("unmatched_orders") == 1 and set(got()) == set(WANT)


if __name__ == "__main__":
    report(partial=False)
