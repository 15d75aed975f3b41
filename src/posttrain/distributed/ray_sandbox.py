"""Sandbox executions on Ray actors, so code verification scales with nodes
(`[rollout] sandbox_backend = "ray"`, `sandbox_workers`; extra `ray`).

Covers: `SandboxWorker`, the body of an async actor that owns one `SandboxPool` on its node (its own
fork-server, its own concurrency bound) and answers `execute(command, kwargs)` with the `ExecResult` the
local pool gives for the same arguments; `RaySandboxPool`, the caller's side, with the local pool's
`run` / `arun` / `map` / `close`, so the code verifiers take it in place of the shared sandbox: it spreads
executions over N workers (least-loaded, SPREAD-scheduled across nodes), keeps at most `inflight`
executions in flight per worker (a caller past that waits: backpressure), and re-submits an execution
whose worker died to another live worker (the dead one rebuilt, the failure warned and counted), so each
call returns exactly one result; a timeout or a sandbox failure is an `ExecResult`, and a worker that
dies on every attempt gives a SANDBOX_ERROR result, never a traceback. `make_pool(cfg)` builds one from
the `rollout` section (`rl/build.py: build_sandbox` installs it for the code verifiers of its process).
Does not cover: stateful sessions (`Session`: agent tools and terminal tasks keep their workspaces in the
local fork-server), one set of workers shared between processes (every process that builds the domains,
an async producer or a Ray rollout actor included, owns its own `sandbox_workers`), placement groups.
"""

from __future__ import annotations

import asyncio
import os
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from posttrain.config import RunConfig
from posttrain.distributed.ray_backend import RayMissingError, connect
from posttrain.sandbox.launcher import SandboxUnavailable
from posttrain.sandbox.result import ExecResult, ExecStatus


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissingError("rollout.sandbox_backend = 'ray' needs Ray: pip install 'posttrain[ray]'") from None
    return ray


class SandboxWorker:
    """The actor's body (wrapped by `ray.remote` in `RaySandboxPool`): one `SandboxPool` on its node."""

    def __init__(self, index: int, max_concurrency: int, sandbox_kwargs: dict[str, Any]) -> None:
        from posttrain.sandbox import SandboxPool

        self.index = index
        self.pool = SandboxPool(max_concurrency=max_concurrency, **sandbox_kwargs)
        self.executed = 0
        self.inflight = 0
        self.peak_inflight = 0  # the most `execute` calls this actor held at once (the client's bound, seen here)

    async def ready(self) -> int:
        return self.index

    async def execute(self, command: Any, kwargs: dict[str, Any]) -> ExecResult:
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        try:
            result = await self.pool.run(command, **kwargs)
        finally:
            self.inflight -= 1
        self.executed += 1
        return result

    async def stats(self) -> dict[str, Any]:
        import ray

        return {"index": self.index, "executed": self.executed, "inflight": self.inflight, "peak_inflight": self.peak_inflight,
                "running": self.pool.running,
                "waiting": self.pool.waiting, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}


@dataclass
class _Slot:
    """One worker position: its current actor (rebuilt in place when it dies) and what is in flight on it."""

    index: int
    actor: Any
    generation: int = 0
    inflight: int = 0
    delivered: int = 0  # results returned to callers from this position


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
    inflight: list[int] = field(default_factory=list)  # executions in flight on each worker position now
    failures: list[str] = field(default_factory=list)  # one line per dead worker


class RaySandboxPool:
    """Executions spread over `workers` Ray sandbox actors; the same calls and results as `SandboxPool`.

    >>> pool = RaySandboxPool(workers=2, prefork=True)             # doctest: +SKIP
    >>> asyncio.run(pool.run(code="print(6 * 7)")).stdout
    '42\\n'
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
        self._stats = PoolStats(per_worker=[0] * workers)
        self._closed = False
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

    async def _reserve(self, avoid: set[int]) -> tuple[_Slot, Any, int]:
        loop = asyncio.get_running_loop()  # callers come from several event loops (aio.run_sync): wake each on its own
        while True:
            with self._lock:
                if self._closed:
                    raise SandboxUnavailable("the Ray sandbox pool is closed")
                slot = self._pick(avoid)
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
        """Rebuild `slot`'s actor, once per death however many executions saw it."""
        ray = _ray()
        with self._lock:
            if slot.generation != generation or self._closed:
                return
            old = slot.actor
            slot.actor = self._spawn(slot.index)
            slot.generation += 1
            self._stats.worker_failures += 1
            message = f"sandbox worker {slot.index} died ({why}); rebuilt, its executions re-submitted"
            self._stats.failures.append(message)
        try:
            ray.kill(old)
        except Exception:  # noqa: BLE001 - already gone
            pass
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    # ------------------------------------------------------------------ executions
    async def run(self, command: str | list[str] | None = None, **kwargs: Any) -> ExecResult:
        """Like `SandboxPool.run`: waits for room on a worker (backpressure), then runs like `Sandbox.run` there."""
        ray = _ray()
        with self._lock:
            self._stats.calls += 1
        avoid: set[int] = set()
        why = ""
        for attempt in range(self.max_attempts):
            slot, actor, generation = await self._reserve(avoid)
            ref = None
            try:
                ref = actor.execute.remote(command, kwargs)
                result: ExecResult = await asyncio.wrap_future(ref.future())
            except asyncio.CancelledError:  # the caller gave up (a verifier's deadline): free the worker's slot too
                if ref is not None:
                    _cancel(ray, ref)
                raise
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                why = _why(exc)
                self._died(slot, generation, why)
                avoid.add(slot.index)
                if attempt + 1 < self.max_attempts:
                    with self._lock:
                        self._stats.resubmitted += 1
                continue
            except ray.exceptions.RayTaskError as exc:  # the pool's own exception (bad arguments): the local pool's
                with self._lock:
                    self._stats.results += 1
                raise (exc.cause if isinstance(exc.cause, Exception) else RuntimeError(str(exc))) from None
            finally:
                self._release(slot)
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
            return PoolStats(s.calls, s.results, s.resubmitted, s.worker_failures, s.gave_up, list(s.per_worker),
                             [slot.inflight for slot in self._slots], list(s.failures))

    def worker_stats(self) -> list[dict[str, Any]]:
        """Each live worker's own count of executions, its pid and node."""
        ray = _ray()
        return list(ray.get([s.actor.stats.remote() for s in self._slots]))

    def close(self) -> None:
        ray = _ray()
        with self._lock:
            self._closed = True
            actors, waiters, self._waiters = [s.actor for s in self._slots], self._waiters, []
        for loop, fut in waiters:
            _notify(loop, fut)
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
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"



def make_pool(cfg: RunConfig) -> RaySandboxPool:
    """The `rollout` section's Ray sandbox workers, each like the code verifiers' shared sandbox (pre-forked,
    common modules preloaded, 16 executions at once)."""
    from posttrain.rewards.code import PRELOAD

    r = cfg.rollout
    return RaySandboxPool(r.sandbox_workers, max_concurrency=16, inflight=r.sandbox_inflight,
                          worker_cpus=r.sandbox_worker_cpus, address=r.ray_address, prefork=True, preload=PRELOAD)
