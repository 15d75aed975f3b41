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

sys.path.insert(0, APP)
from slug import slugify

CASES = [
    ("Hello, World!", None, "hello-world"),
    ("  Crème Brûlée  recipe ", None, "creme-brulee-recipe"),
    ("Ünïcödé -- ÄÖÜ", None, "unicode-aou"),
    ("straße 日本 42", None, "strae-42"),
    ("C++ & Python: 2024 edition", None, "c-python-2024-edition"),
    ("---", None, "n-a"),
    ("", None, "n-a"),
    ("日本語", None, "n-a"),
    ("hello big world", 12, "hello-big"),
    ("hello big world", 15, "hello-big-world"),
    ("abcdefgh", 5, "abcde"),
    ("ab cdefghij", 5, "ab"),
    ("one two", 4, "one"),
    ("a-b-c", 3, "a-b"),
]


@check
def plain_titles():
    for text, n, want in CASES[:5]:
        assert slugify(text, n) == want, (text, slugify(text, n), want)


@check
def nothing_left_is_n_a():
    for text, n, want in CASES[5:8]:
        assert slugify(text, n) == want, (text, slugify(text, n), want)


@check
def max_length_cuts_at_a_boundary():
    for text, n, want in CASES[8:]:
        got = slugify(text, n)
        assert got == want, (text, n, got, want)
        assert len(got) <= n and not got.endswith("-")


if __name__ == "__main__":
    report(partial=False)
