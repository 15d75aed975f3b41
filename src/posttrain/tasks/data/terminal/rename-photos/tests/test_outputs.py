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

WANT = {"2023-01-02_101500.jpg": "IMG_20230102_101500.jpg", "2023-01-02_101501.jpg": "IMG_20230102_101501.JPG",
        "2022-12-31_235959.jpg": "IMG_20221231_235959.jpeg", "2024-02-29_000000.jpg": "IMG_20240229_000000.JPG",
        "holiday.png": "holiday.png", "IMG_2023_bad.jpg": "IMG_2023_bad.jpg", "notes.txt": "notes.txt",
        "IMG_20230315_120000.png": "IMG_20230315_120000.png"}


@check
def the_listing():
    assert sorted(os.listdir("/app/photos")) == sorted(WANT), sorted(os.listdir("/app/photos"))


@check
def contents_moved_with_their_names():
    for new, old in WANT.items():
        assert open(f"/app/photos/{new}").read() == old + "\n", new


if __name__ == "__main__":
    report(partial=False)
