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

import random


def expected(data: bytes) -> str:
    words = data.replace(b"\t", b" ").replace(b"\n", b" ").split(b" ")
    words = [w for w in words if w]
    nl = data.count(b"\n")
    return f"lines={nl} words={len(words)} chars={len(data)} longest={max(map(len, words), default=0)}\n"


def build():
    r = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-o", "/tmp/wordstat", "wordstat.c"], timeout=60)
    assert r.returncode == 0, r.stderr[-800:]


@check
def compiles_without_warnings():
    build()


def case(data: bytes):
    if not os.path.exists("/tmp/wordstat"):
        build()
    r = subprocess.run(["/tmp/wordstat"], input=data, capture_output=True, timeout=20)
    assert r.returncode == 0 and r.stdout.decode() == expected(data), (data[:60], r.stdout[:200], expected(data))


@check
def simple_text():
    case(b"hello world\nthis is  a\ttest\n")


@check
def empty_and_blank_input():
    case(b"")
    case(b"   \n\t\n")


@check
def no_trailing_newline_and_long_word():
    case(b"short " + b"x" * 5000 + b" end")


@check
def large_random_input():
    rng = random.Random(3)
    data = bytes(rng.choice(b"abc  \t\n\xe9z") for _ in range(1_000_000))
    case(data)


if __name__ == "__main__":
    report(partial=False)
