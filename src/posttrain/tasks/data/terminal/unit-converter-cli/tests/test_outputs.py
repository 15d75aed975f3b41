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

def cli(*args):
    return run([sys.executable, "convert.py", *args])


@check
def lengths_and_masses():
    for args, out in ((("10", "km", "mi"), "6.2137 mi"), (("1", "mi", "ft"), "5280.0000 ft"), (("2.5", "m", "m"), "2.5000 m"),
                      (("1", "lb", "g"), "453.5924 g"), (("1500", "g", "kg"), "1.5000 kg"), (("-3", "ft", "m"), "-0.9144 m")):
        r = cli(*args)
        assert (r.returncode, r.stdout) == (0, out + "\n"), (args, r.stdout, r.stderr)


@check
def temperatures():
    for args, out in ((("100", "C", "F"), "212.0000 F"), (("0", "K", "C"), "-273.1500 C"), (("-40", "F", "C"), "-40.0000 C"),
                      (("300", "K", "F"), "80.3300 F")):
        r = cli(*args)
        assert (r.returncode, r.stdout) == (0, out + "\n"), (args, r.stdout, r.stderr)


@check
def errors_exit_2_quietly():
    for args in (("abc", "m", "km"), ("1", "m", "kg"), ("1", "parsec", "m"), ("1", "C", "m"), ("-1", "K", "C"), ("-300", "C", "F")):
        r = cli(*args)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.strip() and "\n" not in r.stderr.strip(), (args, r)


if __name__ == "__main__":
    report(partial=False)
