"""Shared fixtures: one sandbox for the whole directory (start-up is the slow part)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from posttrain.sandbox import Limits, Sandbox

FAST = Limits(wall_s=5, cpu_s=3, memory_mb=128, pids=32, output_bytes=1 << 16, disk_mb=16)


@pytest.fixture(scope="session")
def sandbox():
    sb = Sandbox(FAST)
    yield sb
    sb.close()


@pytest.fixture(scope="session")
def prefork_sandbox(sandbox):
    """The same server used in pre-forked interpreter mode."""
    return sandbox


def sandbox_uid_processes() -> list[int]:
    """Host PIDs running as the sandbox's host identity (nobody)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if line.split()[1] == "65534":
                            pids.append(int(entry))
                        break
        except OSError:
            continue
    return pids


def host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def free_port(family=socket.AF_INET, kind=socket.SOCK_STREAM, host="127.0.0.1") -> socket.socket:
    s = socket.socket(family, kind)
    s.bind((host, 0))
    return s


def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def host_sleeper():
    """A host process the sandbox must not be able to touch."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()
