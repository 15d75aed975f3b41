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

import shutil
import tarfile

EXPECTED = {"data/notes.txt", "data/report 2024.csv", "data/img/logo.svg", "data/deep/er/still.txt"}


def fresh_run():
    shutil.rmtree(os.path.join(APP, "backups"), ignore_errors=True)
    with open(os.path.join(APP, "data", "late.tmp"), "w") as f:  # created after the agent finished
        f.write("late\n")
    return run(["bash", "/app/backup.sh"], cwd="/")


RESULT = fresh_run()


def members():
    with tarfile.open(os.path.join(APP, "backups", "data.tar.gz"), "r:gz") as tar:
        return {m.name.lstrip("./") for m in tar.getmembers() if m.isfile()}


@check
def script_runs_from_anywhere():
    assert RESULT.returncode == 0, RESULT.stderr[-500:]


@check
def archive_holds_the_right_files():
    assert members() == EXPECTED, members() ^ EXPECTED


@check
def prints_the_count():
    assert RESULT.stdout.strip() == f"archived {len(EXPECTED)} files", RESULT.stdout


@check
def rerun_replaces_the_archive():
    r = run(["bash", "/app/backup.sh"], cwd="/tmp")
    assert r.returncode == 0 and members() == EXPECTED


if __name__ == "__main__":
    report(partial=False)
