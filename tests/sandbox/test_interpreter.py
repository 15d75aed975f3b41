"""Which interpreter and packages tasks get when the caller's Python lives under a path every task
mounts fresh: /tmp is bound again inside each task (a virtual environment there keeps working,
packages included); /work and /dev/shm are not, and the fallback is announced loudly."""

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from _sandbox_testlib import FAST

from posttrain.sandbox import sandbox as sbmod

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_task_mounts_are_recognised():
    assert sbmod.under_task_mount("/tmp/venv/bin/python") == "/tmp"
    assert sbmod.under_task_mount("/work") == "/work"
    assert sbmod.under_task_mount("/workspace/venv") is None
    assert sbmod.under_task_mount("/usr/bin/python3") is None
    assert sbmod.hidden_from_tasks("/tmp/venv") is None  # bound again inside each task
    assert sbmod.hidden_from_tasks("/work/venv") == "/work"
    assert sbmod.rebinds_of(["/usr", "/tmp/venv", "/work/venv", "/etc/ssl"]) == ["/tmp/venv"]


def test_interpreter_outside_task_mounts_is_used_as_is(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    assert sbmod.task_python() == "/usr/bin/python3"


def test_venv_under_tmp_is_used_as_is(monkeypatch, tmp_path):
    link = tmp_path / "venv" / "bin" / "python"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.realpath(sys.executable))
    monkeypatch.setattr(sys, "executable", str(link))
    assert str(tmp_path).startswith("/tmp/")
    assert sbmod.task_python() == str(link)


def test_venv_where_tasks_cannot_see_it_falls_back_to_the_real_interpreter(monkeypatch):
    real = os.path.realpath(sys.executable)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        link = Path(d) / "venv" / "bin" / "python"
        link.parent.mkdir(parents=True)
        link.symlink_to(real)
        monkeypatch.setattr(sys, "executable", str(link))
        assert sbmod.task_python() == real


def test_hidden_environment_is_warned_about(monkeypatch):
    """Loudly: a warning when the sandbox starts, and the same text in every result's warnings."""
    monkeypatch.setattr(sys, "prefix", "/work/some-venv")
    (msg,) = sbmod.hidden_environments()
    assert "/work/some-venv lies under /work" in msg and "without that environment's packages" in msg
    with pytest.warns(RuntimeWarning, match="lies under /work"):
        sb = sbmod.Sandbox(FAST, sweep=False)
    with sb:
        r = sb.run(code="print(1)", prefork=True)
    assert r.stdout == "1\n" and msg in r.warnings, r


PROBE = ("import sys, posttrain_venv_probe, numpy\n"
         "print(sys.prefix, posttrain_venv_probe.WHERE, numpy.__name__)")

DRIVER = r"""
import json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from posttrain.sandbox import Sandbox
    from posttrain.rewards.code import PythonTests
    from posttrain.types import Task
    import asyncio
    probe = sys.argv[1]
    with Sandbox() as sb:
        runs = [sb.run(code=probe), sb.run(code=probe, prefork=True), sb.run(["python3", "-c", probe])]
    task = Task("t", "p", meta={"tests": "assert candidate() == 'venv'", "entry_point": "f"})
    solution = "import posttrain_venv_probe\ndef f():\n    return posttrain_venv_probe.KIND\n"
    # Two items in one batch: the harness's clean-up between them keeps the venv bound in /tmp.
    verdicts = asyncio.run(PythonTests().verify_batch([task, task], [solution, solution + "# again\n"]))
print(json.dumps({"runs": [[r.status.value, r.stdout, r.stderr] for r in runs], "scores": [v.score for v in verdicts],
                  "details": [v.details for v in verdicts], "warnings": [str(w.message) for w in caught]}))
"""


@pytest.mark.slow
def test_a_venv_under_tmp_keeps_its_interpreter_and_packages_inside_the_sandbox(tmp_path):
    """A virtual environment in /tmp (with the system's packages too): every way of running Python
    in the sandbox (a command, ``code=``, the pre-forked interpreter, the code verifier's solution
    process) sees the venv as ``sys.prefix``, imports a package installed only in the venv and one
    of the system's, and no warning says otherwise."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    rel = os.path.relpath(sysconfig.get_path("purelib"), sys.prefix)
    site = venv / rel
    (site / "posttrain_venv_probe.py").write_text("import os\nWHERE = os.path.dirname(__file__)\nKIND = 'venv'\n")
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([str(venv / "bin" / "python"), "-c", DRIVER, PROBE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    want = f"{venv} {site} numpy\n"
    assert [r[:2] for r in got["runs"]] == [["ok", want]] * 3, got["runs"]
    assert got["scores"] == [1.0, 1.0], got["details"]
    assert not [w for w in got["warnings"] if str(venv) in w or "lies under" in w], got["warnings"]
