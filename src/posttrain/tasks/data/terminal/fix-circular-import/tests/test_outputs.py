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
def main_prints_the_orders():
    r = run([sys.executable, "main.py"])
    assert r.stdout == "order 1: 2 x widget = 19.98\norder 2: 1 x gadget = 24.50\n", (r.stdout, r.stderr[-400:])


@check
def each_module_imports_alone():
    for m in ("shop.models", "shop.pricing"):
        r = run([sys.executable, "-c", f"import {m}"])
        assert r.returncode == 0, (m, r.stderr[-400:])


@check
def names_stay_put_and_still_check_types():
    code = ("from shop.models import Order, Product\nfrom shop.pricing import price_of\n"
            "print(price_of(Order(Product('x', '2.5'), 4)))\n"
            "try:\n    price_of(3)\nexcept TypeError:\n    print('typed')\n")
    r = run([sys.executable, "-c", code])
    assert r.stdout.split() == ["10.0", "typed"], (r.stdout, r.stderr[-400:])


if __name__ == "__main__":
    report(partial=False)
