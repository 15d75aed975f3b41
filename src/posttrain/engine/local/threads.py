"""Which thread drives a `LocalEngine`: the caller of a direct `generate` / `stream`, or its worker.

Covers: the engine's lock (held by a direct generate/stream, and to start or stop the worker), the
thread driving it directly (`driving`), the worker thread every concurrent caller shares (started on
first use, its limits updated, stopped by `close`), and the check that `submit` / `step` run on the
thread that owns the engine.
Does not cover: the worker's batching (engine/local/worker.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from posttrain.engine.local.worker import EngineWorker, SteppingEngine


class EngineThreads:
    """The engine's owner: a direct driver or the worker."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # held by a direct generate/stream, and to start or stop the worker
        self.worker: EngineWorker | None = None
        self.driver: threading.Thread | None = None  # the thread in a direct generate/stream, if any

    def start_worker(self, engine: SteppingEngine, max_jobs: int | None, max_queue: int | None,
                     default_jobs: int) -> EngineWorker:
        """The worker, started if it is not running (waits for a direct `generate` in progress on another
        thread); `max_jobs` (a new worker's default `default_jobs`) and `max_queue` update its limits."""
        with self.lock:
            if self.worker is None or self.worker.closed:
                self.worker = EngineWorker(engine, max_jobs or default_jobs, max_queue or 1024, lock=self.lock)
            else:
                self.worker.max_jobs = max_jobs or self.worker.max_jobs
                self.worker.max_queue = max_queue or self.worker.max_queue
                self.worker.ensure_thread()
            return self.worker

    def close(self) -> None:
        with self.lock:
            worker, self.worker = self.worker, None
        if worker is not None:
            worker.close()  # not holding the lock: the worker takes it for each step it still has to run

    @contextlib.contextmanager
    def driving(self) -> Iterator[None]:
        """This thread calls submit/step directly (it holds `lock`; the worker, if any, is dormant)."""
        self.driver = threading.current_thread()
        try:
            yield
        finally:
            self.driver = None

    def check(self) -> None:
        worker = self.worker
        me = threading.current_thread()
        if worker is not None and worker.thread is not None and me is not worker.thread and me is not self.driver:
            raise RuntimeError(
                "LocalEngine.submit/step called outside its worker thread while the worker runs: "
                "use generate, stream or agenerate"
            )
