"""``Sandbox``: run a command or a piece of code in isolation, under quotas, and say what happened.

Covers: building requests for the fork-server (commands, Python/bash/C code, files, stdin,
environment), having each execution join its cgroups before it starts, pumping stdin and
capped stdout/stderr, enforcing wall-clock and group CPU limits, classifying the outcome into
``ExecStatus``, tearing everything down, and the async entry point ``arun``. It also holds
the explicit, loudly flagged unisolated mode for machines without namespaces.

Does not cover: namespace and mount set-up (``_server.py``), stateful workspaces
(``session.py``), concurrency limits across callers (``pool.py``).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
import warnings as pywarnings
from dataclasses import dataclass, field

from posttrain.sandbox import _wire, cgroups
from posttrain.sandbox.launcher import SandboxUnavailable, ServerHandle
from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecResult, ExecStatus

UNISOLATED_WARNING = ("UNISOLATED: this code ran without namespaces, seccomp or cgroups, as the "
                      "calling user, on the host file system. Never use this mode for untrusted code.")

LANGUAGES = ("python", "bash", "sh", "c")


class SandboxError(RuntimeError):
    """A session operation (read_file, write_file, snapshot ...) failed."""


# Mounted fresh inside every task, so host paths below them are hidden from it.
TASK_MOUNTS = ("/tmp", "/work", "/dev/shm", "/proc")


def under_task_mount(path: str) -> str | None:
    """The task mount that hides `path` inside a sandbox, or None."""
    return next((m for m in TASK_MOUNTS if path == m or path.startswith(m + "/")), None)


def task_python() -> str:
    """The interpreter tasks run: `sys.executable`, unless it lies under a task mount (a virtual
    environment in /tmp, say); then the real interpreter it links to, without that environment's packages."""
    exe = os.path.abspath(sys.executable)
    return exe if under_task_mount(exe) is None else os.path.realpath(exe)


def default_ro_binds() -> list[str]:
    binds = ["/usr"]
    for prefix in {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}:
        hidden = under_task_mount(prefix)
        if hidden is not None:
            pywarnings.warn(
                f"the Python environment {prefix} lies under {hidden}, which every sandboxed task mounts fresh: "
                f"tasks run {task_python()} without that environment's packages (install it elsewhere to keep them)",
                RuntimeWarning, stacklevel=2,
            )
        if not prefix.startswith("/usr/"):
            binds.append(prefix)
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                "/etc/ssl", "/etc/ca-certificates", "/etc/hosts", "/etc/resolv.conf",
                "/etc/nsswitch.conf", "/etc/localtime", "/etc/mime.types"):
        if os.path.exists(etc):
            binds.append(etc)
    return binds


def default_symlinks() -> dict[str, str]:
    """Merged-/usr layouts: /bin -> usr/bin etc. (bound as directories where they are real)."""
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


@dataclass
class _Outcome:
    result: ExecResult
    stdout: bytes = b""
    stderr: bytes = b""


@dataclass
class _Pump:
    """Reads capped stdout/stderr and feeds stdin until both outputs close or a limit trips."""

    out_fd: int
    err_fd: int
    in_fd: int | None
    stdin: bytes
    cap: int
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    out_truncated: bool = False
    err_truncated: bool = False

    def __post_init__(self) -> None:
        self.open = {self.out_fd: self.out, self.err_fd: self.err}
        self.poller = select.poll()
        for fd in self.open:
            self.poller.register(fd, select.POLLIN)
        if self.in_fd is not None:
            if self.stdin:
                os.set_blocking(self.in_fd, False)
                self.poller.register(self.in_fd, select.POLLOUT)
            else:
                os.close(self.in_fd)
                self.in_fd = None

    def close_stdin(self) -> None:
        if self.in_fd is not None:
            self.poller.unregister(self.in_fd)
            os.close(self.in_fd)
            self.in_fd = None

    def step(self, timeout_s: float, extra: int | None = None) -> tuple[bool, bool]:
        """One poll round. Returns (over the output cap, ``extra`` fd readable)."""
        if extra is not None:
            self.poller.register(extra, select.POLLIN)
        try:
            events = self.poller.poll(max(0.0, timeout_s) * 1000)
        finally:
            if extra is not None:
                self.poller.unregister(extra)
        over, extra_ready = False, False
        for fd, ev in events:
            if fd == extra:
                extra_ready = True
            elif fd == self.in_fd:
                try:
                    n = os.write(fd, self.stdin[:65536])
                    self.stdin = self.stdin[n:]
                    if not self.stdin:
                        self.close_stdin()
                except BlockingIOError:
                    pass
                except OSError:  # EPIPE: the task closed stdin
                    self.close_stdin()
            elif fd in self.open:
                chunk = os.read(fd, 1 << 16) if ev & (select.POLLIN | select.POLLHUP | select.POLLERR) else b""
                if not chunk:
                    self.poller.unregister(fd)
                    del self.open[fd]
                    continue
                buf = self.open[fd]
                room = self.cap - len(buf)
                buf += chunk[:room]
                if len(chunk) > room:
                    over = True
                    if fd == self.out_fd:
                        self.out_truncated = True
                    else:
                        self.err_truncated = True
        return over, extra_ready

    @property
    def done(self) -> bool:
        return not self.open

    def close(self) -> None:
        self.close_stdin()
        for fd in (self.out_fd, self.err_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def _decode_wait(wstatus: int) -> tuple[int | None, int | None]:
    if os.WIFSIGNALED(wstatus):
        return None, os.WTERMSIG(wstatus)
    return os.WEXITSTATUS(wstatus), None


def classify(*, exit_code: int | None, sig: int | None, timed_out: bool, output_over: bool,
             cpu_over: bool, oom_kills: int) -> ExecStatus:
    """The verdict on one execution, most specific cause first."""
    if output_over:
        return ExecStatus.OUTPUT_LIMIT
    if oom_kills > 0:
        return ExecStatus.OOM
    if cpu_over or sig == signal.SIGXCPU:
        return ExecStatus.CPU_LIMIT
    if timed_out:
        return ExecStatus.TIMEOUT
    if exit_code == 0 and sig is None:
        return ExecStatus.OK
    return ExecStatus.RUNTIME_ERROR


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
        self.warnings += self._cg.warnings
        self._slots = cgroups.SlotPool(self._cg, self.manager, keep=workers)
        self._reaper: queue.Queue = queue.Queue()
        threading.Thread(target=self._reap, name="sandbox-reaper", daemon=True).start()
        self._server: ServerHandle | None = None
        self._server_args = dict(ro_binds=ro_binds or default_ro_binds(), symlinks=default_symlinks(),
                                 preload=list(preload), host_uid=host_uid, host_gid=host_gid, manager=self.manager)
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

    def _reap(self) -> None:
        while True:
            pidfd, cg = self._reaper.get()
            try:
                if pidfd >= 0:
                    if not select.select([pidfd], [], [], 5.0)[0]:
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                        self._await_exit(pidfd)
                    os.close(pidfd)
                # The namespace is gone: the cgroups are reset for the next execution, or removed.
                if cg is not None and not self._slots.release(cg):
                    self.warnings.append(f"could not remove cgroup {cg.paths}")
            except OSError as e:
                self.warnings.append(f"teardown failed: {e}")
            finally:
                self._reaper.task_done()

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
                network: bool | None = None):
        from posttrain.sandbox.session import Session
        return Session(self, files=files, limits=limits, network=network)

    # ------------------------------------------------------------------ requests
    def _argv(self, command: str | list[str] | None, code: str | None, language: str,
              files: dict[str, bytes | str]) -> tuple[list[str] | None, str | None, dict[str, bytes | str]]:
        """(argv, inline python code, files)."""
        if (command is None) == (code is None):
            raise ValueError("give exactly one of command= or code=")
        if command is not None:
            return (["/bin/sh", "-c", command] if isinstance(command, str) else list(command)), None, files
        if language not in LANGUAGES:
            raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
        if language == "python":
            return [task_python(), "-c", code], None, files
        if language in ("bash", "sh"):
            return [language, "-c", code], None, files
        return (["/bin/sh", "-c", "gcc -O1 -o /tmp/main main.c -lm && exec /tmp/main"], None,
                {**files, "main.c": code})

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
        return self._run(command=command, code=code, language=language, files=files, stdin=stdin, limits=limits,
                         network=network, env=env, prefork=prefork).result

    async def arun(self, command: str | list[str] | None = None, **kwargs) -> ExecResult:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: self.run(command, **kwargs))

    def _run(self, *, command=None, code=None, language="python", files=None, stdin=None, limits=None,
             network=None, env=None, prefork=None, sid: str | None = None, cwd: str | None = None) -> _Outcome:
        limits = limits or self.limits
        network = self.network if network is None else network
        prefork = self.prefork if prefork is None else prefork
        inline = code if (code is not None and language == "python" and prefork) else None
        argv, _, files = self._argv(command, code, language, files or {}) if inline is None else (None, None, files or {})
        stdin_b = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        req = {"op": "exec", "argv": argv, "code": inline, "env": self._env(env), "files": _validate_files(files),
               "network": bool(network), "sid": sid, "cwd": cwd, "limits": self._limit_dict(limits)}
        if not self.isolated:
            from posttrain.sandbox.unisolated import run_unisolated
            return run_unisolated(req, stdin_b, limits, self.warnings)
        out = self._execute(req, stdin_b, limits)
        out.result.warnings = list(self.warnings)
        return out

    def _limit_dict(self, limits: Limits) -> dict:
        d = limits.to_dict()
        if self._cg.memory is None:
            d["rlimit_as_bytes"] = max(limits.memory_mb << 20, 64 << 20) * 4  # virtual, so generous
        if self._cg.pids is None:
            d["rlimit_nproc"] = limits.pids
        return d

    # ------------------------------------------------------------------ one execution
    def _execute(self, req: dict, stdin: bytes, limits: Limits) -> _Outcome:
        t0 = time.monotonic()
        try:
            server = self._live_server()
        except (SandboxUnavailable, OSError) as e:
            return _Outcome(ExecResult(ExecStatus.SANDBOX_ERROR, error=str(e), wall_s=time.monotonic() - t0))
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
                pipes += cg.open_procs()
            try:
                server.send(req, [peer.fileno(), *pipes])
            finally:
                peer.close()
                for fd in pipes:
                    os.close(fd)
                pipes = []
            pump = _Pump(out_r, err_r, in_w, stdin, limits.output_bytes)
            hello, pidfd = self._recv_hello(status, timeout_s=10.0)
            if not hello.get("hello") or pidfd < 0:
                raise SandboxUnavailable(hello.get("setup_error") or hello.get("error") or "no hello from the task's init")
            return self._supervise(status, pump, pidfd, cg, limits, t0)
        except (OSError, SandboxUnavailable, ValueError) as e:
            self._kill(cg, pidfd)
            return _Outcome(ExecResult(ExecStatus.SANDBOX_ERROR, error=f"{type(e).__name__}: {e}",
                                       wall_s=time.monotonic() - t0))
        finally:
            if pump is not None:
                pump.close()
            if status is not None:
                status.close()
            # The task's init exits just after the task; waiting for it and removing the
            # cgroups is off the caller's path (``close()`` waits for it).
            self._reaper.put((pidfd, cg))

    @staticmethod
    def _recv_hello(sock: socket.socket, timeout_s: float) -> tuple[dict, int]:
        """The server's first message on an execution's status socket, and the pidfd of the
        execution's init (killing it kills everything in the execution) that rides along."""
        ready, _, _ = select.select([sock], [], [], timeout_s)
        if not ready:
            raise SandboxUnavailable("the task's init did not start")
        msg, fds = _wire.recv(sock)
        if msg is None:
            raise SandboxUnavailable("the task's init exited before starting the task")
        for fd in fds[1:]:
            os.close(fd)
        return msg, (fds[0] if fds else -1)

    @staticmethod
    def _kill(cg: cgroups.TaskCgroup | None, pidfd: int) -> None:
        if cg is not None:
            cg.kill()
        if pidfd >= 0:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                pass

    @staticmethod
    def _await_exit(pidfd: int, timeout_s: float = 5.0) -> None:
        select.select([pidfd], [], [], timeout_s)

    def _supervise(self, status: socket.socket, pump: _Pump, pidfd: int, cg: cgroups.TaskCgroup | None,
                   limits: Limits, t0: float) -> _Outcome:
        start = time.monotonic()
        deadline = start + limits.wall_s
        final: dict | None = None
        status_open = True
        timed_out = output_over = cpu_over = killed = False
        kill_at: float | None = None
        next_cpu_check = start + 0.1
        while not (pump.done and (not status_open or (final is not None and "task_wstatus" in final))):
            now = time.monotonic()
            if not killed and now >= deadline:
                timed_out = killed = True
            if killed and kill_at is None:
                self._kill(cg, pidfd)
                kill_at = now
            if kill_at is not None and now - kill_at > 5.0:
                break  # outputs still held open after a kill: give up on them
            wait = max(0.0, deadline - now)
            if cg is not None and self._cg.cpu:
                wait = min(wait, 0.1)
            if killed:
                wait = 0.05
            over, status_ready = pump.step(wait, status.fileno() if status_open else None)
            if over and not killed:
                output_over = killed = True
            if status_ready:
                msg, fds = _wire.recv(status)
                for fd in fds:
                    os.close(fd)
                if msg is None:
                    status_open = False
                elif "setup_error" in msg:
                    final = msg
                elif "error" in msg:  # the server could not start the task
                    final = {"setup_error": msg["error"]}
                elif "task_wstatus" in msg:
                    final = {**(final or {}), **msg} if not (final and "setup_error" in final) else final
                elif "wstatus" in msg:
                    final = {**msg, **(final or {})}
            # The group's CPU is read every 0.1 s, not on every poll round: a trivial run
            # has several rounds, and each read opens three cgroup files.
            if cg is not None and self._cg.cpu and not killed and time.monotonic() >= next_cpu_check:
                next_cpu_check = time.monotonic() + 0.1
                cpu = cg.cpu_s()
                if cpu is not None and cpu > limits.cpu_s:
                    cpu_over = killed = True
        wall = time.monotonic() - start
        if killed:
            self._await_exit(pidfd, 2.0)
        stats = cg.stats() if cg is not None else cgroups.TaskStats()
        res = ExecResult(ExecStatus.SANDBOX_ERROR, wall_s=wall, stdout_truncated=pump.out_truncated,
                         stderr_truncated=pump.err_truncated,
                         stdout=pump.out.decode("utf-8", "replace"), stderr=pump.err.decode("utf-8", "replace"))
        res.peak_memory_bytes = stats.peak_memory_bytes
        res.cpu_s = stats.cpu_s
        if final is not None and "setup_error" in final:
            res.error = f"sandbox set-up failed: {final['setup_error']}"
            return _Outcome(res, bytes(pump.out), bytes(pump.err))
        if final is None and not killed:
            res.error = "the task's init vanished without a status"
            return _Outcome(res, bytes(pump.out), bytes(pump.err))
        if final is not None:
            res.exit_code, res.signal = _decode_wait(final.get("task_wstatus", final.get("wstatus", 9)))
            if res.cpu_s is None and "utime" in final:
                res.cpu_s = final["utime"] + final["stime"]
            if res.peak_memory_bytes is None and "maxrss_kb" in final:
                res.peak_memory_bytes = final["maxrss_kb"] * 1024
        else:
            res.signal = signal.SIGKILL
        res.status = classify(exit_code=res.exit_code, sig=res.signal, timed_out=timed_out, output_over=output_over,
                              cpu_over=cpu_over or (res.cpu_s or 0) > limits.cpu_s, oom_kills=stats.oom_kills)
        return _Outcome(res, bytes(pump.out), bytes(pump.err))
