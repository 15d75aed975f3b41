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


def tree(files):
    root = "/tmp/ct"
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for rel, body in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(body)
    return root


def count(root):
    return run(["bash", "/app/count_lines.sh", root], cwd="/tmp")


@check
def names_with_spaces():
    r = count(tree({"a.txt": "1\n2\n", "sub dir/b c.txt": "1\n2\n3\n", "x.md": "1\n", "z/*.txt": "q\n"}))
    assert r.stdout == "2 a.txt\n3 sub dir/b c.txt\n1 z/*.txt\ntotal 6\n", (r.stdout, r.stderr[-300:])


@check
def empty_directory():
    r = count(tree({}))
    assert r.stdout == "total 0\n", (r.stdout, r.stderr[-300:])


@check
def a_glob_in_the_working_directory_does_not_break_it():
    root = tree({"k.txt": "1\n"})
    with open("/tmp/decoy.txt", "w") as f:
        f.write("decoy\n")
    r = count(root)
    assert r.stdout == "1 k.txt\ntotal 1\n", (r.stdout, r.stderr[-300:])


if __name__ == "__main__":
    report(partial=False)
