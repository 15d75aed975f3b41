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

EXPECTED = "Invoice 1\nTotal: 24.58\nInvoice 2\nTotal: 3.75\nRevenue: 28.33\nCheck: 1.01\n"


@check
def output_unchanged():
    r = run([sys.executable, "-m", "billing.cli"])
    assert r.returncode == 0 and r.stdout == EXPECTED, (r.stdout, r.stderr[-300:])


@check
def old_name_gone():
    for base, _, names in os.walk(os.path.join(APP, "billing")):
        for n in names:
            if n.endswith(".py"):
                assert "calc_total" not in open(os.path.join(base, n)).read(), n


@check
def new_name_defined():
    r = run([sys.executable, "-c", "from billing.utils import compute_total; print(compute_total([(2, '1.50')], '0.1'))"])
    assert r.stdout.strip() == "3.30", (r.stdout, r.stderr)


if __name__ == "__main__":
    report(partial=False)
