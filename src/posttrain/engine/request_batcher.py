"""Serve many concurrent requests from one engine: a worker thread, the engine's only caller.

Covers: a queue of generation jobs filled from any thread or event loop, and
one worker thread that feeds them to the engine (which is not thread-safe) in
one of two ways:
- continuous (engines with `submit`/`step`, such as `LocalEngine`): every
  waiting job is submitted as soon as it arrives and the worker keeps calling
  `step()`, so requests join and leave the running batch token by token; a
  streaming job's `CompletionDelta`s reach its client as each step makes them,
  other jobs are collected when their requests finish; a job's `n` samples stay
  one group; a seeded job runs alone
  (the engine's rows move as other requests come and go, and with them which
  draw of the seeded generator each sample gets), so a seed reproduces;
- merged (any other `Engine`: only `generate`): what is pending is merged into
  shared `generate` calls (same sampling parameters except `max_tokens`;
  each prompt keeps its `n`-sample group) and each job's completions are cut
  back to its own `max_tokens`; seeded jobs run in calls of their own.
When asked, the top-k alternatives of every sampled token are re-scored with
the engine's own model under the sampled distribution, on the worker thread.
Does not cover: HTTP (`server.py`), or scheduling inside the engine.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from posttrain.engine.base import CompletionDelta
from posttrain.engine.sampling import process_for
from posttrain.types import Completion, FinishReason, SamplingParams

TopLogprobs = list[list[tuple[int, float]]]  # [T_completion][k] (token id, logprob), best first


@dataclass
class GeneratedGroup:
    """The `n` completions of one prompt, with top-k alternatives per token when requested."""

    prompt_ids: list[int]
    completions: list[Completion]
    top_logprobs: list[TopLogprobs] | None = None  # [n] when requested


@dataclass(eq=False)
class GenerationJob:
    prompts: list[list[int]]
    params: SamplingParams
    top_logprobs: int = 0
    on_delta: Callable[[CompletionDelta], None] | None = None  # called on the worker thread
    future: Future = field(default_factory=Future)
    slots: list[list[Completion | None]] = field(default_factory=list)  # [prompt][sample], streamed jobs
    remaining: int = 0
    requests: list[Any] = field(default_factory=list)  # the engine's request records, continuous mode


@dataclass
class BatcherStats:
    jobs: int = 0
    engine_calls: int = 0  # generate calls (merged) or steps (continuous)
    max_jobs_together: int = 0  # jobs sharing one generate call, or in flight during one step
    max_queue_depth: int = 0


def is_continuous(engine: Any) -> bool:
    return all(callable(getattr(engine, name, None)) for name in ("submit", "step", "has_unfinished"))


class RequestBatcher:
    """Owns the engine on one worker thread; `submit` is safe from any thread.

    >>> batcher = RequestBatcher(engine)
    >>> groups = batcher.submit([[1, 5, 6]], SamplingParams(n=4)).result()
    >>> batcher.close()
    """

    def __init__(self, engine: Any, max_jobs: int = 64, window_s: float = 0.002, max_queue: int = 1024) -> None:
        self.engine = engine
        self.max_jobs = max_jobs  # jobs in flight at once (continuous) or per generate call (merged)
        self.window_s = window_s
        self.max_queue = max_queue
        self.continuous = is_continuous(engine)
        self.stats = BatcherStats()
        self._pending = 0  # jobs the worker took from the queue but has not started
        self._queue: queue.Queue[GenerationJob | None] = queue.Queue()
        run = self._run_continuous if self.continuous else self._run_merged
        self._thread = threading.Thread(target=run, name="posttrain-serve-engine", daemon=True)
        self._thread.start()

    @property
    def streams_live(self) -> bool:
        """Whether `on_delta` sees tokens as they are produced (else once the job is done)."""
        return self.continuous

    def submit(
        self, prompts: list[list[int]], params: SamplingParams, top_logprobs: int = 0, on_delta: Callable[[CompletionDelta], None] | None = None
    ) -> Future:
        """Future of `list[GeneratedGroup]`, one per prompt. Raises `queue.Full` when too many jobs wait."""
        waiting = self._queue.qsize() + self._pending
        if waiting >= self.max_queue:
            raise queue.Full(f"{waiting} requests are waiting")
        job = GenerationJob([list(p) for p in prompts], params, top_logprobs, on_delta if self.continuous else None)
        self._queue.put(job)
        self.stats.max_queue_depth = max(self.stats.max_queue_depth, self._queue.qsize())
        return job.future

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    # ---- continuous mode

    def _run_continuous(self) -> None:
        routes: dict[int, GenerationJob] = {}  # engine request id -> its job
        in_flight: list[GenerationJob] = []
        pending: deque[GenerationJob] = deque()
        closing = False
        while True:
            if not in_flight and not pending:
                if closing:
                    return
                job = self._queue.get()
                if job is None:
                    return
                pending.append(job)
            while not closing:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    closing = True
                else:
                    pending.append(job)
            while pending and len(in_flight) < self.max_jobs:
                # a seeded job runs alone: its samples' rows, hence their draws, then depend on its seed only
                if in_flight and (pending[0].params.seed is not None or in_flight[0].params.seed is not None):
                    break
                self._start(pending.popleft(), routes, in_flight)
            self._pending = len(pending)
            if not in_flight:
                continue
            self.stats.max_jobs_together = max(self.stats.max_jobs_together, len(in_flight))
            try:
                deltas = self.engine.step()
            except Exception as exc:  # noqa: BLE001 - every job in flight learns why; the worker lives on
                for job in in_flight:
                    job.future.set_exception(exc)
                routes.clear()
                in_flight.clear()
                continue
            self.stats.engine_calls += 1
            for d in deltas:
                self._route(d, routes, in_flight)
            for job in [j for j in in_flight if j.on_delta is None and all(_finished(r) for r in j.requests)]:
                in_flight.remove(job)
                for r in job.requests:
                    routes.pop(r.id, None)
                self._finish(job, [list(r.completions) for r in job.requests])

    def _start(self, job: GenerationJob, routes: dict[int, GenerationJob], in_flight: list[GenerationJob]) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        self.stats.jobs += 1
        n = job.params.n
        job.slots = [[None] * n for _ in job.prompts]
        job.remaining = n * len(job.prompts)
        # one generator per seeded job, as `generate` does: the job's samples depend on its seed alone
        generator = torch.Generator().manual_seed(job.params.seed) if job.params.seed is not None else None
        try:
            for i, prompt in enumerate(job.prompts):
                # only a streaming job asks for per-token deltas (the engine detokenises each one);
                # the others are collected from their requests when those finish
                req = self.engine.submit(prompt, job.params, generator, stream=job.on_delta is not None, index=i)
                routes[req.id] = job
                job.requests.append(req)
        except Exception as exc:  # noqa: BLE001 - the job fails, not the worker
            job.future.set_exception(exc)
            for rid in [rid for rid, j in routes.items() if j is job]:
                routes.pop(rid)  # an orphaned sibling runs on unheard; nothing waits for it
            return
        in_flight.append(job)

    def _route(self, d: CompletionDelta, routes: dict[int, GenerationJob], in_flight: list[GenerationJob]) -> None:
        job = routes.get(d.request_id)
        if job is None:
            return
        if job.on_delta is not None:
            try:
                job.on_delta(d)
            except Exception:  # noqa: BLE001 - a listener gone away (client disconnected) never stops the engine
                job.on_delta = None
        if d.finish_reason is None:
            return
        job.slots[d.prompt_index][d.sample_index] = d.completion
        job.remaining -= 1
        if all(c is not None for c in job.slots[d.prompt_index]):  # the prompt's whole group is done
            routes.pop(d.request_id, None)
        if job.remaining == 0:
            in_flight.remove(job)
            self._finish(job, [list(s) for s in job.slots])  # type: ignore[arg-type]

    def _finish(self, job: GenerationJob, groups: list[list[Completion]]) -> None:
        try:
            result = []
            for prompt, comps in zip(job.prompts, groups):
                comps = [_trim(c, job.params.max_tokens, self.engine.tokenizer.decode) for c in comps]
                top = self._top_logprobs(prompt, comps, job.params, job.top_logprobs) if job.top_logprobs else None
                result.append(GeneratedGroup(prompt, comps, top))
            job.future.set_result(result)
        except Exception as exc:  # noqa: BLE001 - the job fails, not the worker
            job.future.set_exception(exc)

    # ---- merged mode

    def _run_merged(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs, closing = self._gather(first)
            for group in _merge(jobs):
                self._serve_merged(group)
            if closing:
                return

    def _gather(self, first: GenerationJob) -> tuple[list[GenerationJob], bool]:
        jobs, deadline = [first], time.monotonic() + self.window_s
        while len(jobs) < self.max_jobs:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def _serve_merged(self, jobs: list[GenerationJob]) -> None:
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

    # ---- top-k re-scoring

    @torch.inference_mode()
    def _top_logprobs(self, prompt: list[int], comps: list[Completion], params: SamplingParams, k: int) -> list[TopLogprobs]:
        model = getattr(self.engine, "model", None)
        if not isinstance(model, torch.nn.Module):  # a foreign engine: only the sampled token is known
            return [[[(t, lp)] for t, lp in zip(c.token_ids, c.logprobs)] for c in comps]
        return top_logprobs(model, prompt, [c.token_ids for c in comps], params, k)


def _finished(request: Any) -> bool:
    """A `LocalEngine` request is done (its status enum's value is "finished")."""
    return getattr(request.status, "value", request.status) == "finished"


def top_logprobs(model, prompt: list[int], completions: list[list[int]], params: SamplingParams, k: int) -> list[TopLogprobs]:
    """For each completion, the k most likely tokens at every step under the sampled distribution."""
    longest = max((len(c) for c in completions), default=0)
    if longest == 0:
        return [[] for _ in completions]
    was_training = model.training
    model.eval()
    try:
        width = len(prompt) + longest
        ids = torch.zeros((len(completions), width), dtype=torch.long)  # [n, P+T], right-padded (causal: padding is inert)
        for i, c in enumerate(completions):
            ids[i, : len(prompt) + len(c)] = torch.tensor(prompt + c)
        logits = model(ids)[:, len(prompt) - 1 : width - 1]  # [n, T, V]: position t predicts completion token t
    finally:
        model.train(was_training)
    n, t, v = logits.shape
    logp = torch.log_softmax(process_for(logits.reshape(n * t, v), params), -1)
    values, indices = torch.topk(logp, min(k, v), dim=-1)
    values, indices = values.view(n, t, -1).tolist(), indices.view(n, t, -1).tolist()
    return [[list(zip(indices[i][s], values[i][s])) for s in range(len(c))] for i, c in enumerate(completions)]


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
    return dataclasses.replace(c, token_ids=ids, logprobs=c.logprobs[:max_tokens], text=decode(ids), finish_reason=FinishReason.LENGTH)
