"""`LocalEngine`'s client side: one worker thread, the engine's only caller, serving many concurrent callers.

Covers: a queue of generation jobs filled from any thread or event loop
(`LocalEngine.agenerate`, `generate`/`stream` while the worker runs, the HTTP
server), and one worker thread that feeds them to the engine (which is not
thread-safe) as a continuous batch: every waiting job is submitted as soon as
it arrives and the worker keeps calling `step()`, so requests join and leave
the running batch token by token; a streaming job's `CompletionDelta`s reach
its listener as each step makes them, other jobs are collected when their
requests finish; a job's `n` samples stay one group; a seeded job runs alone
(the engine's rows move as other requests come and go, and with them which
draw of the seeded generator each sample gets), so a seed reproduces exactly
what `generate` returns. When asked, the top-k alternatives of every sampled
token are re-scored with the engine's own model under the sampled
distribution, on the worker thread (the model is the engine's too). The
thread ends after `linger_s` idle and the next `submit` starts another: a
thread left behind keeps its own OpenMP team, and while a second team merely
exists libgomp sees more threads than cores and stops spin-waiting, so every
parallel region on any thread pays a futex wake-up (measured: torch ops 1.6x
slower on 2 cores, with the idle thread doing nothing); while it is dormant the engine's owner drives the engine
on its own thread, and the worker takes the engine's lock for every call.
Does not cover: starting or stopping the worker (`LocalEngine.start_worker`
and `close`), HTTP (engine/serve/), merging calls of engines without
`submit`/`step` (engine/serve/batcher.py), scheduling inside the engine.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from posttrain.engine.base import CompletionDelta, TextTokenizer
from posttrain.engine.local.sequence import Request, RequestStatus
from posttrain.engine.sampling import process_for
from posttrain.models.llama import CausalLM
from posttrain.types import Completion, SamplingParams

TopLogprobs = list[list[tuple[int, float]]]  # [T_completion][k] (token id, logprob), best first


@dataclass
class GeneratedGroup:
    """The `n` completions of one prompt, with top-k alternatives per token when requested."""

    prompt_ids: list[int]
    completions: list[Completion]
    top_logprobs: list[TopLogprobs] | None = None  # [n] when requested


@dataclass(eq=False)
class GenerationJob:
    prompts: list[list[int] | str]
    params: SamplingParams
    top_logprobs: int = 0
    on_delta: Callable[[CompletionDelta], None] | None = None  # called on the worker thread
    future: Future = field(default_factory=Future)
    slots: list[list[Completion | None]] = field(default_factory=list)  # [prompt][sample], streamed jobs
    remaining: int = 0
    requests: list[Request] = field(default_factory=list)


class WorkerClosed(RuntimeError):
    """A job for an engine worker that `close()` already stopped."""


@dataclass
class BatcherStats:
    jobs: int = 0
    engine_calls: int = 0  # generate calls (merged) or steps (continuous)
    max_jobs_together: int = 0  # jobs sharing one generate call, or in flight during one step
    max_queue_depth: int = 0


class SteppingEngine(Protocol):
    """What the worker drives: `LocalEngine`'s scheduler interface."""

    model: CausalLM
    tokenizer: TextTokenizer

    def submit_all(self, prompts: list[list[int] | str], params: SamplingParams, stream: bool = False) -> list[Request]: ...

    def step(self) -> list[CompletionDelta]: ...


class EngineWorker:
    """Owns a stepping engine on one worker thread; `submit` is safe from any thread.

    >>> worker = engine.start_worker()  # what `LocalEngine.agenerate` does on first use
    >>> groups = worker.submit([[1, 5, 6]], SamplingParams(n=4)).result()
    >>> engine.close()
    """

    continuous = True
    streams_live = True  # `on_delta` sees tokens as they are produced

    def __init__(self, engine: SteppingEngine, max_jobs: int = 64, max_queue: int = 1024, lock: Any = None,
                 linger_s: float = 0.02) -> None:
        # weak: an engine dropped without `close()` is collected, and its worker stops (a thread holding it
        # strongly would keep its model and KV caches alive for the life of the process)
        self._engine = weakref.ref(engine)
        self.max_jobs = max_jobs  # jobs in flight at once (read on every step: may be changed while running)
        self.max_queue = max_queue
        # idle this long, the thread ends (the next `submit` starts another): a thread left behind keeps its
        # own OpenMP team, whose mere existence makes libgomp stop spin-waiting (torch ops 1.6x slower on 2 cores)
        self.linger_s = linger_s
        self.stats = BatcherStats()
        self._pending = 0  # jobs the worker took from the queue but has not started
        self.waiting: queue.Queue[GenerationJob | None] = queue.Queue()
        self._lock = lock if lock is not None else contextlib.nullcontext()  # held around every engine call
        self._life = threading.Lock()  # orders a thread's idle exit against `submit` starting the next
        self._closed = False
        self.thread: threading.Thread | None = None
        self.ensure_thread()
        weakref.finalize(engine, self.waiting.put, None)

    def ensure_thread(self) -> threading.Thread:
        """The worker thread, started if none is running."""
        with self._life:
            return self._ensure_thread()

    def _ensure_thread(self) -> threading.Thread:  # holding `_life`
        if self._closed:
            raise WorkerClosed("this engine worker is closed")
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="posttrain-engine-worker", daemon=True)
            self.thread.start()
        return self.thread

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def dormant(self) -> bool:
        """No thread runs and no job waits: the engine's owner may drive it directly (holding `lock`)."""
        return self.thread is None and self.waiting.empty()

    @property
    def engine(self) -> SteppingEngine | None:
        return self._engine()

    def submit(
        self,
        prompts: list[list[int]] | list[str] | list[list[int] | str],
        params: SamplingParams,
        top_logprobs: int = 0,
        on_delta: Callable[[CompletionDelta], None] | None = None,
    ) -> Future:
        """Future of `list[GeneratedGroup]`, one per prompt. Raises `queue.Full` when too many jobs wait."""
        waiting = self.waiting.qsize() + self._pending
        if waiting >= self.max_queue:
            raise queue.Full(f"{waiting} requests are waiting")
        job = GenerationJob([p if isinstance(p, str) else list(p) for p in prompts], params, top_logprobs, on_delta)
        with self._life:  # a closed worker takes nothing (its queue is never read again)
            self._ensure_thread()
            self.waiting.put(job)
        self.stats.max_queue_depth = max(self.stats.max_queue_depth, self.waiting.qsize())
        return job.future

    def close(self) -> None:
        """Finish every job already submitted, then stop the thread (waits for it); the worker takes no more."""
        with self._life:
            self._closed, thread = True, self.thread
            if thread is not None:
                self.waiting.put(None)
        if thread is not None:
            thread.join()

    # ---- the worker thread

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            with self._life:
                if self.thread is threading.current_thread():
                    self.thread = None

    def _serve(self) -> None:
        routes: dict[int, GenerationJob] = {}  # engine request id -> its job
        in_flight: list[GenerationJob] = []
        pending: deque[GenerationJob] = deque()
        closing = False
        engine: SteppingEngine | None = None
        while True:
            if not in_flight and not pending:
                if closing:
                    return
                engine = None  # nothing in flight: let a forgotten engine be collected while we wait
                try:
                    job = self.waiting.get(timeout=self.linger_s)
                except queue.Empty:
                    with self._life:  # idle: end this thread, unless a job arrived just now
                        if self.waiting.empty():
                            self.thread = None
                            return
                    continue
                if job is None:
                    return
                pending.append(job)
            closing = closing or self._drain(pending)
            with self._lock:  # the engine's owner may be driving it directly: its call finishes first
                while pending and len(in_flight) < self.max_jobs:
                    # a seeded job runs alone: its samples' rows, hence their draws, then depend on its seed only
                    if in_flight and (pending[0].params.seed is not None or in_flight[0].params.seed is not None):
                        break
                    self._start(pending.popleft(), routes, in_flight)
                self._pending = len(pending)
                if not in_flight:
                    continue
                self.stats.max_jobs_together = max(self.stats.max_jobs_together, len(in_flight))
                engine = self._engine()  # held while there is work, never while waiting for it
                if engine is None:
                    for job in in_flight:
                        job.future.set_exception(RuntimeError("the engine was garbage-collected while this job ran"))
                    return
                try:
                    deltas = engine.step()
                except Exception as exc:  # noqa: BLE001 - every job in flight learns why; the worker lives on
                    for job in in_flight:
                        job.future.set_exception(exc)
                    routes.clear()
                    in_flight.clear()
                    continue
                self.stats.engine_calls += 1
                for d in deltas:
                    self._route(d, routes, in_flight)
                self._complete(routes, in_flight)

    def _drain(self, pending: deque[GenerationJob]) -> bool:
        """Move every job already queued to `pending`, without waiting -> whether `close` was queued."""
        while True:
            try:
                job = self.waiting.get_nowait()
            except queue.Empty:
                return False
            if job is None:
                return True
            pending.append(job)

    def _complete(self, routes: dict[int, GenerationJob], in_flight: list[GenerationJob]) -> None:
        """Finish the jobs without a delta callback whose requests are all done (streamed jobs finish in `_route`)."""
        done = [j for j in in_flight if j.on_delta is None and all(r.status is RequestStatus.FINISHED for r in j.requests)]
        for job in done:
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
        try:
            # as `generate` does: every prompt checked before any is queued, one generator per seeded job (its
            # samples depend on its seed alone); only a streaming job asks for per-token deltas (the engine
            # detokenises each one), the others are collected from their requests when those finish
            engine = self._engine()
            if engine is None:
                raise RuntimeError("the engine was garbage-collected")
            job.requests = engine.submit_all(job.prompts, job.params, stream=job.on_delta is not None)
        except Exception as exc:  # noqa: BLE001 - the job fails, not the worker
            job.future.set_exception(exc)
            return
        for req in job.requests:
            routes[req.id] = job
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
            for req, comps in zip(job.requests, groups):
                top = (
                    top_logprobs(self._model(), req.prompt, [c.token_ids for c in comps], job.params, job.top_logprobs)
                    if job.top_logprobs
                    else None
                )
                result.append(GeneratedGroup(list(req.prompt), comps, top))
            job.future.set_result(result)
        except Exception as exc:  # noqa: BLE001 - the job fails, not the worker
            job.future.set_exception(exc)

    def _model(self) -> CausalLM:
        engine = self._engine()
        if engine is None:
            raise RuntimeError("the engine was garbage-collected")
        return engine.model


@torch.inference_mode()
def top_logprobs(
    model: CausalLM, prompt: list[int], completions: list[list[int]], params: SamplingParams, k: int
) -> list[TopLogprobs]:
    """For each completion, the k most likely tokens at every step under the sampled distribution."""
    longest = max((len(c) for c in completions), default=0)
    if longest == 0:
        return [[] for _ in completions]
    was_training = model.training
    model.eval()
    try:
        width = len(prompt) + longest
        # [n, P+T], right-padded (causal: padding is inert), on the model's device
        ids = torch.tensor([prompt + c + [0] * (width - len(prompt) - len(c)) for c in completions], dtype=torch.long,
                           device=next(model.parameters()).device)
        logits = model(ids)[:, len(prompt) - 1 : width - 1]  # [n, T, V]: position t predicts completion token t
    finally:
        model.train(was_training)
    n, t, v = logits.shape
    logp = torch.log_softmax(process_for(logits.reshape(n * t, v), params), -1)
    values, indices = torch.topk(logp, min(k, v), dim=-1)
    values, indices = values.view(n, t, -1).tolist(), indices.view(n, t, -1).tolist()
    return [[list(zip(indices[i][s], values[i][s])) for s in range(len(c))] for i, c in enumerate(completions)]
