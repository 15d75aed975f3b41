"""Leaving nothing behind: after many executions, and after the manager is SIGKILLed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest
from _sandbox_testlib import sandbox_uid_processes, wait_until

from posttrain.sandbox import ExecStatus, Limits, Sandbox, SandboxPool, cgroups
from posttrain.sandbox.sweep import orphan_servers


def _descendants(root: int) -> set[int]:
    """Host PIDs below ``root`` in the process tree."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _describe(pids) -> list[str]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append(f"{pid}: {f.read()[:120]!r}")
        except OSError:
            out.append(f"{pid}: gone")
    return out


def _mounts() -> str:
    with open("/proc/self/mountinfo") as f:
        return "".join(sorted(f.readlines()))


def _manager_groups(tag: str) -> list[str]:
    found = []
    for root in cgroups.probe().roots:
        d = f"{root}/{cgroups.PREFIX}/{tag}"
        if os.path.isdir(d):
            found += [f"{d}/{x}" for x in os.listdir(d) if os.path.isdir(f"{d}/{x}")]
    return found


ATTACKS = [
    dict(code="x = bytearray(512 << 20)"),
    dict(command="f(){ f | f & }; f; sleep 0.3", limits=Limits(wall_s=1, pids=16)),
    dict(code="import time; time.sleep(100)", limits=Limits(wall_s=0.3)),
    dict(command="setsid sh -c 'sleep 100 &'; echo x"),
    dict(code="import sys\nwhile True: sys.stdout.write('y' * 65536)", limits=Limits(output_bytes=4096)),
    dict(code="import os, signal; os.kill(-1, signal.SIGKILL)"),
    dict(command="exec 3>/dev/null; sleep 100 &"),
]


@pytest.mark.slow
def test_a_thousand_executions_leak_no_processes_mounts_cgroups_fds_or_temp_dirs(tmp_path, monkeypatch):
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(private_tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    shared_before = {x for x in os.listdir("/tmp") if x.startswith("posttrain")}
    mounts_before = _mounts()
    fds_before = len(os.listdir("/proc/self/fd"))
    groups_before = set(_manager_groups(cgroups.manager_tag()))  # other Sandboxes' idle groups in this process
    with SandboxPool(max_concurrency=4, sweep=False, prefork=True) as pool:
        outer = pool.sandbox.server_pid
        server = _descendants(outer)
        assert len(server) == 1  # the fork-server's namespace init, nothing else yet
        requests = [ATTACKS[i % len(ATTACKS)] if i % 25 == 0 else dict(code=f"print({i})") for i in range(1000)]

        async def all_of_them():
            return await pool.map(requests)

        results = asyncio.run(all_of_them())
        assert sum(r.status is ExecStatus.SANDBOX_ERROR for r in results) == 0
        assert results[1].stdout == "1\n" and results[999].stdout == "999\n"
        assert wait_until(lambda: _descendants(outer) == server, 5), _describe(_descendants(outer) - server)
        # What stays while the sandbox is open: idle warm groups (reset for reuse), each empty
        # and at most one per worker; close() removes them.
        groups = set(_manager_groups(pool.sandbox.manager)) - groups_before
        assert all(not cgroups._read(f"{g}/cgroup.procs").strip() for g in groups), groups
        assert len({os.path.basename(g) for g in groups}) <= pool.max_concurrency, groups
    assert wait_until(lambda: not os.path.exists(f"/proc/{outer}") and not _descendants(outer), 5)
    assert not set(sandbox_uid_processes()) & server
    assert set(_manager_groups(pool.sandbox.manager)) <= groups_before
    if not groups_before:
        assert not any(os.path.exists(f"{r}/{cgroups.PREFIX}/{pool.sandbox.manager}") for r in cgroups.probe().roots)
    assert _mounts() == mounts_before
    assert os.listdir(private_tmp) == []
    assert {x for x in os.listdir("/tmp") if x.startswith("posttrain")} == shared_before
    assert len(os.listdir("/proc/self/fd")) <= fds_before


MANAGER = textwrap.dedent("""
    import sys, time
    from posttrain.sandbox import Sandbox, Limits
    sb = Sandbox(Limits(wall_s=60, cpu_s=60), sweep=False)
    print(sb.manager, flush=True)
    sb.run(["python3", "-c", "import time; time.sleep(300)", "orphan-probe-%d" % 9912])
""")


@pytest.mark.slow
def test_sigkilled_manager_leaves_nothing_after_the_next_start():
    mgr = subprocess.Popen([sys.executable, "-c", MANAGER], stdout=subprocess.PIPE, text=True)
    tag = mgr.stdout.readline().strip()
    from _sandbox_testlib import host_processes_with
    assert wait_until(lambda: host_processes_with("orphan-probe-9912"), 10)
    assert _manager_groups(tag)  # the running task's cgroups exist
    mgr.send_signal(signal.SIGKILL)
    mgr.wait()
    # The server sees its control socket close and, as PID-namespace init, takes the task with it.
    assert wait_until(lambda: not host_processes_with("orphan-probe-9912"), 5)
    assert wait_until(lambda: not orphan_servers(), 5)
    with Sandbox(sweep=True) as sb:  # the next start sweeps the dead manager's cgroups
        assert _manager_groups(tag) == []
        assert sb.run(code="print(1)").ok
    for root in cgroups.probe().roots:
        assert not os.path.exists(f"{root}/{cgroups.PREFIX}/{tag}")
