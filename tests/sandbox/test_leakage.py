"""Nothing crosses from one execution or session to another.

Each probe prints what it found, and a control shows it finds what is there: an empty answer
from a probe that crashed would otherwise pass as "nothing leaked"."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.sandbox import ExecStatus

PLANT = ("import os\nopen('/work/secret', 'w').write('s'); open('/tmp/secret', 'w').write('s')\n"
         "open('/dev/shm/secret', 'w').write('s')")
PROBE = "import os\nprint([p for p in ('/work/secret', '/tmp/secret', '/dev/shm/secret') if os.path.exists(p)])"
PLANTED = "['/work/secret', '/tmp/secret', '/dev/shm/secret']\n"


def test_files_tmp_and_shm_do_not_leak_to_the_next_run(sandbox):
    planted = sandbox.run(code=PLANT + "\n" + PROBE)
    assert (planted.status, planted.stdout) == (ExecStatus.OK, PLANTED), planted  # control: the probe sees them
    probe = sandbox.run(code=PROBE)
    assert (probe.status, probe.stdout) == (ExecStatus.OK, "[]\n"), probe


@pytest.mark.slow
def test_reused_cgroups_carry_no_memory_cpu_or_oom_of_the_previous_run(sandbox):
    """Consecutive executions reuse warm cgroups (reset, not rebuilt): the next one must see
    none of the previous run's memory peak, CPU time or OOM kill, nor its processes."""
    hog = "x = bytearray(96 << 20)\nimport time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    for first in (dict(code=hog, prefork=True), dict(code="x = bytearray(512 << 20)", prefork=True),
                  dict(command="sleep 100 & sleep 100 & exit 0")):
        before = sandbox.run(**first)
        assert before.status in (ExecStatus.OK, ExecStatus.OOM), before
        for _ in range(3):  # whichever idle group it lands in
            r = sandbox.run(code="print(len([p for p in __import__('os').listdir('/proc') if p.isdigit()]))",
                            prefork=True)
            assert r.status is ExecStatus.OK and r.stdout == "2\n", r  # its init and itself
            assert r.peak_memory_bytes < (32 << 20) and r.cpu_s < 0.2, r


@pytest.mark.slow
def test_files_tmp_and_shm_do_not_leak_between_concurrent_runs(sandbox):
    hold = PLANT + "\nimport time; time.sleep(1.5)"

    async def both():
        planter = asyncio.ensure_future(sandbox.arun(code=hold))
        await asyncio.sleep(0.7)
        probe = await sandbox.arun(code=PROBE)
        return await planter, probe

    planted, probe = asyncio.run(both())
    assert planted.status is ExecStatus.OK, planted
    assert (probe.status, probe.stdout) == (ExecStatus.OK, "[]\n"), probe


@pytest.mark.slow
def test_same_port_is_free_in_concurrent_runs(sandbox):
    code = ("import socket, time\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)\n"
            "s.bind(('127.0.0.1', 8000)); s.listen(); print('bound'); time.sleep(1)")

    async def both():
        return await asyncio.gather(sandbox.arun(code=code), sandbox.arun(code=code))

    a, b = asyncio.run(both())
    assert a.stdout == b.stdout == "bound\n", (a.stderr, b.stderr)


def test_sysv_ipc_does_not_leak_between_runs(sandbox):
    made = sandbox.run("ipcmk -M 4096 >/dev/null && ipcs -m | grep -c 0x")
    seen = sandbox.run("ipcs -m")
    assert (made.status, made.stdout) == (ExecStatus.OK, "1\n"), made  # control: ipcs lists a segment that exists
    assert seen.status is ExecStatus.OK and "Shared Memory Segments" in seen.stdout, seen
    assert [line for line in seen.stdout.splitlines() if line.startswith("0x")] == [], seen.stdout


def test_sessions_do_not_see_each_other(sandbox):
    with sandbox.session() as a, sandbox.session() as b:
        a.write_file("mine.txt", b"a")
        seen_by_b = b.exec("ls -A /work")
        assert (seen_by_b.status, seen_by_b.stdout) == (ExecStatus.OK, ""), seen_by_b
        assert a.exec("ls /work").stdout == "mine.txt\n"  # control: the same probe sees a's own file
        state = b.exec("ls -A /state")  # the server's layer store: an empty mount point inside a task
        assert (state.status, state.stdout) == (ExecStatus.OK, ""), state
