"""`LocalEngine`: continuous-batching generation on the native model, in-process; the facade over its parts.

Covers: the public surface (`submit` / `step`, `generate`, `stream`, `agenerate`, `load_weights`, `metrics`,
the worker) and the step loop joining the parts, split as nano-vllm splits an engine: each step admits
waiting requests (scheduler.py, rows placed by rows.py), prefills one chunk of each admitted prompt, and
decodes one token, one greedy run or one speculative step (speculator.py) for every running sequence
(forwards: runner.py; tokens: sampler.py; stop strings and deltas: emit.py); finished sequences leave at
once. A prompt is prefilled once and its n samples attend to that copy (cascade attention; a sliding
window copies it to each row); prefix cache, reduced precision, context clamping (intake.py) included.
Devices: everything is allocated where the model is (or on `device`, where the model then moves). The C
kernels serve CPU engines only; speculation and bf16 / int8 copies are CPU-only (a one-line error elsewhere).
Does not cover: several devices at once, preemption, beam search.
Threads (threads.py): before `agenerate` is first called the engine belongs to whichever thread calls it;
once its worker runs, `generate`, `stream` and `agenerate` from any thread go through the worker, and
`submit` / `step` from another thread is an error. `close()` stops the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections import deque
from collections.abc import Iterator, Mapping

import torch
from torch import Tensor

from posttrain.engine.base import CompletionDelta, Prompt
from posttrain.engine.local.counters import EngineCounters, derived_metrics
from posttrain.engine.local.emit import Emitter
from posttrain.engine.local.fused import FusedDecoder
from posttrain.engine.local.intake import RequestIntake
from posttrain.engine.local.kv import SlotCache, WindowSpec
from posttrain.engine.local.precision import check_precision, serving_copy
from posttrain.engine.local.prefix_cache import PrefixCache
from posttrain.engine.local.rows import RowAllocator
from posttrain.engine.local.runner import ModelRunner
from posttrain.engine.local.sampler import Sampler
from posttrain.engine.local.scheduler import Scheduler
from posttrain.engine.local.sequence import Request, RequestStatus, Sequence
from posttrain.engine.local.spec_decode import DraftProposer, SpecConfig
from posttrain.engine.local.speculator import Speculator
from posttrain.engine.local.threads import EngineThreads
from posttrain.engine.local.weights import WeightsMismatchError, load_state
from posttrain.engine.local.worker import EngineWorker, WorkerClosed
from posttrain.errors import UserError
from posttrain.models.llama import CausalLM
from posttrain.models.tokenizer import Tokenizer
from posttrain.types import Completion, SamplingParams

__all__ = ["EngineDeviceError", "LocalEngine", "RequestStatus", "WeightsMismatchError"]


class EngineDeviceError(UserError, ValueError):
    """A local-engine option that does not run on the engine's device (the C kernels' modes off the CPU)."""


class LocalEngine:
    """Generate with a `CausalLM` in this process.

    >>> engine = LocalEngine(model, tokenizer)
    >>> groups = engine.generate(["12+30="], SamplingParams(n=4, max_tokens=6))
    >>> [c.text for c in groups[0]]  # four samples of one prompt
    >>> for delta in engine.stream(["12+30="], SamplingParams(max_tokens=6)):
    ...     print(delta.text, end="")

    Knobs: `max_batch_rows` running sequences at most; `prefill_chunk` prompt
    tokens per sequence per step and `max_prefill_tokens` per step in all
    (bounding a step's latency and memory); `prefix_cache_tokens` of KV kept
    across requests (0 disables); `sliding_window`; `speculative`;
    `fused_decode` (the packed one-token step of engine/local/fused.py, on by default);
    `max_context` (prompt + completion tokens; default the model's
    `max_position_embeddings`, unbounded with a sliding window);
    `max_concurrency` (requests the worker keeps in the batch at once);
    `precision` ("fp32", "bf16" or "int8": the high-speed mode, weight-only
    rounding of the decode matmuls, engine/local/precision.py; below fp32 the
    engine samples with a derived copy, `policy_model`, prefill included, and
    `samples_with_learner_module` is False: behaviour logprobs are that
    policy's, which truncated importance sampling corrects).
    """

    usage = None  # no remote traffic to total: `metrics()` has the engine's own counters

    def __init__(
        self,
        model: CausalLM,
        tokenizer: Tokenizer,
        seed: int = 0,
        max_batch_rows: int = 2048,
        *,
        prefill_chunk: int = 512,
        max_prefill_tokens: int = 4096,
        prefix_cache_tokens: int = 32768,
        prefix_block: int = 16,
        cache_completions: bool = True,
        sliding_window: WindowSpec | None = None,
        speculative: SpecConfig | None = None,
        fused_decode: bool = True,
        max_context: int | None = None,
        max_concurrency: int = 64,
        precision: str = "fp32",
        device: str | torch.device | None = None,
    ) -> None:
        # where everything the engine allocates lives: `device` (the model is moved there), else the model's
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        _check_options(self.device, prefill_chunk, max_prefill_tokens, sliding_window, speculative, max_context,
                       max_concurrency, precision)
        if next(model.parameters()).device != self.device:
            model.to(self.device)
        self.model, self.tokenizer = model, tokenizer
        self.precision = check_precision(precision)
        # bf16 / int8: a weight-rounded copy derived from `model` (engine/local/precision.py) samples instead, kept
        # current with it; behaviour logprobs are then that policy's, not the learner module's
        self._copy = serving_copy(model, precision) if precision != "fp32" else None
        self.policy_model: CausalLM = model if self._copy is None else self._copy.module
        self.samples_with_learner_module = self._copy is None
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.max_batch_rows, self.prefill_chunk, self.max_prefill_tokens = max_batch_rows, prefill_chunk, max_prefill_tokens
        self.window, self.spec, self.cache_completions = sliding_window, speculative, cache_completions
        self.draft = DraftProposer(speculative.draft_model) if speculative and speculative.method == "draft" else None
        self.dtype = next(model.parameters()).dtype
        use_prefix = prefix_cache_tokens > 0 and sliding_window is None
        self.prefix = (
            PrefixCache(model.config, max(1, prefix_cache_tokens // prefix_block), prefix_block, self.dtype, self.device)
            if use_prefix
            else None
        )
        # a sliding window keeps any length in bounded memory: no context limit unless one is given
        self.max_context = (
            max_context if max_context is not None or sliding_window is not None else model.config.max_position_embeddings
        )
        self.max_concurrency = max_concurrency
        self.threads = EngineThreads()
        self.cascade = sliding_window is None  # samples share their prompt's KV instead of copying it
        # the packed one-token decode step (engine/local/fused.py) where it applies; the model's forward elsewhere
        self.fused = (
            FusedDecoder(self.policy_model, precision=precision)
            if fused_decode and self.device.type == "cpu" and sliding_window is None
            and FusedDecoder.supports(self.policy_model) else None
        )  # fmt: skip
        self._build_parts()

    def _build_parts(self) -> None:
        """The scheduler, row allocator, model runner, sampler, emitter and speculator, sharing one set of counters."""
        self.stats = EngineCounters()
        self.intake = RequestIntake(self.tokenizer, self.model.config.vocab_size, self.max_batch_rows, self.max_context,
                                    self.stats)
        spec_slots = self.spec.k + 1 if self.spec is not None else 0
        self.rows = RowAllocator(self.model.config, self.max_batch_rows, self.prefill_chunk, self.dtype, self.window,
                                 self.device, spec_slots, self.draft)
        self.scheduler = Scheduler(self.rows, self.prefix, self.max_batch_rows, self.prefill_chunk, self.max_prefill_tokens,
                                   self.cache_completions, self.tokenizer.decode)
        self.runner = ModelRunner(self.policy_model, self.fused, self.rows, self.stats, self.prefill_chunk, self.device)
        self.sampler = Sampler(self.generator, self.device)
        self.emitter = Emitter(self.tokenizer, self.stats)
        self.speculator = (
            Speculator(self.spec, self.draft, self.runner, self.sampler, self.emitter, self.stats, self.device)
            if self.spec is not None else None
        )  # fmt: skip

    # -- the parts' state, read by callers and tests ----------------------------------------
    @property
    def policy_version(self) -> int:
        return self.emitter.policy_version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        self.emitter.policy_version = version

    @property
    def kv(self) -> SlotCache | None:
        return self.rows.kv

    @property
    def pkv(self) -> SlotCache | None:
        return self.rows.pkv

    @property
    def waiting(self) -> deque[Request]:
        return self.scheduler.waiting

    @property
    def prefilling(self) -> list[Request]:
        return self.scheduler.prefilling

    @property
    def running(self) -> list[Sequence]:
        return self.scheduler.running

    # -- weights ------------------------------------------------------------------------------
    def load_weights(self, state: Mapping[str, Tensor], version: int) -> None:
        """Adopt `state` (every parameter of the model, by its state-dict name) and tag later completions `version`.

        Free when the tensors are the model's own (a learner sharing the module passes
        `model.state_dict()`): those are not copied. Raises `WeightsMismatchError`
        naming missing, unexpected or misshapen entries, before changing anything.
        Runs on the calling thread: call it between generations (the loop does, after each update).
        """
        load_state(self.model, state)
        self.set_version(version)

    def sampler_state(self) -> Tensor:
        """The engine's own generator (unseeded requests draw from it), for an exact resume."""
        return self.generator.get_state()

    def load_sampler_state(self, state: Tensor) -> None:
        self.generator.set_state(state)

    def set_version(self, version: int) -> None:
        """The weights changed (in place, shared with the learner): retag, and forget KV computed with the old ones."""
        self.policy_version = version
        if self._copy is not None:
            self._copy.invalidate()
        if self.fused is not None:
            self.fused.invalidate()
        if self.prefix is not None:
            self.prefix.clear()

    def metrics(self) -> dict[str, float]:
        """Counters plus derived ratios: prefill share, prefix hit rate, acceptance, tokens per forward."""
        return derived_metrics(self.stats, self.prefix, self.spec is not None)

    # -- requests -----------------------------------------------------------------------------
    def encode(self, prompts: list[str]) -> list[list[int]]:
        return [self.tokenizer.encode(p) for p in prompts]

    def submit(
        self,
        prompt: Prompt,
        params: SamplingParams,
        generator: torch.Generator | None = None,
        stream: bool = False,
        index: int = 0,
    ) -> Request:
        """Queue one prompt for `params.n` samples; `step()` runs it. Raises ValueError on bad input."""
        self.threads.check()
        ids = self.intake.ids(prompt, params)
        if generator is None and params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(params.seed)
        req = self.intake.request(ids, params, generator, stream, index)
        self.scheduler.waiting.append(req)
        return req

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def kv_bytes(self) -> int:
        """Bytes of KV held in preallocated caches (running rows + prompt store)."""
        return self.rows.nbytes()

    def submit_all(self, prompts: list[Prompt], params: SamplingParams, stream: bool = False) -> list[Request]:
        """`submit` every prompt, sharing one generator when seeded (as `generate` does); every prompt is
        checked before any is queued."""
        ids = [self.intake.ids(p, params) for p in prompts]
        generator = torch.Generator(device=self.device).manual_seed(params.seed) if params.seed is not None else None
        return [self.submit(p, params, generator, stream, i) for i, p in enumerate(ids)]

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (grouped in prompt order)."""
        if not prompts:
            return []
        with self.threads.lock:
            worker = self.threads.worker
            if worker is None or worker.dormant:  # this thread drives the engine (one OpenMP team)
                with self.threads.driving():
                    reqs = self.submit_all(prompts, params)
                    with self._eval_mode():
                        while any(r.status is not RequestStatus.FINISHED for r in reqs):
                            self.step()
                    return [r.completions for r in reqs]
        return [g.completions for g in worker.submit(prompts, params).result()]

    async def agenerate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """`generate` for async callers: every concurrent call (from any coroutine, loop or thread) joins the
        one continuous batch of the engine's worker thread, started on first use. A seeded call runs alone,
        so it returns exactly what `generate` would."""
        if not prompts:
            return []
        # an existing worker is taken without the engine's lock: a direct generate on another thread must not
        # block this event loop (the worker's thread waits for it instead)
        try:
            future = (self.threads.worker or self.start_worker()).submit(prompts, params)
        except WorkerClosed:  # closed just now by another thread: a new worker takes it
            future = self.start_worker().submit(prompts, params)
        groups = await asyncio.wrap_future(future)
        return [g.completions for g in groups]

    def stream(self, prompts: list[Prompt], params: SamplingParams) -> Iterator[CompletionDelta]:
        """Per-token deltas of the completions `generate` would return, as each step produces them."""
        with self.threads.lock:
            worker = self.threads.worker
            if worker is None or worker.dormant:
                with self.threads.driving():
                    reqs = self.submit_all(prompts, params, stream=True)
                    ours = {r.id for r in reqs}
                    while any(r.status is not RequestStatus.FINISHED for r in reqs):
                        for d in self.step():
                            if d.request_id in ours:
                                yield d
                return
        deltas: queue.SimpleQueue[CompletionDelta | None] = queue.SimpleQueue()
        future = worker.submit(prompts, params, on_delta=deltas.put)
        future.add_done_callback(lambda _: deltas.put(None))  # after the job's last delta
        while (d := deltas.get()) is not None:
            yield d
        future.result()  # the job's error, if it failed

    def start_worker(self, max_jobs: int | None = None, max_queue: int | None = None) -> EngineWorker:
        """The engine's worker thread, started if it is not running (waits for a direct `generate` in
        progress on another thread); `max_jobs` (default `max_concurrency`) and `max_queue` update its limits."""
        return self.threads.start_worker(self, max_jobs, max_queue, self.max_concurrency)

    def close(self) -> None:
        """Stop the worker thread once the jobs already submitted are done (no-op when none runs)."""
        self.threads.close()

    # -- the step loop ------------------------------------------------------------------------
    def step(self) -> list[CompletionDelta]:
        """Admit, prefill one chunk per admitted prompt, decode every running sequence -> stream deltas."""
        self.threads.check()
        deltas: list[CompletionDelta] = []
        sched = self.scheduler
        with self._eval_mode():
            if self._copy is not None:  # re-derived only when the learner's parameters changed
                self._copy.refresh()
            with torch.inference_mode():
                sched.admit()
                if sched.prefilling:
                    self._prefill(deltas)
                if sched.running:
                    finished = None if self.speculator is None else self.speculator.step(sched.running, deltas)
                    if finished is None:
                        self._decode(deltas)
                    else:
                        sched.retire(finished)
        self.stats.steps += 1
        return deltas

    @contextlib.contextmanager
    def _eval_mode(self) -> Iterator[None]:
        """The model in eval mode inside, restored after (a learner sharing the module leaves it training);
        `generate` holds it over its whole loop, since toggling walks every submodule."""
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            yield
        finally:
            if was_training:
                self.model.train()

    def _prefill(self, deltas: list[CompletionDelta]) -> None:
        """One chunk of every prefilling prompt; a finished one forks into its samples, which draw their first token."""
        sched = self.scheduler
        reqs = sched.prefilling
        logits = self.runner.prefill(reqs)
        for i in sched.prefilled(reqs):
            seqs = sched.start(reqs[i])
            toks, lps = self.sampler.sample(logits[i][None].expand(len(seqs), -1), seqs)
            sched.retire(self.emitter.emit_rows(seqs, toks, lps, deltas))

    def _decode(self, deltas: list[CompletionDelta]) -> None:
        """One token for every running sequence, or a lone greedy sequence's run of them."""
        sched = self.scheduler
        seqs = sched.running
        # a run delays admission by at most `GREEDY_RUN` tokens: only when nothing waits or prefills
        if len(seqs) == 1 and not sched.waiting and not sched.prefilling and self.spec is None:
            s = seqs[0]
            run = self.runner.greedy_run(s)
            if run is not None:
                for t, lp in zip(*run):  # the run ends at a stop id or at max_tokens: so does the last emit
                    if self.emitter.emit(s, t, lp, deltas):
                        sched.retire([s])
                        break
                return
        logits = self.runner.decode(seqs)
        toks, lps = self.sampler.sample(logits, seqs)
        finished = self.emitter.emit_rows(seqs, toks, lps, deltas)
        self.stats.decode_tokens += len(seqs)
        sched.retire(finished)


def _check_options(device: torch.device, prefill_chunk: int, max_prefill_tokens: int, window: WindowSpec | None,
                   speculative: SpecConfig | None, max_context: int | None, max_concurrency: int, precision: str) -> None:
    """One line per option the engine cannot run with."""
    if device.type != "cpu" and (speculative is not None or precision != "fp32"):
        raise EngineDeviceError(f"the local engine on {device} samples at fp32 without speculative decoding: "
                                "precision bf16/int8 and speculation run on CPU only")
    if prefill_chunk < 1 or max_prefill_tokens < prefill_chunk:
        raise ValueError("need prefill_chunk >= 1 and max_prefill_tokens >= prefill_chunk")
    if window is not None and speculative is not None:
        raise ValueError("speculative decoding does not combine with a sliding window (rejected tokens would evict kept ones)")
    if (max_context is not None and max_context < 2) or max_concurrency < 1:
        raise ValueError("need max_context >= 2 (or None) and max_concurrency >= 1")
