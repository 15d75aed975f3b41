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

WANT = ['alice.example@mail.example.com', 'bob@example.org', 'carol+news@lists.example.net', 'dave_99@sub.domain.io', 'heidi.h@example.co.uk', 'ivan-ivanov@example.travel']


@check
def emails_extracted():
    got = open(os.path.join(APP, "emails.txt")).read().split("\n")
    assert [x for x in got if x] == WANT, got
    assert got[-1] == "" and "" not in got[:-1]  # one per line, ending with a newline


if __name__ == "__main__":
    report(partial=False)
