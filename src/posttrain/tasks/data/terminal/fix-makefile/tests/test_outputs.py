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
def clean_build_works():
    r = run(["make", "clean"], timeout=60)
    assert r.returncode == 0, r.stderr[-500:]
    r = run(["make"], timeout=120)
    assert r.returncode == 0, (r.stdout[-500:], r.stderr[-500:])


@check
def the_program_computes():
    for args, out in ((["3", "4"], "7 12"), (["-2", "10"], "8 -20")):
        r = run(["./build/calc", *args])
        assert r.stdout.strip() == out, (args, r.stdout, r.stderr)


@check
def sources_untouched():
    assert "return a + b;" in open("/app/src/mathx.c").read()
    assert '#include "mathx.h"' in open("/app/src/main.c").read()


if __name__ == "__main__":
    report(partial=False)
