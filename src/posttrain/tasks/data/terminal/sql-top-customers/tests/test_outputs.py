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

import sqlite3


def db():
    con = sqlite3.connect(":memory:")
    con.executescript(open("/app/schema.sql").read() + open("/app/data.sql").read())
    return con


@check
def top_three_paying_customers():
    con = db()
    want = con.execute("SELECT c.name, ROUND(SUM(o.amount), 2) t FROM customers c JOIN orders o ON o.customer_id = c.id "
                       "WHERE o.status = 'paid' GROUP BY c.id ORDER BY t DESC LIMIT 3").fetchall()
    got = con.execute(open(os.path.join(APP, "query.sql")).read()).fetchall()
    assert [(n, round(t, 2)) for n, t in got] == want, (got, want)


@check
def query_is_one_select():
    text = open(os.path.join(APP, "query.sql")).read().strip().rstrip(";")
    assert text.lower().lstrip("( ").startswith(("select", "with")) and ";" not in text


if __name__ == "__main__":
    report(partial=False)
