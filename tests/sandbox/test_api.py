"""The API contract: statuses, languages, async use, pool backpressure, loud degradation."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
from typer.testing import CliRunner

from posttrain.cli.sandbox import app
from posttrain.sandbox import (
    ExecResult,
    ExecStatus,
    Limits,
    PoolBusy,
    Sandbox,
    SandboxPool,
    SandboxUnavailable,
    cgroups,
    launcher,
)
from posttrain.sandbox.supervise import classify


def test_ok_and_runtime_error_are_told_apart(sandbox):
    ok = sandbox.run(code="print('fine')")
    bad = sandbox.run(code="raise SystemExit(3)")
    crash = sandbox.run(code="1/0")
    killed = sandbox.run(code="import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert (ok.status, ok.exit_code, ok.stdout) == (ExecStatus.OK, 0, "fine\n")
    assert (bad.status, bad.exit_code) == (ExecStatus.RUNTIME_ERROR, 3)
    assert crash.status is ExecStatus.RUNTIME_ERROR and "ZeroDivisionError" in crash.stderr
    assert killed.status is ExecStatus.RUNTIME_ERROR and killed.signal == signal.SIGSEGV
    assert ok.cpu_s is not None and ok.peak_memory_bytes and ok.wall_s > 0


def test_prefork_interpreter_behaves_like_python_c(sandbox):
    for code, status, code_, out in [("print('x')", ExecStatus.OK, 0, "x\n"),
                                     ("import sys; sys.exit(4)", ExecStatus.RUNTIME_ERROR, 4, ""),
                                     ("import sys; print(sys.argv)", ExecStatus.OK, 0, "['-c']\n"),
                                     ("print(__name__)", ExecStatus.OK, 0, "__main__\n")]:
        r = sandbox.run(code=code, prefork=True)
        assert (r.status, r.exit_code, r.stdout) == (status, code_, out), r
    crash = sandbox.run(code="1/0", prefork=True)
    assert crash.exit_code == 1 and "ZeroDivisionError" in crash.stderr


def test_prefork_interpreter_handles_signals_like_python_c(sandbox):
    code = ("import os, signal\nprint([str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGPIPE, "
            "signal.SIGXFSZ, signal.SIGTERM, signal.SIGCHLD)], flush=True)\nos.kill(os.getpid(), signal.SIGTERM)")
    pre, cmd = sandbox.run(code=code, prefork=True), sandbox.run(code=code)
    assert pre.stdout == cmd.stdout and "default_int_handler" in pre.stdout, (pre, cmd)
    assert pre.signal == cmd.signal == signal.SIGTERM  # a task is not its namespace's init


def test_prefork_interpreter_imports_workspace_modules_and_hashes_like_a_command(sandbox):
    files = {"sol.py": "def add(a, b):\n    return a + b\n"}
    code = "from sol import add; print(add(2, 3), hash('posttrain'))"
    pre = sandbox.run(code=code, files=files, prefork=True)
    cmd = sandbox.run(code=code, files=files)
    assert pre.status is ExecStatus.OK and pre.stdout == cmd.stdout, (pre, cmd)


def test_prefork_interpreter_imports_installed_packages_from_a_lean_server(sandbox):
    """The fork-server starts without `site` (every task's fork copies its heap) yet puts site-packages on
    sys.path as `site` would: installed packages import as under `python -c`, while the server's own
    module set stays small (no .pth import lines run, no dataclasses/inspect/typing/shutil/traceback)."""
    code = ("import sys; heavy = sorted(m for m in ('certifi', 'dataclasses', 'inspect', 'typing', 'shutil', "
            "'traceback', 'pathlib') if m in sys.modules); import pytest, numpy; print(heavy, numpy.__name__)")
    r = sandbox.run(code=code, prefork=True)
    assert r.status is ExecStatus.OK, r
    assert r.stdout.startswith("[] "), r.stdout  # imported by nothing before the task's own code ran


def test_prefork_interpreter_is_as_confined_as_a_command(sandbox):
    r = sandbox.run(code="import os; print(os.path.exists('/etc/shadow'), "
                         "open('/proc/self/status').read().count('0000000000000000'))",
                    prefork=True)
    assert r.stdout.split()[0] == "False" and int(r.stdout.split()[1]) >= 5
    assert sandbox.run(code="x = bytearray(512 << 20)", prefork=True).status is ExecStatus.OOM


def test_bash_and_c_run(sandbox):
    assert sandbox.run(code="echo $((6 * 7))", language="bash").stdout == "42\n"
    c = sandbox.run(code='#include <stdio.h>\nint main(){printf("%d\\n", 6*7); return 0;}', language="c")
    assert c.status is ExecStatus.OK and c.stdout == "42\n", c.stderr


@pytest.mark.slow
def test_pytest_style_tests_run_inside(sandbox):
    files = {"sol.py": "def add(a, b):\n    return a + b\n",
             "test_sol.py": "from sol import add\ndef test_add():\n    assert add(2, 3) == 5\n"}
    r = sandbox.run(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_sol.py"], files=files,
                    limits=Limits(wall_s=30, cpu_s=30, memory_mb=256, pids=32, disk_mb=16))
    assert r.status is ExecStatus.OK and "1 passed" in r.stdout, r.stdout + r.stderr


def test_arun_runs_concurrently_from_asyncio(sandbox):
    async def many():
        t = time.monotonic()
        rs = await asyncio.gather(*(sandbox.arun(code="import time; time.sleep(0.5)", prefork=True) for _ in range(4)))
        return rs, time.monotonic() - t

    rs, elapsed = asyncio.run(many())
    assert all(r.status is ExecStatus.OK for r in rs)
    assert elapsed < 1.9  # four half-second sleeps overlapped


def test_pool_serves_successive_event_loops(sandbox):
    pool = SandboxPool(sandbox, max_concurrency=2)
    for _ in range(2):  # each asyncio.run() is a new loop; the pool must not stay bound to the first
        rs = asyncio.run(pool.map([dict(code="print(1)", prefork=True)] * 3))
        assert [r.stdout for r in rs] == ["1\n"] * 3


def test_pool_applies_backpressure(sandbox):
    pool = SandboxPool(sandbox, max_concurrency=1, max_queue=1)

    async def scenario():
        first = asyncio.ensure_future(pool.run(code="import time; time.sleep(0.5)"))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(pool.run(code="print(2)"))  # waits for the slot
        await asyncio.sleep(0.05)
        assert pool.running == 1 and pool.waiting == 1
        with pytest.raises(PoolBusy):
            await pool.try_run(code="print(3)")
        return await first, await second

    first, second = asyncio.run(scenario())
    assert first.ok and second.stdout == "2\n"


def test_sandbox_error_is_not_a_program_failure_and_recovers(sandbox):
    async def scenario():
        task = asyncio.ensure_future(sandbox.arun(code="import time; time.sleep(3)"))
        await asyncio.sleep(0.5)
        os.kill(sandbox.server_pid, signal.SIGKILL)  # the fork-server dies under a running task
        return await task

    r = asyncio.run(scenario())
    assert r.status is ExecStatus.SANDBOX_ERROR and r.error
    assert sandbox.run(code="print('back')").stdout == "back\n"  # a new server starts


def test_sandbox_built_in_a_finished_thread_keeps_its_server():
    import threading

    box = []
    t = threading.Thread(target=lambda: box.append(Sandbox(Limits(wall_s=5), sweep=False)))
    t.start()
    t.join()
    with box[0] as sb:
        pid = sb.server_pid
        time.sleep(0.2)
        assert sb.run(code="print(1)").stdout == "1\n"
        assert sb.server_pid == pid  # not restarted: the thread's exit did not kill it


def test_classify_orders_causes_from_most_specific():
    c = dict(exit_code=0, sig=None, timed_out=False, output_over=False, cpu_over=False, oom_kills=0)
    assert classify(**c) is ExecStatus.OK
    assert classify(**{**c, "exit_code": 1}) is ExecStatus.RUNTIME_ERROR
    assert classify(**{**c, "exit_code": None, "sig": signal.SIGKILL, "timed_out": True}) is ExecStatus.TIMEOUT
    assert classify(**{**c, "exit_code": None, "sig": signal.SIGXCPU}) is ExecStatus.CPU_LIMIT
    assert classify(**{**c, "exit_code": 0, "oom_kills": 1}) is ExecStatus.OOM  # a child was OOM-killed
    assert classify(**{**c, "output_over": True, "timed_out": True}) is ExecStatus.OUTPUT_LIMIT


def test_result_serialises_to_json(sandbox):
    d = json.loads(sandbox.run(code="print(1)").to_json())
    assert d["status"] == "ok" and d["isolated"] is True


def test_limits_are_validated():
    for bad in ({"wall_s": 0}, {"memory_mb": -1}, {"pids": 1}, {"nofile": True}):
        with pytest.raises(ValueError):
            Limits(**bad)


def test_refuses_without_namespaces_unless_opted_in(monkeypatch):
    def no_namespaces(**kwargs):
        raise SandboxUnavailable("namespaces unavailable: unshare: Operation not permitted")

    monkeypatch.setattr("posttrain.sandbox.sandbox.ServerHandle", no_namespaces)
    with pytest.raises(SandboxUnavailable, match="Refusing"):
        Sandbox(sweep=False)
    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        sb = Sandbox(sweep=False, allow_unisolated=True)
    with sb:
        r = sb.run(code="print('ran')", files={"x.txt": "1"})
    assert r.status is ExecStatus.OK and r.stdout == "ran\n"
    assert r.isolated is False and any("UNISOLATED" in w for w in r.warnings)
    assert json.loads(r.to_json())["isolated"] is False


def test_missing_cgroups_degrade_loudly_to_rlimits(monkeypatch):
    monkeypatch.setattr(cgroups, "probe", lambda: cgroups.CgroupSupport(warnings=[
        "no memory cgroup: memory is limited only by RLIMIT_AS (per process, virtual memory)",
        "no pids cgroup: processes are limited only by RLIMIT_NPROC (shared by all sandboxes)"]))
    with pytest.warns(RuntimeWarning, match="no memory cgroup"):
        sb = Sandbox(Limits(memory_mb=64, wall_s=5), sweep=False)
    with sb:
        r = sb.run(code="x = bytearray(1 << 30)")
    assert r.status is ExecStatus.RUNTIME_ERROR and "MemoryError" in r.stderr
    assert any("no memory cgroup" in w for w in r.warnings)


def test_server_start_failure_is_reported_not_hidden(monkeypatch):
    monkeypatch.setattr(launcher, "SERVER_MODULE", "posttrain.sandbox.no_such_module")
    with pytest.raises(SandboxUnavailable):
        Sandbox(sweep=False)


def test_cli_prints_one_json_object_and_exits_zero_when_the_program_fails(tmp_path):
    src = tmp_path / "data.txt"
    src.write_text("payload")
    res = CliRunner().invoke(app, ["run", "--timeout", "5", "--memory", "128", "--pids", "16",
                                   "--file", "in/data.txt=" + str(src), "--",
                                   "sh", "-c", "cat in/data.txt; exit 7"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout.strip().splitlines()[-1])
    assert d["status"] == "runtime_error" and d["exit_code"] == 7 and d["stdout"] == "payload"


def test_cli_mounts_as_a_sub_command():
    import typer

    parent = typer.Typer()

    @parent.command()
    def other() -> None:
        pass

    parent.add_typer(app, name="sandbox")
    res = CliRunner().invoke(parent, ["sandbox", "run", "--", "echo", "mounted"])
    assert res.exit_code == 0 and json.loads(res.stdout)["stdout"] == "mounted\n", res.output


@pytest.mark.slow
def test_cli_reports_timeouts_as_json(tmp_path):
    res = CliRunner().invoke(app, ["run", "--timeout", "1", "--", "sleep", "30"])
    assert res.exit_code == 0 and json.loads(res.stdout)["status"] == "timeout"


def test_exec_result_ok_property():
    assert ExecResult(ExecStatus.OK).ok and not ExecResult(ExecStatus.TIMEOUT).ok
