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

@check
def app_prints_the_settings():
    with open("/tmp/app.py", "w") as f:
        f.write(open("/tests/app.py").read())
    r = run([sys.executable, "/tmp/app.py"])
    assert r.returncode == 0, r.stderr[-500:]
    assert r.stdout.strip() == "api.internal:8443 tls=True queues=email,reports,billing cleanup=2024-06-30", r.stdout


@check
def types_are_native():
    import tomllib
    s = tomllib.load(open("/app/settings.toml", "rb"))
    assert s["server"]["tls"] is True and s["server"]["port"] == 8443


if __name__ == "__main__":
    report(partial=False)
