"""Manager-side handle on the fork-server: start it, map its user namespace, talk to it.

Covers: spawning ``_server`` with a SOCK_SEQPACKET control socket, writing its uid/gid maps
(sandbox uid 0 -> an unprivileged host uid, ``nobody`` by default; when the manager is not
root, its own uid), waiting for readiness, and sending requests thread-safely. The server
exits when the control socket closes, so a SIGKILLed manager takes its sandboxes with it.

Does not cover: what a request means (``_server.py``) or supervising an execution (``supervise.py``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any, Literal, TypedDict, final

from posttrain.errors import UserError
from posttrain.sandbox import _wire

if TYPE_CHECKING:
    from posttrain.sandbox._server import MapAck, Request, ServerConfig

SERVER_MODULE = "posttrain.sandbox._server"
OWNER_ID_BASE = 0x70000000  # host ids 0x70000001.. stand for the sandbox's ids 1..65535 (no account uses them)
OWNER_IDS = 65536


class SandboxUnavailable(UserError, RuntimeError):
    """Namespaces (or the server) cannot be set up on this machine."""


# What the fork-server sends on its control socket while it starts, in this order (``StartFailure``
# instead of either when it cannot go on).
@final  # lets a type checker tell the shapes apart by their keys
class MapRequest(TypedDict):
    """The server is in its new user namespace: write its uid/gid maps, then ack (``MapAck``)."""

    map: Literal[True]


@final
class Ready(TypedDict):
    ready: Literal[True]
    warnings: list[str]
    """Degradations the server found (no seccomp filter for this machine, a preload that failed)."""


@final
class StartFailure(TypedDict):
    error: str


def _recv_timeout(sock: socket.socket, timeout_s: float) -> Any:
    ready, _, _ = select.select([sock], [], [], timeout_s)
    if not ready:
        raise SandboxUnavailable(f"sandbox server did not answer within {timeout_s} s")
    msg, fds = _wire.recv(sock)
    for fd in fds:
        os.close(fd)
    return msg


class ServerHandle:
    def __init__(self, *, ro_binds: list[str], symlinks: dict[str, str], preload: list[str],
                 host_uid: int, host_gid: int, manager: str, rebinds: list[str] | None = None,
                 workspace_binds: dict[str, str] | None = None, seccomp: bool = True, start_timeout_s: float = 30.0):
        self._lock = threading.Lock()
        self.ctl, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config: ServerConfig = {"ctl_fd": child.fileno(), "ro_binds": ro_binds, "rebinds": rebinds or [],
                                "symlinks": symlinks, "workspace_binds": workspace_binds or {}, "preload": preload,
                                "manager": manager, "seccomp": seccomp}
        # A fixed hash seed makes the pre-forked interpreter as deterministic as the
        # PYTHONHASHSEED=0 given to commands; PYTHONPATH only makes this package importable.
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {"PYTHONHASHSEED": "0", "PYTHONPATH": package_root, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONNOUSERSITE": "1"}
        self.proc = subprocess.Popen(
            # -S: no `site` at start-up; the server adds site-packages itself (``_server.add_site_paths``)
            # without running .pth import lines, which can pull a dozen modules (certifi, pathlib, zipfile, ...)
            # into the heap that every pre-forked task copies.
            [sys.executable, "-s", "-S", "-m", SERVER_MODULE, json.dumps(config)],
            pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd="/", start_new_session=True, env=env,
        )
        child.close()
        try:
            msg: MapRequest | StartFailure | None = _recv_timeout(self.ctl, start_timeout_s)
            if not msg or "map" not in msg:
                raise SandboxUnavailable(msg["error"] if msg else "sandbox server exited during start-up")
            self._write_maps(host_uid, host_gid)
            ack: MapAck = {"mapped": True}
            _wire.send(self.ctl, ack)
            ready: Ready | StartFailure | None = _recv_timeout(self.ctl, start_timeout_s)
            if not ready or "ready" not in ready:
                raise SandboxUnavailable(ready["error"] if ready else "sandbox server exited during set-up")
            self.warnings: list[str] = list(ready["warnings"])
        except BaseException:
            self.close()
            raise

    def _write_maps(self, host_uid: int, host_gid: int) -> None:
        pid = self.proc.pid
        if os.geteuid() != 0:  # unprivileged: only our own ids can be mapped
            host_uid, host_gid = os.geteuid(), os.getegid()
            with open(f"/proc/{pid}/setgroups", "w") as f:
                f.write("deny")
        # As root, ids 1..65535 of the sandbox (the owners tasks' files have: uid 1000, tar archives) map to a
        # range of host ids no account uses (``OWNER_ID_BASE``); root stays `nobody`. Nothing on the host is
        # owned by them, and the sandbox writes files only in its own mounts.
        def ids(host: int) -> str:
            clash = OWNER_ID_BASE <= host < OWNER_ID_BASE + OWNER_IDS
            return f"0 {host} 1\n" + ("" if os.geteuid() != 0 or clash else f"1 {OWNER_ID_BASE + 1} {OWNER_IDS - 1}\n")

        with open(f"/proc/{pid}/uid_map", "w") as f:
            f.write(ids(host_uid))
        with open(f"/proc/{pid}/gid_map", "w") as f:
            f.write(ids(host_gid))

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, obj: Request, fds: list[int]) -> None:
        with self._lock:
            _wire.send(self.ctl, obj, fds)

    def call(self, obj: Request, timeout_s: float = 10.0) -> Any:
        """A request answered on its own socket (session operations); the caller names the reply's shape."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with mine:
            try:
                self.send(obj, [theirs.fileno()])
            finally:
                theirs.close()
            msg = _recv_timeout(mine, timeout_s)
        if msg is None:
            raise SandboxUnavailable("sandbox server closed the request")
        return msg

    def close(self) -> None:
        try:
            self.ctl.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
