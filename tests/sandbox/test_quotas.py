"""Resource attacks: each must end in its quota verdict, quickly, with the host unharmed."""

from __future__ import annotations

import time

import pytest
from _sandbox_testlib import FAST, host_processes_with, wait_until

from posttrain.sandbox import ExecStatus, Limits


@pytest.mark.slow
def test_fork_bomb_is_capped_by_pids_cgroup_and_torn_down(sandbox):
    t = time.monotonic()
    r = sandbox.run("f(){ f | f & }; f; sleep 1; exit 0",
                    limits=Limits(wall_s=4, cpu_s=3, pids=24))
    assert time.monotonic() - t < 10
    assert "fork" in r.stderr.lower()  # forks were refused, not merely slow
    assert r.status in (ExecStatus.OK, ExecStatus.RUNTIME_ERROR, ExecStatus.TIMEOUT, ExecStatus.CPU_LIMIT)
    assert sandbox.run(code="print('alive')").stdout == "alive\n"


def test_process_count_never_exceeds_pids_limit(sandbox):
    code = ("import os, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(5); os._exit(0)\n    n += 1\nprint(n)")
    r = sandbox.run(code=code, limits=Limits(wall_s=4, pids=16))
    assert r.status is ExecStatus.OK
    assert int(r.stdout) <= 14  # init + task + children within pids.max


def test_memory_hog_in_parent_is_oom_killed(sandbox):
    r = sandbox.run(code="x = bytearray(512 << 20); print('survived')")
    assert r.status is ExecStatus.OOM
    assert "survived" not in r.stdout
    assert r.peak_memory_bytes is not None and r.peak_memory_bytes <= (FAST.memory_mb << 20) + (1 << 20)


@pytest.mark.slow
def test_memory_hog_in_child_is_oom_killed(sandbox):
    code = ("import subprocess, sys\n"
            "r = subprocess.run([sys.executable, '-c', 'x = bytearray(512 << 20)'])\nprint(r.returncode)")
    r = sandbox.run(code=code)
    assert r.status is ExecStatus.OOM
    assert r.stdout.strip() == "-9"


@pytest.mark.slow
def test_cpu_spin_hits_cpu_limit(sandbox):
    r = sandbox.run(code="while True: pass", limits=Limits(wall_s=8, cpu_s=1))
    assert r.status is ExecStatus.CPU_LIMIT
    assert r.wall_s < 6


@pytest.mark.slow
def test_sleeping_forever_hits_wall_timeout(sandbox):
    r = sandbox.run(code="import time; time.sleep(1000)", limits=Limits(wall_s=1))
    assert r.status is ExecStatus.TIMEOUT
    assert 0.9 < r.wall_s < 4


def test_blocking_on_stdin_gets_eof_not_a_hang(sandbox):
    r = sandbox.run(code="import sys; data = sys.stdin.read(); print(len(data))", limits=Limits(wall_s=3))
    assert r.status is ExecStatus.OK and r.stdout == "0\n"


def test_stdin_is_delivered(sandbox):
    r = sandbox.run(code="import sys; print(sys.stdin.read().upper())", stdin="hello")
    assert r.stdout == "HELLO\n"


def test_setsid_double_fork_daemon_is_reaped(sandbox):
    marker = "sandbox-daemon-marker-7731"
    code = (
        "import os, subprocess, time\n"
        f"daemon = 'python3 -c \"import time; time.sleep(300)\" {marker} &'\n"
        "subprocess.run(['setsid', 'sh', '-c', daemon], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,"
        " stderr=subprocess.DEVNULL)\n"
        "time.sleep(0.3)\nn = 0\n"
        "for p in os.listdir('/proc'):\n    if p.isdigit() and int(p) != os.getpid():\n        try:\n"
        f"            n += b'{marker}' in open(f'/proc/{{p}}/cmdline', 'rb').read()\n"
        "        except OSError:\n            pass\nprint(n)"
    )
    r = sandbox.run(code=code)
    assert r.status is ExecStatus.OK and r.stdout == "1\n", r.stdout + r.stderr  # it was running, detached
    assert wait_until(lambda: not host_processes_with(marker), 3.0)


def test_one_gigabyte_stdout_flood_is_cut_at_the_cap(sandbox):
    t = time.monotonic()
    r = sandbox.run(code="import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024): sys.stdout.write(chunk)")
    assert r.status is ExecStatus.OUTPUT_LIMIT
    assert r.stdout_truncated and len(r.stdout) == FAST.output_bytes
    assert time.monotonic() - t < 5


def test_disk_fill_stops_at_the_quota(sandbox):
    code = ("import os\nn = 0\ntry:\n    with open('/work/fill', 'wb') as f:\n        while True:\n"
            "            f.write(b'\\0' * (1 << 20)); f.flush(); n += 1\nexcept OSError as e:\n    print(n, e.errno)")
    r = sandbox.run(code=code)
    written, errno_ = r.stdout.split()
    assert int(written) <= FAST.disk_mb
    assert int(errno_) in (27, 28)  # EFBIG (RLIMIT_FSIZE) or ENOSPC (tmpfs size)


def test_tmp_fill_stops_at_the_quota(sandbox):
    r = sandbox.run("dd if=/dev/zero of=/tmp/fill bs=1M count=1000 2>&1; ls -s --block-size=M /tmp/fill")
    size_mb = int(r.stdout.strip().splitlines()[-1].split("M")[0])
    assert size_mb <= FAST.disk_mb


def test_fd_exhaustion_stops_at_nofile(sandbox):
    code = ("fs = []\ntry:\n    while True: fs.append(open('/dev/null'))\nexcept OSError as e:\n    print(len(fs), e.errno)")
    r = sandbox.run(code=code, limits=Limits(nofile=64))
    count, errno_ = r.stdout.split()
    assert int(count) < 64 and int(errno_) == 24  # EMFILE


def test_thread_exhaustion_is_capped_by_pids(sandbox):
    code = ("import threading, time\nn = 0\ntry:\n    for _ in range(500):\n"
            "        threading.Thread(target=time.sleep, args=(3,), daemon=True).start(); n += 1\n"
            "except RuntimeError:\n    pass\nprint(n)")
    r = sandbox.run(code=code, limits=Limits(pids=20, wall_s=6))
    assert int(r.stdout) < 20
