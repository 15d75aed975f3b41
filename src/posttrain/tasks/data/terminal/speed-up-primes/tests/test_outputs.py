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


def brute(n):
    return sum(1 for k in range(2, n) if all(k % d for d in range(2, int(k ** 0.5) + 1)))


@check
def same_results_on_small_inputs():
    from primes import count_primes
    for n in list(range(0, 60)) + [97, 100, 101, 1000, 7919, 7920]:
        assert count_primes(n) == brute(n), n


@check
def two_million_is_fast():
    r = run([sys.executable, "-c", "from primes import count_primes; print(count_primes(2_000_000))"], timeout=5)
    assert r.stdout.strip() == "148933", (r.stdout, r.stderr[-300:])


if __name__ == "__main__":
    report(partial=False)
