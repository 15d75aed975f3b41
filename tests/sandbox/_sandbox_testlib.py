"""Helpers shared by the sandbox tests (host-side probes)."""

from __future__ import annotations

import os
import socket
import time

from posttrain.sandbox import Limits

FAST = Limits(wall_s=5, cpu_s=3, memory_mb=128, pids=32, output_bytes=1 << 16, disk_mb=16)


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
