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
def compiles_cleanly():
    r = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "ring.c", "-o", "/tmp/ring.o"], timeout=60)
    assert r.returncode == 0, r.stderr[-800:]


@check
def behaves_as_specified():
    r = run(["cc", "-std=c11", "-O1", "-I/app", "-o", "/tmp/test_ring", "/tests/test_ring.c", "ring.c"], timeout=60)
    assert r.returncode == 0, r.stderr[-800:]
    r = run(["/tmp/test_ring"], timeout=20)
    assert r.returncode == 0 and r.stdout.strip() == "ring ok", (r.returncode, r.stdout, r.stderr[-400:])


if __name__ == "__main__":
    report(partial=False)
