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

@check
def the_sample_file():
    r = run([sys.executable, "inventory.py", "orders.json"])
    assert r.stdout == "desk: 120.00\nlamp: 56.00\nbulb: 24.00\n", (r.stdout, r.stderr[-400:])


@check
def another_file():
    orders = [{"id": 9, "lines": [{"item": "a", "price": "1.10", "qty": "3"}]},
              {"id": 10, "discount": "0.5", "lines": [{"item": "b", "price": "10", "qty": 1}, {"item": "a", "price": "1.10", "qty": 2}]}]
    with open("/tmp/more.json", "w") as f:
        json.dump(orders, f)
    r = run([sys.executable, "inventory.py", "/tmp/more.json"])
    assert r.stdout == "b: 5.00\na: 4.40\n", (r.stdout, r.stderr[-400:])


if __name__ == "__main__":
    report(partial=False)
