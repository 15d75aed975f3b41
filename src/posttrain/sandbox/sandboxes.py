"""Where one run's sandboxed work executes: a `Sandboxes` record, built once and passed in.

Covers: `Executor` (what one-shot verifier executions call: `Sandbox.arun`'s signature), `Sandboxes` (an executor
and a `Workspaces` for stateful sessions, the failures its workers reported, its `close`), `LazySandbox` (a local
`Sandbox` whose fork-server starts on first use, so a run that never executes code never starts one),
`local_sandboxes` (the default back end), and the one ambient value, `current_sandboxes` / `use_sandboxes`:
verifiers are built by registries from specs (`PerTask` even builds one per task's `meta["verifier"]` while it
judges), so the rollouter or evaluator that owns the run's `Sandboxes` sets it around the verifications it runs
(a `ContextVar`: asyncio tasks and `to_thread` inherit it; nothing else swaps it). Code outside any run (a test,
a script judging one response) gets this process's local default, started on first use.
Does not cover: the sandbox itself (`sandbox.py`), remote back ends (`distributed/ray_sandbox.py` builds a
`Sandboxes` over its pool), which back end a run uses (the wiring: `rl/build.py: build_sandboxes`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from posttrain.sandbox.limits import Limits
    from posttrain.sandbox.result import ExecResult
    from posttrain.sandbox.sandbox import Sandbox
    from posttrain.sandbox.workspace import Workspace, Workspaces

T = TypeVar("T")

# Imported once in a pre-forked sandbox's fork-server, so neither the code verifiers' harness nor typical
# solutions and tests pay for these imports in each execution.
PRELOAD = ("ast", "base64", "bisect", "collections", "copy", "ctypes", "decimal", "fractions", "functools",
           "hashlib", "heapq", "itertools", "json", "math", "random", "re", "shutil", "socket", "statistics",
           "string", "struct", "traceback", "typing")


class Executor(Protocol):
    """One-shot executions (`Sandbox.arun`): the code verifiers' harness runs, compilers, OpenSCAD."""

    async def arun(self, command: str | list[str] | None = None, **kwargs: Any) -> ExecResult: ...


class LazySandbox:
    """A local `Sandbox` (pre-forked, `preload` imported) whose fork-server starts on the first call; an
    `Executor` and a `Workspaces`. `close` closes it if it was started."""

    def __init__(self, prefork: bool = True, preload: tuple[str, ...] = PRELOAD, max_concurrency: int = 16):
        self.prefork, self.preload, self.max_concurrency = prefork, preload if prefork else (), max_concurrency
        self._sandbox: Sandbox | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def sandbox(self) -> Sandbox:
        """The started sandbox (started now if it was not; raises `SandboxUnavailable` on a machine without one)."""
        with self._lock:
            if self._closed:
                from posttrain.sandbox.launcher import SandboxUnavailable

                raise SandboxUnavailable("sandbox is closed")
            if self._sandbox is None:
                from posttrain.sandbox.sandbox import Sandbox

                self._sandbox = Sandbox(prefork=self.prefork, preload=self.preload, max_concurrency=self.max_concurrency)
            return self._sandbox

    @property
    def started(self) -> bool:
        return self._sandbox is not None

    async def arun(self, command: str | list[str] | None = None, **kwargs: Any) -> ExecResult:
        return await self.sandbox.arun(command, **kwargs)

    def session(self, files: dict[str, bytes | str] | None = None, *, limits: Limits | None = None,
                network: bool | None = None) -> Workspace:
        return self.sandbox.session(files, limits=limits, network=network)

    async def asession(self, files: dict[str, bytes | str] | None = None, *, limits: Limits | None = None,
                       network: bool | None = None) -> Workspace:
        return await self.sandbox.asession(files, limits=limits, network=network)

    async def in_worker(self, fn: Callable[[], T]) -> T:
        return await self.sandbox.in_worker(fn)

    def close(self) -> None:
        with self._lock:
            self._closed, sb, self._sandbox = True, self._sandbox, None
        if sb is not None:
            sb.close()


@dataclass
class Sandboxes:
    """A run's sandbox back end: `executor` for one-shot executions, `workspaces` for sessions (often one object,
    a `LazySandbox` or a `RaySandboxPool`), `failures` the lines its workers reported so far (a Ray sandbox worker
    that died and was rebuilt), `closer` what `close` runs."""

    executor: Executor
    workspaces: Workspaces
    backend: str = "local"
    failures: Callable[[], list[str]] = field(default=lambda: [], repr=False)
    closer: Callable[[], None] | None = field(default=None, repr=False)
    reported: int = 0  # how many of `failures()` `new_failures` has returned
    closed: bool = False

    def new_failures(self) -> list[str]:
        """One line per worker failure since the previous call: for the run's log and store, wherever this process
        is (the learner, a producer process, a Ray rollout actor)."""
        every = self.failures()
        fresh, self.reported = every[self.reported:], len(every)
        return list(fresh)

    def with_executor(self, executor: Executor) -> Sandboxes:
        """These workspaces with one-shot executions routed through `executor` (a spy, a meter, a fake), closing
        nothing of this one's: `with use_sandboxes(current_sandboxes().with_executor(spy)): ...`."""
        return Sandboxes(executor, self.workspaces, self.backend)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.closer is not None:
                self.closer()


def local_sandboxes(max_concurrency: int = 16, prefork: bool = True, preload: tuple[str, ...] = PRELOAD) -> Sandboxes:
    """A `Sandboxes` over one `LazySandbox` of this process (the default back end, `[sandbox] backend = "local"`)."""
    sb = LazySandbox(prefork=prefork, preload=preload, max_concurrency=max_concurrency)
    return Sandboxes(sb, sb, "local", closer=sb.close)


_CURRENT: ContextVar[Sandboxes | None] = ContextVar("posttrain_sandboxes", default=None)
_DEFAULT_LOCK = threading.Lock()
_default: list[Sandboxes] = []  # code outside any run: one local back end, started on first use, never swapped


def current_sandboxes() -> Sandboxes:
    """The `Sandboxes` of the run whose verification is under way (`use_sandboxes`), else this process's local
    default (for code that runs outside any run)."""
    current = _CURRENT.get()
    if current is not None:
        return current
    with _DEFAULT_LOCK:
        if not _default:
            import atexit

            _default.append(local_sandboxes())
            atexit.register(_default[0].close)
        return _default[0]


@contextlib.contextmanager
def use_sandboxes(sandboxes: Sandboxes | None) -> Iterator[Sandboxes | None]:
    """Verifications in this context (and the asyncio tasks and threads it starts) execute on `sandboxes`; None
    leaves the current ones."""
    if sandboxes is None:
        yield None
        return
    token = _CURRENT.set(sandboxes)
    try:
        yield sandboxes
    finally:
        _CURRENT.reset(token)
