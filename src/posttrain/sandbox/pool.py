"""``SandboxPool``: many executions at once, with backpressure.

Covers: a bounded number of concurrent executions (an asyncio semaphore) and a bounded queue
of waiting ones: ``await pool.run(...)`` waits for a slot, ``pool.try_run(...)`` refuses with
``PoolBusy`` when the queue is full, ``pool.map`` runs a batch. All executions share one
fork-server; its leftovers are swept when the next ``Sandbox`` starts.

Does not cover: several machines (``distributed/ray_sandbox.py``: a Ray actor per node wrapping a pool).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable

from posttrain.sandbox.result import ExecResult
from posttrain.sandbox.sandbox import Sandbox


class PoolBusy(RuntimeError):
    """The pool's queue is full; retry later."""


class SandboxPool:
    def __init__(self, sandbox: Sandbox | None = None, *, max_concurrency: int | None = None,
                 max_queue: int = 1024, **sandbox_kwargs):
        self.max_concurrency = max_concurrency or 2 * (os.cpu_count() or 1)
        self.sandbox = sandbox or Sandbox(max_concurrency=self.max_concurrency, **sandbox_kwargs)
        self._owns = sandbox is None
        self.max_queue = max_queue
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: asyncio.AbstractEventLoop | None = None
        self.waiting = 0
        self.running = 0

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()  # one per event loop: a pool outlives asyncio.run()
        if self._sem is None or self._sem_loop is not loop:
            self._sem, self._sem_loop = asyncio.Semaphore(self.max_concurrency), loop
        return self._sem

    async def run(self, command=None, **kwargs) -> ExecResult:
        """Waits for a free slot (backpressure), then runs like ``Sandbox.run``."""
        sem = self._semaphore()
        self.waiting += 1
        try:
            await sem.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            return await self.sandbox.arun(command, **kwargs)
        finally:
            self.running -= 1
            sem.release()

    async def try_run(self, command=None, **kwargs) -> ExecResult:
        """Like ``run`` but raises ``PoolBusy`` instead of queueing past ``max_queue``."""
        if self.waiting >= self.max_queue:
            raise PoolBusy(f"{self.waiting} executions already waiting")
        return await self.run(command, **kwargs)

    async def map(self, requests: Iterable[dict]) -> list[ExecResult]:
        """Run each ``Sandbox.run`` keyword dict; results in order."""
        return await asyncio.gather(*(self.run(**req) for req in requests))

    def close(self) -> None:
        if self._owns:
            self.sandbox.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
