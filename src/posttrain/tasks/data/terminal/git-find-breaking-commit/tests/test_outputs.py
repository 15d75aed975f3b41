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

import tempfile


def first_bad():
    work = tempfile.mkdtemp()
    env = {**os.environ, "HOME": work}
    subprocess.run(["git", "clone", "-q", "/app/repo.bundle", work + "/r"], check=True, env=env)
    commits = run(["git", "log", "--format=%H", "--reverse", "main"], cwd=work + "/r", env=env).stdout.split()
    for c in commits:
        subprocess.run(["git", "checkout", "-q", c], cwd=work + "/r", check=True, env=env)
        if run([sys.executable, "calc.py"], cwd=work + "/r").stdout.strip() != "42":
            return c
    raise AssertionError("no bad commit")


@check
def the_first_bad_commit():
    got = open(os.path.join(APP, "first_bad.txt")).read().strip()
    assert got == first_bad(), got


if __name__ == "__main__":
    report(partial=False)
