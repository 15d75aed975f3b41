"""Serve many concurrent requests from one engine: a worker thread that batches them.

Covers: a queue of generation jobs filled by any number of threads or event
loops; one worker thread (the only caller of the engine, which is not
thread-safe) that gathers what is pending, merges compatible jobs into one
`engine.generate` call (same sampling parameters except `max_tokens`; each
prompt keeps its `n`-sample group, so the engine shares its prefill), and
trims each job's completions back to its own `max_tokens`; seeded jobs run in
calls of their own, so a seed gives the same text whoever else is being
served; and, when asked, the top-k alternatives of every sampled token,
re-scored with the engine's own model under the sampled distribution.
Does not cover: HTTP (`server.py`), or scheduling inside the engine
(continuous batching belongs to the engine).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from posttrain.engine.sampling import process_logits
from posttrain.types import Completion, FinishReason, SamplingParams

TopLogprobs = list[list[tuple[int, float]]]  # [T_completion][k] (token id, logprob), best first


@dataclass
class GeneratedGroup:
    """The `n` completions of one prompt, with top-k alternatives per token when requested."""

    prompt_ids: list[int]
    completions: list[Completion]
    top_logprobs: list[TopLogprobs] | None = None  # [n] when requested


@dataclass
class GenerationJob:
    prompts: list[list[int]]
    params: SamplingParams
    top_logprobs: int = 0
    future: Future = field(default_factory=Future)


@dataclass
class BatcherStats:
    jobs: int = 0
    engine_calls: int = 0
    max_jobs_per_call: int = 0
    max_queue_depth: int = 0


class RequestBatcher:
    """Owns the engine on one worker thread; `submit` is safe from any thread.

    >>> batcher = RequestBatcher(engine)
    >>> groups = batcher.submit([[1, 5, 6]], SamplingParams(n=4)).result()
    >>> batcher.close()
    """

    def __init__(self, engine: Any, max_jobs_per_call: int = 64, window_s: float = 0.002, max_queue: int = 1024) -> None:
        self.engine = engine
        self.max_jobs_per_call = max_jobs_per_call
        self.window_s = window_s
        self.max_queue = max_queue
        self.stats = BatcherStats()
        self._queue: queue.Queue[GenerationJob | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="posttrain-serve-engine", daemon=True)
        self._thread.start()

    def submit(self, prompts: list[list[int]], params: SamplingParams, top_logprobs: int = 0) -> Future:
        """Future of `list[GeneratedGroup]`, one per prompt. Raises `QueueFull` when too many jobs wait."""
        if self._queue.qsize() >= self.max_queue:
            raise queue.Full(f"{self._queue.qsize()} requests are waiting")
        job = GenerationJob([list(p) for p in prompts], params, top_logprobs)
        self._queue.put(job)
        self.stats.max_queue_depth = max(self.stats.max_queue_depth, self._queue.qsize())
        return job.future

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _gather(self, first: GenerationJob) -> tuple[list[GenerationJob], bool]:
        jobs, deadline = [first], time.monotonic() + self.window_s
        while len(jobs) < self.max_jobs_per_call:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs, closing = self._gather(first)
            for group in _merge(jobs):
                self._serve(group)
            if closing:
                return

    def _serve(self, jobs: list[GenerationJob]) -> None:
        live = [j for j in jobs if j.future.set_running_or_notify_cancel()]
        if not live:
            return
        self.stats.jobs += len(live)
        self.stats.engine_calls += 1
        self.stats.max_jobs_per_call = max(self.stats.max_jobs_per_call, len(live))
        params = dataclasses.replace(live[0].params, max_tokens=max(j.params.max_tokens for j in live))
        prompts = [p for j in live for p in j.prompts]
        try:
            groups = self.engine.generate(prompts, params)
        except Exception as exc:  # every job of the call learns why; the worker lives on
            for j in live:
                j.future.set_exception(exc)
            return
        start = 0
        for j in live:
            try:
                result = []
                for prompt, comps in zip(j.prompts, groups[start : start + len(j.prompts)]):
                    comps = [_trim(c, j.params.max_tokens, self.engine.tokenizer.decode) for c in comps]
                    top = self._top_logprobs(prompt, comps, j.params, j.top_logprobs) if j.top_logprobs else None
                    result.append(GeneratedGroup(prompt, comps, top))
                j.future.set_result(result)
            except Exception as exc:
                j.future.set_exception(exc)
            start += len(j.prompts)

    @torch.inference_mode()
    def _top_logprobs(self, prompt: list[int], comps: list[Completion], params: SamplingParams, k: int) -> list[TopLogprobs]:
        model = getattr(self.engine, "model", None)
        if model is None:  # a foreign engine: only the sampled token is known
            return [[[(t, lp)] for t, lp in zip(c.token_ids, c.logprobs)] for c in comps]
        return top_logprobs(model, prompt, [c.token_ids for c in comps], params, k)


def top_logprobs(model, prompt: list[int], completions: list[list[int]], params: SamplingParams, k: int) -> list[TopLogprobs]:
    """For each completion, the k most likely tokens at every step under the sampled distribution."""
    longest = max((len(c) for c in completions), default=0)
    if longest == 0:
        return [[] for _ in completions]
    width = len(prompt) + longest
    ids = torch.zeros((len(completions), width), dtype=torch.long)  # [n, P+T], right-padded (causal: padding is inert)
    for i, c in enumerate(completions):
        ids[i, : len(prompt) + len(c)] = torch.tensor(prompt + c)
    logits = model(ids)[:, len(prompt) - 1 : width - 1]  # [n, T, V]: position t predicts completion token t
    n, t, v = logits.shape
    logp = torch.log_softmax(process_logits(logits.reshape(n * t, v), params.temperature, params.top_k, params.top_p), -1)
    values, indices = torch.topk(logp, min(k, v), dim=-1)
    values, indices = values.view(n, t, -1).tolist(), indices.view(n, t, -1).tolist()
    return [
        [list(zip(indices[i][s], values[i][s])) for s in range(len(c))]
        for i, c in enumerate(completions)
    ]


def _merge(jobs: list[GenerationJob]) -> list[list[GenerationJob]]:
    """Jobs that can share one engine call: equal sampling parameters up to `max_tokens`, unseeded."""
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
