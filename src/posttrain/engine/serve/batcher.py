"""How the server shares one engine among many concurrent requests.

Covers: `RequestBatcher`, the server's one door to its engine, in one of two
modes:
- continuous (a `LocalEngine`): the engine's own worker thread
  (engine/local/worker.py), so HTTP requests join the same continuous batch as
  any other caller of that engine's `agenerate`, and stream token by token;
- merged (any other `Engine`, which the server drives through `generate`
  only): a worker thread of its own merges what is pending into shared
  `generate` calls (same sampling parameters except `max_tokens`; each prompt
  keeps its `n`-sample group) and cuts each job's completions back to its own
  `max_tokens`; seeded jobs run in calls of their own. Such an engine's stream
  is replayed from finished completions (`streams_live` is False), and top-k
  alternatives are not known: only the sampled token is reported.
Does not cover: HTTP (`server.py`), the OpenAI format (`openai_service.py`).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from posttrain.engine.base import CompletionDelta
from posttrain.engine.local.engine import LocalEngine
from posttrain.engine.local.worker import BatcherStats, EngineWorker, GeneratedGroup, GenerationJob
from posttrain.types import Completion, FinishReason, SamplingParams


class RequestBatcher:
    """Submits jobs to `engine` from any thread; `close` ends what it started.

    >>> batcher = RequestBatcher(engine)
    >>> groups = batcher.submit([[1, 5, 6]], SamplingParams(n=4)).result()
    >>> batcher.close()
    """

    def __init__(self, engine: Any, max_jobs: int = 64, window_s: float = 0.002, max_queue: int = 1024) -> None:
        self.engine = engine
        self.continuous = isinstance(engine, LocalEngine)
        self._worker: EngineWorker | MergedBatcher
        if isinstance(engine, LocalEngine):
            self._worker = engine.start_worker(max_jobs=max_jobs, max_queue=max_queue)
        else:
            self._worker = MergedBatcher(engine, max_jobs, window_s, max_queue)

    @property
    def stats(self) -> BatcherStats:
        return self._worker.stats

    @property
    def streams_live(self) -> bool:
        """Whether `on_delta` sees tokens as they are produced (else the caller replays finished completions)."""
        return self._worker.streams_live

    @property
    def waiting(self) -> queue.Queue:
        """The jobs the worker has not taken yet (None in it is the stop signal)."""
        return self._worker.waiting

    def submit(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        top_logprobs: int = 0,
        on_delta: Callable[[CompletionDelta], None] | None = None,
    ) -> Future:
        """Future of `list[GeneratedGroup]`, one per prompt. Raises `queue.Full` when too many jobs wait."""
        return self._worker.submit(prompts, params, top_logprobs, on_delta)

    def close(self) -> None:
        """Stop the worker thread once the jobs already submitted are done (a `LocalEngine`'s worker
        restarts on its next `agenerate`)."""
        if isinstance(self.engine, LocalEngine):
            self.engine.close()
        else:
            self._worker.close()


class MergedBatcher:
    """Merges concurrent jobs into shared `generate` calls of an engine that has no `submit`/`step`."""

    streams_live = False

    def __init__(self, engine: Any, max_jobs: int = 64, window_s: float = 0.002, max_queue: int = 1024) -> None:
        self.engine = engine
        self.max_jobs = max_jobs  # jobs per generate call
        self.window_s = window_s
        self.max_queue = max_queue
        self.stats = BatcherStats()
        self.waiting: queue.Queue[GenerationJob | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="posttrain-serve-engine", daemon=True)
        self._thread.start()

    def submit(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        top_logprobs: int = 0,
        on_delta: Callable[[CompletionDelta], None] | None = None,
    ) -> Future:
        """`on_delta` is never called: completions arrive whole."""
        waiting = self.waiting.qsize()
        if waiting >= self.max_queue:
            raise queue.Full(f"{waiting} requests are waiting")
        job = GenerationJob([p if isinstance(p, str) else list(p) for p in prompts], params, top_logprobs)  # text as is
        self.waiting.put(job)
        self.stats.max_queue_depth = max(self.stats.max_queue_depth, self.waiting.qsize())
        return job.future

    def close(self, timeout: float = 10.0) -> None:
        self.waiting.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            first = self.waiting.get()
            if first is None:
                return
            jobs, closing = self._gather(first)
            for group in _merge(jobs):
                self._serve(group)
            if closing:
                return

    def _gather(self, first: GenerationJob) -> tuple[list[GenerationJob], bool]:
        jobs, deadline = [first], time.monotonic() + self.window_s
        while len(jobs) < self.max_jobs:
            try:
                job = self.waiting.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def _serve(self, jobs: list[GenerationJob]) -> None:
        live = [j for j in jobs if j.future.set_running_or_notify_cancel()]
        if not live:
            return
        self.stats.jobs += len(live)
        self.stats.engine_calls += 1
        self.stats.max_jobs_together = max(self.stats.max_jobs_together, len(live))
        params = dataclasses.replace(live[0].params, max_tokens=max(j.params.max_tokens for j in live))
        try:
            groups = self.engine.generate([p for j in live for p in j.prompts], params)
        except Exception as exc:  # noqa: BLE001 - every job of the call learns why; the worker lives on
            for j in live:
                j.future.set_exception(exc)
            return
        start = 0
        for j in live:
            self._finish(j, groups[start : start + len(j.prompts)])
            start += len(j.prompts)

    def _finish(self, job: GenerationJob, groups: list[list[Completion]]) -> None:
        try:
            result = []
            for prompt, comps in zip(job.prompts, groups):
                comps = [_trim(c, job.params.max_tokens, self.engine.tokenizer.decode) for c in comps]
                # a foreign engine's model is not ours to re-score with: only the sampled token is known
                top = [[[(t, lp)] for t, lp in zip(c.token_ids, c.logprobs)] for c in comps] if job.top_logprobs else None
                result.append(GeneratedGroup(prompt if isinstance(prompt, str) else list(prompt), comps, top))
            job.future.set_result(result)
        except Exception as exc:  # noqa: BLE001 - the job fails, not the worker
            job.future.set_exception(exc)


def _merge(jobs: list[GenerationJob]) -> list[list[GenerationJob]]:
    """Jobs that can share one generate call: equal sampling parameters up to `max_tokens`, unseeded."""
    groups: dict[Any, list[GenerationJob]] = {}
    for i, job in enumerate(jobs):
        key = ("seeded", i) if job.params.seed is not None else dataclasses.replace(job.params, max_tokens=1)
        groups.setdefault(key, []).append(job)
    return list(groups.values())


def _trim(c: Completion, max_tokens: int, decode) -> Completion:
    """A completion of a merged call cut back to its own request's `max_tokens`."""
    if len(c.token_ids) <= max_tokens:
        return c
    ids = c.token_ids[:max_tokens]
    return dataclasses.replace(
        c, token_ids=ids, logprobs=c.logprobs[:max_tokens], text=decode(ids), finish_reason=FinishReason.LENGTH
    )
