"""``Sandbox``: run a command or a piece of code in isolation, under quotas, and say what happened.

Covers: building requests for the fork-server (commands, Python/bash/C code, files, stdin,
environment), having each execution join its cgroups before it starts, handing it to
``supervise`` (stdio, limits, verdict) and its teardown to the ``Reaper``, the async entry
point ``arun``, and the seam sessions use (``execute``, ``call_server``). It also routes to the
explicit, loudly flagged unisolated mode for machines without namespaces.

Does not cover: namespace and mount set-up (``_server.py``), supervising a running execution
(``supervise.py``), stateful workspaces (``session.py``), concurrency limits across callers
(``pool.py``).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import os
import socket
import sys
import threading
import time
import warnings as pywarnings
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict, TypeVar

from posttrain.sandbox import cgroups
from posttrain.sandbox.launcher import SandboxUnavailable, ServerHandle
from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecResult, ExecStatus
from posttrain.sandbox.session import Session
from posttrain.sandbox.supervise import Outcome, OutputPump, Reaper, kill_execution, recv_hello, supervise

if TYPE_CHECKING:
    from posttrain.sandbox._server import ExecRequest, SessionRequest, TaskLimits
    from posttrain.sandbox.session import SessionReply

T = TypeVar("T")


class ServerArgs(TypedDict):
    """What every fork-server of one ``Sandbox`` is started with (``ServerHandle``'s arguments)."""

    ro_binds: list[str]
    rebinds: list[str]
    symlinks: dict[str, str]
    workspace_binds: dict[str, str]
    preload: list[str]
    host_uid: int
    host_gid: int
    manager: str


UNISOLATED_WARNING = ("UNISOLATED: this code ran without namespaces, seccomp or cgroups, as the "
                      "calling user, on the host file system. Never use this mode for untrusted code.")

LANGUAGES = ("python", "bash", "sh", "c")


# Mounted fresh inside every task, so host paths below them are hidden from it.
TASK_MOUNTS = ("/tmp", "/work", "/dev/shm", "/proc")
# Of those, where a runtime the tasks need (a virtual environment in /tmp) is bound again, read-only,
# inside each task's fresh mount. Not /work: it is the task's workspace (a session's snapshots, the
# code harness's clean-up), where an environment would show up as the task's own files.
REBOUND_MOUNTS = ("/tmp",)


def under_task_mount(path: str) -> str | None:
    """The task mount that hides `path` inside a sandbox, or None."""
    return next((m for m in TASK_MOUNTS if path == m or path.startswith(m + "/")), None)


def hidden_from_tasks(path: str) -> str | None:
    """The task mount that hides `path` from tasks even after rebinding, or None when tasks see it."""
    mount = under_task_mount(path)
    return None if mount in REBOUND_MOUNTS else mount


def task_python() -> str:
    """The interpreter tasks run: `sys.executable` (a virtual environment in /tmp included: it is
    bound again inside each task's /tmp), unless it lies where tasks cannot see it (/work, /dev/shm);
    then the real interpreter it links to, without that environment's packages."""
    exe = os.path.abspath(sys.executable)
    return exe if hidden_from_tasks(exe) is None else os.path.realpath(exe)


def hidden_environments() -> list[str]:
    """What tasks lose because this Python environment lies where they cannot see it (a warning
    each ``Sandbox`` repeats in every result), or nothing."""
    out = []
    for prefix in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}):
        hidden = hidden_from_tasks(prefix)
        if hidden is not None:
            out.append(f"the Python environment {prefix} lies under {hidden}, which every sandboxed task mounts "
                       f"fresh: tasks run {task_python()} without that environment's packages (install it "
                       f"elsewhere, or under {' or '.join(REBOUND_MOUNTS)}, to keep them)")
    return out


def default_ro_binds() -> list[str]:
    binds = ["/usr"]
    for prefix in {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}:
        if not prefix.startswith("/usr/"):
            binds.append(prefix)
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                "/etc/ssl", "/etc/ca-certificates", "/etc/hosts", "/etc/resolv.conf",
                "/etc/nsswitch.conf", "/etc/localtime", "/etc/mime.types"):
        if os.path.exists(etc):
            binds.append(etc)
    return binds


def rebinds_of(ro_binds: list[str]) -> list[str]:
    """The binds each task needs bound again inside its fresh mounts (``REBOUND_MOUNTS``)."""
    return [b for b in ro_binds if under_task_mount(b) in REBOUND_MOUNTS]


# Harbor's paths (tasks/harbor.py): real directories of the read-only root, on which each task binds
# directories of its own /work (``_server._bind_workspace_dirs``): /app is /work itself; /tests, /logs and
# /solution are /work/.harbor/{tests,logs,solution} when those exist (as plain directories, no symlink on the
# way) when the execution starts, which the verifier and the oracle arrange; otherwise they stay empty and
# read-only. So `find /tests`, `pwd -P` and `cd /app/..` behave as in a container, and nothing outside the
# task's own mounts is reachable through them.
WORKSPACE_BINDS = {"/app": "", "/tests": ".harbor/tests", "/logs": ".harbor/logs", "/solution": ".harbor/solution"}


def default_symlinks() -> dict[str, str]:
    """Merged-/usr layouts (/bin -> usr/bin etc., bound as directories where they are real)."""
    return {f"/{d}": f"usr/{d}" for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
            if os.path.islink(f"/{d}") and os.path.exists(f"/usr/{d}")}


def _validate_files(files: dict[str, bytes | str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, content in (files or {}).items():
        parts = name.split("/")
        if not name or name.startswith("/") or "\0" in name or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"file name {name!r} must be a relative path without '.', '..' or empty parts")
        data = content.encode() if isinstance(content, str) else bytes(content)
        out[name] = base64.b64encode(data).decode()
    return out


class Sandbox:
    """Isolated execution of untrusted commands and code.

    >>> with Sandbox() as sb:                                   # doctest: +SKIP
    ...     r = sb.run(code="print(6 * 7)")
    ...     r.status, r.stdout
    (<ExecStatus.OK: 'ok'>, '42\\n')

    ``await sb.arun(...)`` does the same from asyncio (a thread per running execution).
    ``prefork=True`` runs Python code inside the pre-forked, confined interpreter instead of
    starting ``python3`` (semantics of ``python -c``; modules in ``preload`` are already imported).
    """

    def __init__(self, limits: Limits | None = None, *, network: bool = False, prefork: bool = False,
                 preload: tuple[str, ...] = (), ro_binds: list[str] | None = None,
                 allow_unisolated: bool = False, host_uid: int = 65534, host_gid: int = 65534,
                 max_concurrency: int | None = None, sweep: bool = True):
        self.limits = limits or Limits()
        self.network = network
        self.prefork = prefork
        self.manager = cgroups.manager_tag()
        self.warnings: list[str] = []
        self.isolated = True
        self._closed = False
        workers = max_concurrency or 4 * (os.cpu_count() or 1)
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox")
        if sweep:
            from posttrain.sandbox.sweep import sweep_leftovers
            sweep_leftovers()
        self._cg = cgroups.probe() if os.geteuid() == 0 else cgroups.CgroupSupport(
            warnings=["not root: no cgroups; memory and process limits fall back to rlimits"])
        self.warnings += hidden_environments() + self._cg.warnings
        self._slots = cgroups.SlotPool(self._cg, self.manager, keep=workers)
        self._reaper = Reaper(self._slots, self.warnings)
        self._server: ServerHandle | None = None
        binds = ro_binds or default_ro_binds()
        self._server_args = ServerArgs(ro_binds=binds, rebinds=rebinds_of(binds), symlinks=default_symlinks(),
                                       workspace_binds=dict(WORKSPACE_BINDS),
                                       preload=list(preload), host_uid=host_uid, host_gid=host_gid,
                                       manager=self.manager)
        self._server_lock = threading.Lock()
        try:
            self._start_server()
        except SandboxUnavailable as e:
            if not allow_unisolated:
                raise SandboxUnavailable(
                    f"{e}. Refusing to run untrusted code without isolation; pass allow_unisolated=True "
                    "(CLI: --unisolated) only for trusted code.") from e
            self.isolated = False
            self.warnings.insert(0, UNISOLATED_WARNING + f" (reason: {e})")
            pywarnings.warn(UNISOLATED_WARNING, RuntimeWarning, stacklevel=2)
        for w in self.warnings:
            if w is not UNISOLATED_WARNING:
                pywarnings.warn(f"sandbox degraded: {w}", RuntimeWarning, stacklevel=2)

    # ------------------------------------------------------------------ lifecycle
    def _start_server(self) -> None:
        self._server = ServerHandle(**self._server_args)
        self.warnings += [w for w in self._server.warnings if w not in self.warnings]

    def _live_server(self) -> ServerHandle:
        with self._server_lock:
            if self._closed:
                raise SandboxUnavailable("sandbox is closed")
            if self._server is None or not self._server.alive:
                if self._server is not None:
                    self._server.close()
                self._start_server()
            assert self._server is not None
            return self._server

    @property
    def server_pid(self) -> int | None:
        """Host PID of the current fork-server, or None (unisolated, closed, not started yet)."""
        server = self._server
        return server.proc.pid if server is not None else None

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._reaper.join()
        if not self._slots.close():
            self.warnings.append("could not remove every idle cgroup")
        if self._cg.roots:
            cgroups.remove_manager(self._cg, self.manager)
        with self._server_lock:
            self._closed = True
            if self._server is not None:
                self._server.close()
                self._server = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self, files: dict[str, bytes | str] | None = None, *, limits: Limits | None = None,
                network: bool | None = None) -> Session:
        return Session(self, files=files, limits=limits, network=network)

    async def asession(self, files: dict[str, bytes | str] | None = None, *, limits: Limits | None = None,
                       network: bool | None = None) -> Session:
        """``session`` from asyncio: an empty one on the event loop (one short request to the fork-server,
        which would queue behind busy worker threads), one with ``files`` on a worker thread (it writes them)."""
        if not files:
            return Session(self, limits=limits, network=network)
        return await self.in_worker(lambda: Session(self, files=files, limits=limits, network=network))

    # ------------------------------------------------------------------ requests
    def _argv(self, command: str | list[str] | None, code: str | None, language: str,
              files: dict[str, bytes | str]) -> tuple[list[str], dict[str, bytes | str]]:
        """(argv, files)."""
        if (command is None) == (code is None):
            raise ValueError("give exactly one of command= or code=")
        if command is not None:
            return (["/bin/sh", "-c", command] if isinstance(command, str) else list(command)), files
        assert code is not None
        if language not in LANGUAGES:
            raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
        if language == "python":
            return [task_python(), "-c", code], files
        if language in ("bash", "sh"):
            return [language, "-c", code], files
        return ["/bin/sh", "-c", "gcc -O1 -o /tmp/main main.c -lm && exec /tmp/main"], {**files, "main.c": code}

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        pybin = os.path.dirname(task_python())
        env = {"PATH": f"{pybin}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
               "TZ": "UTC", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": "/tmp"}
        env.update(extra or {})
        return env

    def run(self, command: str | list[str] | None = None, *, code: str | None = None, language: str = "python",
            files: dict[str, bytes | str] | None = None, stdin: bytes | str | None = None,
            limits: Limits | None = None, network: bool | None = None, env: dict[str, str] | None = None,
            prefork: bool | None = None) -> ExecResult:
        """Run ``command`` (a shell string or an argv list) or ``code`` in ``language``."""
        return self.execute(command=command, code=code, language=language, files=files, stdin=stdin, limits=limits,
                            network=network, env=env, prefork=prefork).result

    async def arun(self, command: str | list[str] | None = None, **kwargs) -> ExecResult:
        """``run`` from asyncio, on one of the sandbox's worker threads."""
        return await self.in_worker(lambda: self.run(command, **kwargs))

    async def in_worker(self, fn: Callable[[], T]) -> T:
        """Await ``fn()`` run on one of this sandbox's worker threads (at most ``max_concurrency`` at once)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def execute(self, *, command: str | list[str] | None = None, code: str | None = None, language: str = "python",
                files: dict[str, bytes | str] | None = None, stdin: bytes | str | None = None,
                limits: Limits | None = None, network: bool | None = None, env: dict[str, str] | None = None,
                prefork: bool | None = None, sid: str | None = None, cwd: str | None = None) -> Outcome:
        """``run``, returning the raw output bytes beside the result; ``sid`` runs it on that
        session's workspace (``Session`` calls this), ``cwd`` in another working directory."""
        limits = limits or self.limits
        network = self.network if network is None else network
        prefork = self.prefork if prefork is None else prefork
        inline = code if (code is not None and language == "python" and prefork) else None
        argv, files = self._argv(command, code, language, files or {}) if inline is None else (None, files or {})
        stdin_b = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        req: ExecRequest = {"op": "exec", "argv": argv, "code": inline, "env": self._env(env),
                            "files": _validate_files(files), "network": bool(network), "sid": sid, "cwd": cwd,
                            "limits": self._task_limits(limits)}
        if not self.isolated:
            from posttrain.sandbox.unisolated import run_unisolated
            return run_unisolated(req, stdin_b, limits, self.warnings)
        out = self._execute(req, stdin_b, limits)
        out.result.warnings = list(self.warnings)
        return out

    def call_server(self, request: SessionRequest, *, restart: bool = True) -> SessionReply | None:
        """A session operation, answered by the fork-server on its own socket. With
        ``restart=False``, None when no server is alive (a dead one took the sessions with it)."""
        if not restart:
            server = self._server
            if server is None or not server.alive:
                return None
            return server.call(request)
        return self._live_server().call(request)

    def _task_limits(self, limits: Limits) -> TaskLimits:
        d: TaskLimits = {"wall_s": limits.wall_s, "cpu_s": limits.cpu_s, "memory_mb": limits.memory_mb,
                         "pids": limits.pids, "output_bytes": limits.output_bytes, "disk_mb": limits.disk_mb,
                         "nofile": limits.nofile, "owners": limits.owners}
        if self._cg.memory is None:
            d["rlimit_as_bytes"] = max(limits.memory_mb << 20, 64 << 20) * 4  # virtual, so generous
        if self._cg.pids is None:
            d["rlimit_nproc"] = limits.pids
        return d

    # ------------------------------------------------------------------ one execution
    def _execute(self, req: ExecRequest, stdin: bytes, limits: Limits) -> Outcome:
        t0 = time.monotonic()
        try:
            server = self._live_server()
        except (SandboxUnavailable, OSError) as e:
            return Outcome(ExecResult(ExecStatus.SANDBOX_ERROR, error=str(e), wall_s=time.monotonic() - t0))
        cg = None
        status = peer = None
        pipes: list[int] = []
        pidfd = -1
        pump = None
        try:
            if self._cg.roots:
                # pids - 1: the namespace's init is outside the group (it shares the server's memory).
                cg = self._slots.acquire(limits.memory_mb << 20, limits.pids - 1)
            status, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            pipes = [in_r, out_w, err_w]
            if cg is not None:
                pipes += cg.open_join_files()
            try:
                server.send(req, [peer.fileno(), *pipes])
            finally:
                peer.close()
                for fd in pipes:
                    os.close(fd)
                pipes = []
            pump = OutputPump(out_r, err_r, in_w, stdin, limits.output_bytes)
            hello, pidfd = recv_hello(status, timeout_s=10.0)
            if "hello" not in hello or pidfd < 0:
                why = hello.get("setup_error") or hello.get("error") or "no hello from the task's init"
                raise SandboxUnavailable(str(why))
            return supervise(status, pump, pidfd, cg, limits, group_cpu=bool(self._cg.cpu))
        except (OSError, SandboxUnavailable, ValueError) as e:
            kill_execution(cg, pidfd)
            return Outcome(ExecResult(ExecStatus.SANDBOX_ERROR, error=f"{type(e).__name__}: {e}",
                                      wall_s=time.monotonic() - t0))
        finally:
            if pump is not None:
                pump.close()
            if status is not None:
                status.close()
            # The task's init exits just after the task; waiting for it and removing the
            # cgroups is off the caller's path (``close()`` waits for it).
            self._reaper.put(pidfd, cg)
