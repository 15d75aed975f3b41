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

import re
from collections import Counter

LINE = re.compile(r'^(\S+) \S+ \S+ \[[^\]]+\] "(\S+) (\S+) [^"]*" (\d{3}) \S+')
reqs = [m.groups() for m in map(LINE.match, open("/app/access.log")) if m]
try:
    with open(os.path.join(APP, "report.json")) as f:
        REPORT = json.load(f)
except Exception:
    REPORT = {}


@check
def total_requests():
    assert REPORT.get("total_requests") == len(reqs), REPORT.get("total_requests")


@check
def unique_ips():
    assert REPORT.get("unique_ips") == len({r[0] for r in reqs})


@check
def status_counts():
    assert REPORT.get("status_counts") == {k: v for k, v in Counter(r[3] for r in reqs).items()}


@check
def top_paths():
    counts = Counter(r[2].split("?")[0] for r in reqs)
    want = [[p, c] for p, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:3]]
    assert REPORT.get("top_paths") == want, (REPORT.get("top_paths"), want)


@check
def error_rate():
    want = round(sum(r[3].startswith("5") for r in reqs) / len(reqs), 4)
    assert abs(float(REPORT.get("error_rate", -1)) - want) < 1e-9, (REPORT.get("error_rate"), want)


if __name__ == "__main__":
    report(partial=True)
