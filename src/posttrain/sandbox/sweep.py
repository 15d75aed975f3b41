"""Sweep what a dead manager left behind, on the next start.

Covers: fork-servers whose manager is gone (normally they exit on their own when the control
socket closes; this is the backstop) and the cgroups of dead managers. Mounts and temporary
directories need no sweep: the sandbox creates none on the host (all of them live in the
server's mount namespace and vanish with it), which ``tests/sandbox`` checks by counting.

Does not cover: leftovers of other tools.
"""

from __future__ import annotations

import json
import os
import signal

from posttrain.sandbox import cgroups
from posttrain.sandbox.launcher import SERVER_MODULE


def orphan_servers() -> list[int]:
    """PIDs of fork-servers whose manager process no longer exists."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if SERVER_MODULE.encode() not in argv[:4] or len(argv) < 5:
            continue
        try:
            manager = json.loads(argv[argv.index(SERVER_MODULE.encode()) + 1])["manager"]
        except (ValueError, KeyError, IndexError):
            continue
        if not cgroups.manager_alive(manager):
            found.append(int(entry))
    return found


def sweep_leftovers() -> dict[str, int]:
    """Kill orphaned servers, remove orphaned cgroups. Returns counts by kind."""
    servers = 0
    for pid in orphan_servers():
        try:
            os.kill(pid, signal.SIGKILL)
            servers += 1
        except OSError:
            pass
    groups = cgroups.sweep_orphans() if os.geteuid() == 0 else 0
    return {"servers": servers, "cgroups": groups}
