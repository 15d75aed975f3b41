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

import csv
from collections import defaultdict
from decimal import Decimal

units, revenue = defaultdict(int), defaultdict(Decimal)
for row in csv.DictReader(open("/app/sales.csv")):
    units[row["region"]] += int(row["units"])
    revenue[row["region"]] += int(row["units"]) * Decimal(row["unit_price"])
WANT = [["region", "total_units", "revenue"]] + [[r, str(units[r]), f"{revenue[r]:.2f}"]
                                                for r in sorted(revenue, key=lambda r: -revenue[r])]


def got():
    with open(os.path.join(APP, "summary.csv"), newline="") as f:
        return [row for row in csv.reader(f) if row]


@check
def header_and_regions():
    rows = got()
    assert rows[0] == WANT[0] and sorted(r[0] for r in rows[1:]) == sorted(units), rows[:2]


@check
def totals_and_order():
    assert got() == WANT, got()


if __name__ == "__main__":
    report(partial=False)
