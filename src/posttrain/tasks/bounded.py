"""Task generation bounded in time and memory: a generator that loops, or grows a number without end, costs one
call's timeout and a worker process, never the run.

Covers: `BoundedWorker`, one separate Python process (started with `python -m posttrain.tasks.bounded`, so it
shares no threads, locks or `__main__` with the trainer) that runs module-level functions on request, each within
`timeout_s` of wall time and under an address-space limit of `memory_mb`. A call that overruns kills the worker
(the next call starts a new one) and raises `GenerationTimeout`; an exception inside the call, `MemoryError`
included, comes back as `GenerationFailed` with its type and message; so does a worker that dies. The first
call of a function whose module the worker has not imported yet imports it first, outside the call's time limit;
`generation` tells a caller when state it set up in the worker (a built generator) is gone. The worker's
stdout goes nowhere (generators print), its stderr is the parent's; its string hashing is fixed
(`PYTHONHASHSEED=0` unless the parent's environment sets it), so a generator that iterates over a set of strings
makes the same entry in every run and after every resume. `shared_worker()`: the process's default
worker, started at its first call and closed at exit.
Does not cover: what is generated (`tasks/reasoning_gym.py` asks for entries), or scoring.
"""

from __future__ import annotations

import atexit
import importlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

START_TIMEOUT_S = 120.0  # a new worker's imports (reasoning-gym's take ~2 s on a quiet 2-core machine)


class GenerationTimeout(Exception):
    """A generator call ran past its time limit (the worker was killed)."""


class GenerationFailed(Exception):
    """A generator call raised, or its worker died. `out_of_bounds`: it died or ran out of memory (asking again
    would do the same), as opposed to an ordinary exception of the generator."""

    def __init__(self, message: str, out_of_bounds: bool = False) -> None:
        super().__init__(message)
        self.out_of_bounds = out_of_bounds


class BoundedWorker:
    """Runs `fn(*args)` in a worker process, bounded in wall time and memory (see the module docstring)."""

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 4096) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.restarts = 0  # workers killed or lost so far
        self.generation = 0  # moves whenever the worker process changes: what a caller warmed in it is gone
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._send: Connection | None = None
        self._recv: Connection | None = None
        self._imported: set[str] = set()  # modules this worker process has imported on request

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        env = {"PYTHONHASHSEED": "0", **os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
               "OMP_NUM_THREADS": "1"}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "posttrain.tasks.bounded", str(to_child_r), str(to_parent_w),
                 str(self.memory_mb)],
                pass_fds=(to_child_r, to_parent_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)
        finally:
            os.close(to_child_r)
            os.close(to_parent_w)
        self._send, self._recv = Connection(to_child_w, readable=False), Connection(to_parent_r, writable=False)
        if not self._recv.poll(START_TIMEOUT_S):
            self._kill()
            raise GenerationFailed(f"the generator worker did not start within {START_TIMEOUT_S:.0f} s")
        try:
            self._recv.recv()  # "ready": limits set
        except (EOFError, OSError):
            self._kill()
            raise GenerationFailed("the generator worker exited while starting") from None

    def _kill(self) -> None:
        for conn in (self._send, self._recv):
            if conn is not None:
                conn.close()
        self._send = self._recv = None
        self._imported = set()
        self.generation += 1
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None
            self.restarts += 1

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> Any:
        """`fn(*args)` in the worker (`fn` a module-level function; arguments and result pickled)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                if self._proc is not None:
                    self._kill()
                self._start()
            assert self._send is not None and self._recv is not None
            try:
                module = getattr(fn, "__module__", None) or "builtins"
                if module not in self._imported:  # an import's time is not the call's
                    self._send.send((_import, (module,)))
                    if not self._recv.poll(START_TIMEOUT_S):
                        self._kill()
                        raise GenerationFailed(f"the generator worker could not import {module} within "
                                               f"{START_TIMEOUT_S:.0f} s")
                    status, value = self._recv.recv()
                    if status != "ok":
                        raise GenerationFailed(value)
                    self._imported.add(module)
                self._send.send((fn, args))
                if not self._recv.poll(limit):
                    self._kill()
                    raise GenerationTimeout(f"took over {limit:g} s")
                status, value = self._recv.recv()
            except (EOFError, OSError, BrokenPipeError):
                code = self._proc.poll() if self._proc is not None else None
                self._kill()
                raise GenerationFailed(f"the generator worker died (exit code {code})", out_of_bounds=True) from None
        if status == "ok":
            return value
        raise GenerationFailed(value, out_of_bounds=value.startswith("MemoryError"))

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._kill()
                self.restarts -= 1  # a close is not a restart


def _import(name: str) -> None:
    importlib.import_module(name)


_shared: BoundedWorker | None = None
_shared_lock = threading.Lock()


def shared_worker() -> BoundedWorker:
    """The process's default worker, closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = BoundedWorker()
            atexit.register(_shared.close)
        return _shared


def _serve(read_fd: int, write_fd: int, memory_mb: int) -> None:
    """The worker's loop: limits, "ready", then one reply per request until the parent goes."""
    import resource

    if memory_mb > 0:
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    recv, send = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    send.send("ready")
    while True:
        try:
            fn, args = recv.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - the generator's failure goes back as a one-line reason
            reply = ("err", f"{type(exc).__name__}: {exc}"[:500])
        try:
            send.send(reply)
        except (BrokenPipeError, OSError):
            return
        except Exception as exc:  # noqa: BLE001 - pickling fails before anything is written: say so instead
            send.send(("err", f"its result could not be sent back: {type(exc).__name__}: {exc}"[:500]))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
