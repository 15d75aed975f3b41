"""Supervising one execution once it runs: its stdio, its limits, its status, its verdict, its teardown.

Covers: ``OutputPump`` (feeds stdin, reads capped stdout/stderr), ``supervise`` (the loop that
enforces the wall-clock, output and group-CPU limits while reading the task's status
messages), ``classify`` (the ordered verdict on one execution), the status messages the
fork-server sends an execution's manager (``StatusMessage``, defined here, where they are
received), and ``Reaper`` (waits for each execution's init off the caller's path and hands its
cgroups back). Both the isolated path (``sandbox.py``) and the unisolated one
(``unisolated.py``) use these.

Does not cover: building requests or starting executions (``sandbox.py``), namespaces
(``_server.py``), cgroups themselves (``cgroups.py``).
"""

from __future__ import annotations

import os
import queue
import select
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Literal, TypedDict, final

from posttrain.sandbox import _wire, cgroups
from posttrain.sandbox.launcher import SandboxUnavailable
from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecResult, ExecStatus

# ----------------------------------------------------------------------------- status messages
# Sent by the fork-server (``_server.py``) on an execution's own status socket, in this order:
# ``Hello`` (with the pidfd of the execution's init riding along), then either ``SetupError``
# (from the task, which could not confine itself) or ``ServerError`` (the server could not start
# it), and ``TaskExit`` once the server reaped the task; then the socket closes.


@final  # lets a type checker tell the shapes apart by their keys
class Hello(TypedDict):
    hello: Literal[True]


@final
class SetupError(TypedDict):
    setup_error: str


@final
class ServerError(TypedDict):
    error: str


@final
class TaskExit(TypedDict):
    task_wstatus: int
    """The task's raw wait status (``os.wait4``)."""
    utime: float
    stime: float
    maxrss_kb: int


StatusMessage = Hello | SetupError | ServerError | TaskExit


@dataclass
class Outcome:
    """One execution's result and its raw output bytes (``ExecResult`` holds them decoded)."""

    result: ExecResult
    stdout: bytes = b""
    stderr: bytes = b""


@dataclass
class OutputPump:
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


def decode_wait(wstatus: int) -> tuple[int | None, int | None]:
    """(exit code, None) or (None, signal) from a raw wait status."""
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


def kill_execution(cg: cgroups.TaskCgroup | None, pidfd: int) -> None:
    """SIGKILL everything in the execution: its cgroup, and its init (which takes its namespace with it)."""
    if cg is not None:
        cg.kill()
    if pidfd >= 0:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass


def await_exit(pidfd: int, timeout_s: float = 5.0) -> None:
    select.select([pidfd], [], [], timeout_s)


def recv_hello(sock: socket.socket, timeout_s: float) -> tuple[StatusMessage, int]:
    """The server's first message on an execution's status socket (``Hello`` when all went
    well), and the pidfd of the execution's init (killing it kills everything in the
    execution) that rides along, or -1."""
    ready, _, _ = select.select([sock], [], [], timeout_s)
    if not ready:
        raise SandboxUnavailable("the task's init did not start")
    msg: StatusMessage | None
    msg, fds = _wire.recv(sock)
    if msg is None:
        raise SandboxUnavailable("the task's init exited before starting the task")
    for fd in fds[1:]:
        os.close(fd)
    return msg, (fds[0] if fds else -1)


@dataclass
class _Watch:
    """What ``supervise`` has learned of one execution so far."""

    setup_error: str | None = None
    exited: TaskExit | None = None
    status_open: bool = True
    timed_out: bool = False
    output_over: bool = False
    cpu_over: bool = False
    killed: bool = False
    """A limit tripped: the execution is killed (at ``kill_at``)."""
    kill_at: float | None = None

    def read_status(self, status: socket.socket) -> None:
        """Take one message (or the close) from the execution's status socket."""
        msg: StatusMessage | None
        msg, fds = _wire.recv(status)
        for fd in fds:
            os.close(fd)
        if msg is None:
            self.status_open = False
        elif "setup_error" in msg:
            self.setup_error = msg["setup_error"]
        elif "error" in msg:  # the server could not start the task
            self.setup_error = msg["error"]
        elif "task_wstatus" in msg:
            self.exited = msg


def supervise(status: socket.socket, pump: OutputPump, pidfd: int, cg: cgroups.TaskCgroup | None,
              limits: Limits, *, group_cpu: bool) -> Outcome:
    """Run an execution to its end: pump its stdio, kill it at the first limit it trips (wall
    clock, output, and with ``group_cpu`` the CPU time of its cgroup, read every 0.1 s), read
    its status messages, and classify what happened."""
    start = time.monotonic()
    deadline = start + limits.wall_s
    w = _Watch()
    next_cpu_check = start + 0.1
    watch_cpu = cg is not None and group_cpu
    while not (pump.done and (not w.status_open or w.exited is not None)):
        now = time.monotonic()
        if not w.killed and now >= deadline:
            w.timed_out = w.killed = True
        if w.killed and w.kill_at is None:
            kill_execution(cg, pidfd)
            w.kill_at = now
        if w.kill_at is not None and now - w.kill_at > 5.0:
            break  # outputs still held open after a kill: give up on them
        wait = max(0.0, deadline - now)
        if watch_cpu:
            wait = min(wait, 0.1)
        if w.killed:
            wait = 0.05
        over, status_ready = pump.step(wait, status.fileno() if w.status_open else None)
        if over and not w.killed:
            w.output_over = w.killed = True
        if status_ready:
            w.read_status(status)
        # The group's CPU is read every 0.1 s, not on every poll round: a trivial run
        # has several rounds, and each read opens three cgroup files.
        if watch_cpu and cg is not None and not w.killed and time.monotonic() >= next_cpu_check:
            next_cpu_check = time.monotonic() + 0.1
            cpu = cg.cpu_s()
            if cpu is not None and cpu > limits.cpu_s:
                w.cpu_over = w.killed = True
    wall = time.monotonic() - start
    if w.killed:
        await_exit(pidfd, 2.0)
    return _outcome(w, pump, cg.stats() if cg is not None else cgroups.TaskStats(), limits, wall)


def _outcome(w: _Watch, pump: OutputPump, stats: cgroups.TaskStats, limits: Limits, wall: float) -> Outcome:
    """The execution's result: a sandbox error when it never ran or vanished, else its exit and verdict."""
    res = ExecResult(ExecStatus.SANDBOX_ERROR, wall_s=wall, stdout_truncated=pump.out_truncated,
                     stderr_truncated=pump.err_truncated,
                     stdout=pump.out.decode("utf-8", "replace"), stderr=pump.err.decode("utf-8", "replace"))
    res.peak_memory_bytes = stats.peak_memory_bytes
    res.cpu_s = stats.cpu_s
    if w.setup_error is not None:
        res.error = f"sandbox set-up failed: {w.setup_error}"
        return Outcome(res, bytes(pump.out), bytes(pump.err))
    if w.exited is None and not w.killed:
        res.error = "the task's init vanished without a status"
        return Outcome(res, bytes(pump.out), bytes(pump.err))
    if w.exited is not None:
        res.exit_code, res.signal = decode_wait(w.exited["task_wstatus"])
        if res.cpu_s is None:
            res.cpu_s = w.exited["utime"] + w.exited["stime"]
        if res.peak_memory_bytes is None:
            res.peak_memory_bytes = w.exited["maxrss_kb"] * 1024
    else:
        res.signal = signal.SIGKILL
    res.status = classify(exit_code=res.exit_code, sig=res.signal, timed_out=w.timed_out, output_over=w.output_over,
                          cpu_over=w.cpu_over or (res.cpu_s or 0) > limits.cpu_s, oom_kills=stats.oom_kills)
    return Outcome(res, bytes(pump.out), bytes(pump.err))


class Reaper:
    """Tears executions down off the caller's path: waits (5 s at most, then SIGKILL) for each
    execution's init to exit, closes its pidfd and resets or removes its cgroups."""

    def __init__(self, slots: cgroups.SlotPool, warnings: list[str]):
        self.slots, self.warnings = slots, warnings
        self.queue: queue.Queue[tuple[int, cgroups.TaskCgroup | None]] = queue.Queue()
        threading.Thread(target=self._loop, name="sandbox-reaper", daemon=True).start()

    def put(self, pidfd: int, cg: cgroups.TaskCgroup | None) -> None:
        self.queue.put((pidfd, cg))

    def join(self) -> None:
        """Wait until every execution handed over so far is torn down."""
        self.queue.join()

    def _loop(self) -> None:
        while True:
            pidfd, cg = self.queue.get()
            try:
                if pidfd >= 0:
                    if not select.select([pidfd], [], [], 5.0)[0]:
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                        await_exit(pidfd)
                    os.close(pidfd)
                # The namespace is gone: the cgroups are reset for the next execution, or removed.
                if cg is not None and not self.slots.release(cg):
                    self.warnings.append(f"could not remove cgroup {cg.paths}")
            except OSError as e:
                self.warnings.append(f"teardown failed: {e}")
            finally:
                self.queue.task_done()
