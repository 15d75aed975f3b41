"""Sandbox executions and agent workspaces on Ray actors, so code verification and agent tools scale with nodes
(`[sandbox] backend = "ray"`, `workers`; extra `ray`).

Covers: `SandboxWorker`, the body of an async actor that owns one `SandboxPool` on its node (its own
fork-server, its own concurrency bound) and answers `execute(command, kwargs)` with the `ExecResult` the
local pool gives for the same arguments, and holds stateful sessions by id (`session_open` with files and
limits, `session_exec`, `session_read`/`session_write`, `session_snapshot`/`session_rollback`, `session_fork`:
a fork lives on its parent's worker, `session_close`); `RaySandboxPool`, the caller's side, with the local
pool's `run` / `arun` / `map` / `close`, so the code verifiers take it in place of a local sandbox, and the
`sandbox.workspace.Workspaces` seam (`session` / `asession` / `in_worker`), so the agent envs, tools and
rollouter take it in place of a local `Sandbox`; `RaySession`, a session's proxy with `Session`'s API (the
sync methods and `aexec`, `afork`, `aread_file`, `awrite_file`, `aclose`), every call pinned to the worker that
holds it.
Executions are spread over N workers (least-loaded by executions in flight, SPREAD-scheduled across nodes),
sessions over the same workers least-loaded by open sessions; every call, an execution or a session's,
counts against its worker's `inflight` bound (a caller past it waits: backpressure). An execution whose
worker died is re-submitted to another live worker (the dead one rebuilt, the failure warned and counted;
the trainer keeps it in the run store), so each call returns exactly one result; a timeout or a sandbox
failure is an `ExecResult`, and a worker that dies on every attempt gives a SANDBOX_ERROR result, never a
traceback. A session cannot move: when its
worker dies, the sessions it held are lost (counted in `PoolStats.sessions_lost`), and every later operation
on them raises `SessionLost` (`exec`/`aexec` answer a SANDBOX_ERROR result instead; `close` does nothing),
which the agent runtime turns into an env_error episode (masked in training, never scored 0); the slot's
rebuilt worker takes new sessions. `make_pool(cfg)` builds one from the `[sandbox]` section, and
`sandboxes_for(cfg)` wraps it as a run's `Sandboxes` (what `posttrain.wiring` supplies to `rl/build.py:
build_sandboxes`, which passes it to the run's rollouter and evaluations).
Does not cover: moving or re-creating a lost session (its episode ends), one set of workers shared between
processes (every process that builds the domains, an async producer or a Ray rollout actor included, owns
its own `sandbox.workers`), placement groups. Sync `RaySession` methods block their thread (each runs a short
event loop of its own): from asyncio use the `a*` forms, never the sync ones on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from posttrain.aio import run_sync
from posttrain.config import RunConfig
from posttrain.distributed.ray_backend import RayMissingError, connect
from posttrain.extras import require
from posttrain.sandbox.launcher import SandboxUnavailable
from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecResult, ExecStatus
from posttrain.sandbox.sandboxes import PRELOAD, Sandboxes
from posttrain.sandbox.session import SandboxError, SessionLost

if TYPE_CHECKING:
    from posttrain.sandbox.session import Session

T = TypeVar("T")


def _ray() -> Any:
    return require("ray", "ray", "sandbox.backend = 'ray'", RayMissingError)


class SandboxWorker:
    """The actor's body (wrapped by `ray.remote` in `RaySandboxPool`): one `SandboxPool` on its node, and the
    sessions opened on it, by id."""

    def __init__(self, index: int, max_concurrency: int, sandbox_kwargs: dict[str, Any]) -> None:
        from posttrain.sandbox import SandboxPool

        self.index = index
        self.pool = SandboxPool(max_concurrency=max_concurrency, **sandbox_kwargs)
        self.executed = 0
        self.inflight = 0
        self.peak_inflight = 0  # the most calls (executions, session operations) this actor held at once
        self.sessions: dict[str, Session] = {}
        self.sessions_opened = 0
        self.session_calls = 0

    async def ready(self) -> int:
        return self.index

    async def execute(self, command: Any, kwargs: dict[str, Any]) -> ExecResult:
        self._enter()
        try:
            result = await self.pool.run(command, **kwargs)
        finally:
            self.inflight -= 1
        self.executed += 1
        return result

    def _enter(self) -> None:
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        """A blocking session call on one of the sandbox's threads: the actor's event loop keeps answering
        (a session's lock may be held by a long execution of its own)."""
        self._enter()
        self.session_calls += 1
        try:
            return await self.pool.sandbox.in_worker(fn)
        finally:
            self.inflight -= 1

    def _session(self, sid: str) -> Session:
        s = self.sessions.get(sid)
        if s is None:
            raise SessionLost(f"sandbox worker {self.index} holds no session {sid}")
        return s

    def _hold(self, s: Session) -> tuple[str, Limits]:
        self.sessions[s.id] = s
        self.sessions_opened += 1
        return s.id, s.limits

    async def session_open(self, files: dict[str, bytes | str] | None, limits: Limits | None,
                           network: bool | None) -> tuple[str, Limits]:
        """A new session on this worker (its files written and snapshotted); its id and its limits."""
        from posttrain.sandbox.session import Session

        sb = self.pool.sandbox
        return self._hold(await self._on_thread(lambda: Session(sb, files=files, limits=limits, network=network)))

    async def session_fork(self, sid: str, limits: Limits | None, network: bool | None) -> tuple[str, Limits]:
        parent = self._session(sid)
        return self._hold(await self._on_thread(lambda: parent.fork(limits=limits, network=network)))

    async def session_exec(self, sid: str, kwargs: dict[str, Any]) -> ExecResult:
        s = self._session(sid)
        return await self._on_thread(lambda: s.exec(**kwargs))

    async def session_read(self, sid: str, path: str) -> bytes:
        s = self._session(sid)
        return await self._on_thread(lambda: s.read_file(path))

    async def session_write(self, sid: str, path: str, data: bytes | str) -> None:
        s = self._session(sid)
        await self._on_thread(lambda: s.write_file(path, data))

    async def session_snapshot(self, sid: str) -> int:
        s = self._session(sid)
        return await self._on_thread(s.snapshot)

    async def session_rollback(self, sid: str, layer: int) -> None:
        s = self._session(sid)
        await self._on_thread(lambda: s.rollback(layer))

    async def session_close(self, sid: str) -> None:
        s = self.sessions.pop(sid, None)
        if s is not None:
            await self._on_thread(s.close)

    async def stats(self) -> dict[str, Any]:
        import ray

        return {"index": self.index, "executed": self.executed, "inflight": self.inflight, "peak_inflight": self.peak_inflight,
                "running": self.pool.running, "waiting": self.pool.waiting, "sessions": len(self.sessions),
                "sessions_opened": self.sessions_opened, "session_calls": self.session_calls,
                "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}


@dataclass
class _Slot:
    """One worker position: its current actor (rebuilt in place when it dies) and what is in flight on it."""

    index: int
    actor: Any
    generation: int = 0
    inflight: int = 0
    delivered: int = 0  # results returned to callers from this position
    sessions: int = 0  # sessions open on the current actor
    opening: int = 0  # sessions being opened on it (counted when placing the next, so concurrent opens spread)
    died: str = ""  # why the last actor at this position died


@dataclass
class PoolStats:
    """What a `RaySandboxPool` did: every call answered exactly once (`calls == results`; an answer is an
    `ExecResult`, or the exception the local pool raises for a bad request)."""

    calls: int = 0
    results: int = 0
    resubmitted: int = 0  # executions sent again after their worker died
    worker_failures: int = 0  # workers found dead and rebuilt
    gave_up: int = 0  # calls answered SANDBOX_ERROR after `max_attempts` dead workers
    per_worker: list[int] = field(default_factory=list)  # results delivered by each worker position
    inflight: list[int] = field(default_factory=list)  # calls in flight on each worker position now
    failures: list[str] = field(default_factory=list)  # one line per dead worker
    sessions_opened: int = 0  # sessions opened, forks included
    sessions_closed: int = 0
    sessions_lost: int = 0  # sessions open on a worker when it died
    session_calls: int = 0  # session operations answered by a worker
    sessions: list[int] = field(default_factory=list)  # sessions open on each worker position now
    sessions_per_worker: list[int] = field(default_factory=list)  # sessions ever opened at each worker position


class RaySession:
    """A session held by one Ray sandbox worker: `Session`'s API (`sandbox.workspace.Workspace`), every call
    sent to that worker. Once its worker has died it is lost: see the module's docstring."""

    def __init__(self, pool: RaySandboxPool, slot: _Slot, generation: int, sid: str, limits: Limits,
                 network: bool | None, parent_id: str | None = None) -> None:
        self._pool = pool
        self._slot = slot
        self._generation = generation  # of the actor that holds it: another generation means it is lost
        self.id = sid
        self.limits = limits
        self.network = network
        self.parent_id = parent_id
        self._closed = False

    @property
    def sandbox(self) -> RaySandboxPool:
        return self._pool

    @property
    def worker(self) -> int:
        """The worker position that holds this session."""
        return self._slot.index

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("session is closed")

    async def aexec(self, command: str | list[str] | None = None, *, code: str | None = None,
                    language: str = "python", files: dict[str, bytes | str] | None = None,
                    stdin: bytes | str | None = None, limits: Limits | None = None,
                    prefork: bool | None = None) -> ExecResult:
        """As `Session.exec`, on the worker; a lost session answers SANDBOX_ERROR (as any sandbox failure)."""
        self._check_open()
        kwargs = {"command": command, "code": code, "language": language, "files": files, "stdin": stdin,
                  "limits": limits or self.limits, "prefork": prefork}
        try:
            result: ExecResult = (await self._pool._call(self, "session_exec", kwargs))[0]
        except SessionLost as exc:
            return ExecResult(ExecStatus.SANDBOX_ERROR, error=str(exc))
        return result

    def exec(self, command: str | list[str] | None = None, *, code: str | None = None, language: str = "python",
             files: dict[str, bytes | str] | None = None, stdin: bytes | str | None = None,
             limits: Limits | None = None, prefork: bool | None = None) -> ExecResult:
        return run_sync(self.aexec(command, code=code, language=language, files=files, stdin=stdin, limits=limits,
                                   prefork=prefork))

    async def aread_file(self, path: str) -> bytes:
        self._check_open()
        data: bytes = (await self._pool._call(self, "session_read", path))[0]
        return data

    def read_file(self, path: str) -> bytes:
        return run_sync(self.aread_file(path))

    async def awrite_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        await self._pool._call(self, "session_write", path, data)

    def write_file(self, path: str, data: bytes | str) -> None:
        run_sync(self.awrite_file(path, data))

    async def asnapshot(self) -> int:
        self._check_open()
        return int((await self._pool._call(self, "session_snapshot"))[0])

    def snapshot(self) -> int:
        return run_sync(self.asnapshot())

    async def arollback(self, snapshot_id: int) -> None:
        self._check_open()
        await self._pool._call(self, "session_rollback", int(snapshot_id))

    def rollback(self, snapshot_id: int) -> None:
        run_sync(self.arollback(snapshot_id))

    async def afork(self, *, limits: Limits | None = None, network: bool | None = None) -> RaySession:
        """As `Session.fork`: the child lives on this session's worker (it reads this one's layers there)."""
        if self._closed:
            raise SandboxError(f"cannot fork session {self.id}: it is closed")
        net = self.network if network is None else network
        (sid, lim), generation = await self._pool._call(self, "session_fork", limits or self.limits, net)
        return self._pool._adopt(self._slot, generation, sid, lim, net, parent_id=self.id)

    def fork(self, *, limits: Limits | None = None, network: bool | None = None) -> RaySession:
        return run_sync(self.afork(limits=limits, network=network))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._pool._close_session(self)

    def close(self) -> None:
        run_sync(self.aclose())

    def __enter__(self) -> RaySession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RaySandboxPool:
    """Executions and sessions spread over `workers` Ray sandbox actors; the same calls and results as
    `SandboxPool` (executions) and `Sandbox` (`session`, `asession`, `in_worker`).

    >>> pool = RaySandboxPool(workers=2, prefork=True)             # doctest: +SKIP
    >>> asyncio.run(pool.run(code="print(6 * 7)")).stdout
    '42\\n'
    >>> s = pool.session(files={"a.txt": "1"}); s.read_file("a.txt"), s.worker   # doctest: +SKIP
    (b'1', 0)
    """

    def __init__(self, workers: int = 2, *, max_concurrency: int = 16, inflight: int | None = None,
                 worker_cpus: float = 1.0, address: str | None = None, max_attempts: int = 3,
                 wait_ready: bool = True, **sandbox_kwargs: Any) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        ray = _ray()
        connect(address)
        self.max_concurrency = max_concurrency
        self.inflight = inflight or max_concurrency  # per worker: beyond it a caller waits (backpressure)
        self.max_attempts = max_attempts
        self._sandbox_kwargs = sandbox_kwargs
        # SPREAD: one pool per node where the cluster has the nodes; the actor's own concurrency is the client's
        # bound plus room for `stats`
        self._cls = ray.remote(SandboxWorker).options(num_cpus=worker_cpus, max_restarts=0,
                                                      max_concurrency=self.inflight + 4, scheduling_strategy="SPREAD")
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._slots = [_Slot(i, self._spawn(i)) for i in range(workers)]
        self._stats = PoolStats(per_worker=[0] * workers, sessions_per_worker=[0] * workers)
        self._closed = False
        # `in_worker`: blocking calls (a sync session call waits on its worker) off the caller's event loop
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=workers * self.inflight,
                                                              thread_name_prefix="ray-sandbox")
        if wait_ready:
            try:
                ray.get([s.actor.ready.remote() for s in self._slots])
            except ray.exceptions.RayError as exc:
                self.close()
                raise SandboxUnavailable(f"a Ray sandbox worker did not start: {_why(exc)}") from None

    def _spawn(self, index: int) -> Any:
        return self._cls.remote(index, self.max_concurrency, self._sandbox_kwargs)

    # ------------------------------------------------------------------ slots
    def _pick(self, avoid: set[int]) -> _Slot | None:
        """The least-loaded worker with room, preferring ones not in `avoid` (where this call's worker died)."""
        free = [s for s in self._slots if s.inflight < self.inflight]
        preferred = [s for s in free if s.index not in avoid]
        if not preferred and any(s.index not in avoid for s in self._slots):
            return None  # a preferred worker is busy: wait for it rather than go back to a rebuilt one at once
        pool = preferred or free
        return min(pool, key=lambda s: (s.inflight, s.index)) if pool else None

    def _pick_for_session(self, avoid: set[int]) -> _Slot | None:
        """The worker with the fewest sessions (open or being opened), preferring ones not in `avoid`; None
        while it has no room for one more call (the new session waits for that worker, not another)."""
        candidates = [s for s in self._slots if s.index not in avoid] or self._slots
        slot = min(candidates, key=lambda s: (s.sessions + s.opening, s.inflight, s.index))
        if slot.inflight >= self.inflight:
            return None
        slot.opening += 1
        return slot

    def _pinned(self, session: RaySession) -> _Slot | None:
        """The session's own worker when it has room (None: wait); `SessionLost` when that worker died."""
        slot = session._slot
        if slot.generation != session._generation:
            raise SessionLost(f"session {session.id} was lost with sandbox worker {slot.index}, which died "
                              f"({slot.died}); the worker was rebuilt without it")
        return slot if slot.inflight < self.inflight else None

    async def _reserve(self, choose: Callable[[], _Slot | None]) -> tuple[_Slot, Any, int]:
        """A slot `choose` picks (under the lock), its in-flight count taken; waits while it picks none."""
        loop = asyncio.get_running_loop()  # callers come from several event loops (aio.run_sync): wake each on its own
        while True:
            with self._lock:
                if self._closed:
                    raise SandboxUnavailable("the Ray sandbox pool is closed")
                slot = choose()
                if slot is not None:
                    slot.inflight += 1
                    return slot, slot.actor, slot.generation
                fut: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, fut))
            await fut

    def _release(self, slot: _Slot) -> None:
        with self._lock:
            slot.inflight -= 1
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:  # each retries its pick; those that find no room wait again
            _notify(loop, fut)

    def _died(self, slot: _Slot, generation: int, why: str) -> None:
        """Rebuild `slot`'s actor, once per death however many calls saw it; its sessions are lost."""
        ray = _ray()
        with self._lock:
            if slot.generation != generation or self._closed:
                return
            old = slot.actor
            slot.actor = self._spawn(slot.index)
            slot.generation += 1
            slot.died = why
            lost, slot.sessions = slot.sessions, 0
            self._stats.worker_failures += 1
            self._stats.sessions_lost += lost
            message = (f"sandbox worker {slot.index} died ({why}); rebuilt, its executions re-submitted"
                       + (f", its {lost} open sessions lost" if lost else ""))
            self._stats.failures.append(message)
        try:
            ray.kill(old)
        except Exception:  # noqa: BLE001 - already gone
            pass
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    async def _remote(self, slot: _Slot, actor: Any, method: str, *args: Any) -> Any:
        """One call on `actor`, its slot released after; the actor's own exception re-raised as it was."""
        ray = _ray()
        ref = None
        try:
            ref = getattr(actor, method).remote(*args)
            return await asyncio.wrap_future(ref.future())
        except asyncio.CancelledError:  # the caller gave up (a verifier's deadline): free the worker's slot too
            if ref is not None:
                _cancel(ray, ref)
            raise
        except ray.exceptions.RayTaskError as exc:  # raised by the worker's own code (a bad request, a SandboxError)
            raise (exc.cause if isinstance(exc.cause, Exception) else RuntimeError(str(exc))) from None
        finally:
            self._release(slot)

    # ------------------------------------------------------------------ executions
    async def run(self, command: str | list[str] | None = None, **kwargs: Any) -> ExecResult:
        """Like `SandboxPool.run`: waits for room on a worker (backpressure), then runs like `Sandbox.run` there."""
        ray = _ray()
        with self._lock:
            self._stats.calls += 1
        avoid: set[int] = set()
        why = ""
        for attempt in range(self.max_attempts):
            slot, actor, generation = await self._reserve(lambda: self._pick(avoid))
            try:
                result: ExecResult = await self._remote(slot, actor, "execute", command, kwargs)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                why = _why(exc)
                self._died(slot, generation, why)
                avoid.add(slot.index)
                if attempt + 1 < self.max_attempts:
                    with self._lock:
                        self._stats.resubmitted += 1
                continue
            except Exception:  # the pool's own exception (bad arguments): answered, as by the local pool
                with self._lock:
                    self._stats.results += 1
                raise
            with self._lock:
                self._stats.results += 1
                slot.delivered += 1
                self._stats.per_worker[slot.index] += 1
            return result
        with self._lock:
            self._stats.results += 1
            self._stats.gave_up += 1
        return ExecResult(ExecStatus.SANDBOX_ERROR,
                          error=f"Ray sandbox workers died on {self.max_attempts} attempts: {why}")

    async def arun(self, command: str | list[str] | None = None, **kwargs: Any) -> ExecResult:
        """`run` under `Sandbox.arun`'s name: what the code verifiers call on the shared sandbox."""
        return await self.run(command, **kwargs)

    async def map(self, requests: Iterable[dict[str, Any]]) -> list[ExecResult]:
        """Run each `Sandbox.run` keyword dict; results in order."""
        return list(await asyncio.gather(*(self.run(**req) for req in requests)))

    # ------------------------------------------------------------------ sessions
    async def asession(self, files: dict[str, bytes | str] | None = None, *, limits: Limits | None = None,
                       network: bool | None = None) -> RaySession:
        """A new session on the worker with the fewest open sessions (waiting for room on it), `files` written
        and snapshotted as `Session(files=...)` does. A worker found dead is rebuilt and the open tried on
        another; `SandboxError` after `max_attempts` dead workers."""
        ray = _ray()
        avoid: set[int] = set()
        why = ""
        for _ in range(self.max_attempts):
            slot, actor, generation = await self._reserve(lambda: self._pick_for_session(avoid))
            try:
                sid, lim = await self._remote(slot, actor, "session_open", files, limits, network)
            except BaseException as exc:
                with self._lock:
                    slot.opening -= 1
                if not isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError)):
                    raise
                why = _why(exc)
                self._died(slot, generation, why)
                avoid.add(slot.index)
                continue
            return self._adopt(slot, generation, sid, lim, network, opening=True)
        raise SandboxError(f"could not open a session: Ray sandbox workers died on {self.max_attempts} attempts: {why}")

    def session(self, files: dict[str, bytes | str] | None = None, *, limits: Limits | None = None,
                network: bool | None = None) -> RaySession:
        """`asession` from synchronous code (blocks this thread)."""
        return run_sync(self.asession(files, limits=limits, network=network))

    async def in_worker(self, fn: Callable[[], T]) -> T:
        """Await the blocking `fn()` on one of this pool's threads (`Sandbox.in_worker`'s role)."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn)

    def _adopt(self, slot: _Slot, generation: int, sid: str, limits: Limits, network: bool | None,
               parent_id: str | None = None, opening: bool = False) -> RaySession:
        """The proxy of a session the worker at `slot` (of `generation`) now holds; counted open there under the
        same lock that ends its `opening` count, so a concurrent open never sees it in neither."""
        with self._lock:
            if opening:
                slot.opening -= 1
            if slot.generation == generation:  # else its worker died since it answered: born lost
                slot.sessions += 1
            self._stats.sessions_opened += 1
            self._stats.sessions_per_worker[slot.index] += 1
        return RaySession(self, slot, generation, sid, limits, network, parent_id)

    async def _call(self, session: RaySession, method: str, *args: Any) -> tuple[Any, int]:
        """A session operation on its own worker: (the answer, the worker's generation). `SessionLost` when
        that worker has died (found now, or before)."""
        ray = _ray()
        slot, actor, generation = await self._reserve(lambda: self._pinned(session))
        try:
            out = await self._remote(slot, actor, method, session.id, *args)
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
            self._died(slot, generation, _why(exc))
            raise SessionLost(f"session {session.id} was lost with sandbox worker {slot.index}, which died "
                              f"({_why(exc)})") from None
        with self._lock:
            self._stats.session_calls += 1
        return out, generation

    async def _close_session(self, session: RaySession) -> None:
        """Close it on its worker; nothing to do for a lost one (its worker took it) or once the pool is closed."""
        try:
            await self._call(session, "session_close")
        except (SessionLost, SandboxUnavailable):
            return
        with self._lock:
            if session._slot.generation == session._generation:
                session._slot.sessions -= 1
            self._stats.sessions_closed += 1

    # ------------------------------------------------------------------ inspection, lifecycle
    @property
    def workers(self) -> int:
        return len(self._slots)

    def actor(self, index: int) -> Any:
        """The actor now at position `index` (tests kill it)."""
        return self._slots[index].actor

    def stats(self) -> PoolStats:
        with self._lock:
            s = self._stats
            return PoolStats(calls=s.calls, results=s.results, resubmitted=s.resubmitted,
                             worker_failures=s.worker_failures, gave_up=s.gave_up, per_worker=list(s.per_worker),
                             inflight=[slot.inflight for slot in self._slots], failures=list(s.failures),
                             sessions_opened=s.sessions_opened, sessions_closed=s.sessions_closed,
                             sessions_lost=s.sessions_lost, session_calls=s.session_calls,
                             sessions=[slot.sessions for slot in self._slots],
                             sessions_per_worker=list(s.sessions_per_worker))

    def worker_stats(self) -> list[dict[str, Any]]:
        """Each live worker's own count of executions and sessions, its pid and node."""
        ray = _ray()
        return list(ray.get([s.actor.stats.remote() for s in self._slots]))

    def close(self) -> None:
        ray = _ray()
        with self._lock:
            self._closed = True
            actors, waiters, self._waiters = [s.actor for s in self._slots], self._waiters, []
        for loop, fut in waiters:
            _notify(loop, fut)
        self._threads.shutdown(wait=False)
        for a in actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def __enter__(self) -> RaySandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _notify(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
    try:
        loop.call_soon_threadsafe(_wake, fut)
    except RuntimeError:  # that caller was cancelled and its loop has closed: nobody to wake
        pass


def _cancel(ray: Any, ref: Any) -> None:
    try:
        ray.cancel(ref)
    except Exception:  # noqa: BLE001 - already finished, or its worker gone
        pass


def _why(exc: BaseException) -> str:
    """One line: the Ray error's head and, for a remote traceback, its last line (the exception that was raised
    in the worker: the cause, which a head alone cut off)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    head = " ".join(str(exc).split())[:200]
    cause = lines[-1] if len(lines) > 1 else ""
    return f"{type(exc).__name__}: {head}" + (f" ... {cause[:300]}" if cause and cause not in head else "")



def make_pool(cfg: RunConfig) -> RaySandboxPool:
    """The `[sandbox]` section's Ray sandbox workers, each a pre-forked sandbox with common modules preloaded
    (`sandbox.max_concurrency` executions at once), on the cluster at `ray.address`."""
    sc = cfg.sandbox
    return RaySandboxPool(sc.workers, max_concurrency=sc.max_concurrency, inflight=sc.inflight,
                          worker_cpus=sc.worker_cpus, address=cfg.ray.address, prefork=True, preload=PRELOAD)


def sandboxes_for(cfg: RunConfig) -> Sandboxes:
    """`sandbox.backend = "ray"`: one `RaySandboxPool` as a run's executor and workspaces; its worker failures are
    the run's to report, `close` ends its actors."""
    pool = make_pool(cfg)
    return Sandboxes(pool, pool, "ray", failures=lambda: list(pool.stats().failures), closer=pool.close)
