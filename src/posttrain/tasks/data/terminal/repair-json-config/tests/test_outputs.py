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

EXPECTED = {"name": "orders-api", "port": 8080, "workers": 4, "debug": False,
            "database": {"url": "postgres://db.internal:5432/orders", "pool_size": 10},
            "allowed_hosts": ["orders.example.com", "localhost"]}


@check
def config_is_json_with_the_same_values():
    with open(os.path.join(APP, "config/service.json")) as f:
        assert json.load(f) == EXPECTED


@check
def service_check_passes():
    service = open("/tests/service.py").read()  # the original, whatever happened to the agent's copy
    with open("/tmp/service.py", "w") as f:
        f.write(service)
    r = run([sys.executable, "/tmp/service.py", "--check"])
    assert r.returncode == 0 and r.stdout.strip() == "config ok: orders-api on port 8080", (r.stdout, r.stderr)


if __name__ == "__main__":
    report(partial=False)
