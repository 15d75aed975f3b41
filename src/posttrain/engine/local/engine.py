"""`LocalEngine`: continuous-batching generation on the native model, in-process.

Covers: a scheduler with a `step()` loop (requests are `submit`ted at any
time; every step admits waiting requests, prefills one chunk of each admitted
prompt, and decodes one token, or one speculative run, for every running
sequence; finished sequences leave at once, so a long completion never holds
the others back); group prefix sharing (a prompt is prefilled once, in a
prompt-store row, and its n samples attend to that one copy through cascade
attention, never duplicating it; with a sliding window the KV is copied to
each sample's row instead); the
cross-request prefix cache (engine/local/prefix_cache.py); chunked prefill under a
per-step token budget; sampling with temperature, top-k, top-p, min-p, stop
strings and token ids, per-request seeds, and behaviour logprobs of the
processed distribution; optional sliding window with attention sinks; exact
speculative decoding (engine/local/spec_decode.py); a lone greedy sequence's
decode in runs of tokens inside the C kernel (`_decode_greedy_run`); serving at a reduced
precision (bf16 or int8 weights, engine/local/precision.py); `generate` and `stream` on top,
and `agenerate` through a worker thread (engine/local/worker.py) that every
concurrent caller shares; the context limit (a request asking for more tokens
than fit is clamped to what fits, noted once in the log); `load_weights`.
Devices: the engine runs where the model is (or on `device`, where it then moves the model): the KV
cache, prompt ids, masks, generators and sampling buffers are allocated there. The C kernels (the fused
decode step, native cascade attention, `_decode_greedy_run`) serve CPU engines only: a CUDA engine is told
so by its device, never by probing, and runs the model's PyTorch forward; speculative decoding and the
bf16 / int8 serving copies are CPU-only (a one-line error elsewhere).
Does not cover: several devices at once, preemption (admission reserves every row a
request needs, so nothing is ever evicted mid-flight), beam search.

Threads: the engine is not thread-safe. Before `agenerate` is first called it
belongs to whichever thread calls it; once its worker runs, `generate`,
`stream` and `agenerate` from any thread go through the worker, and calling
`submit` or `step` from another thread is an error. `close()` stops the
worker (a later `agenerate` starts a new one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Iterator, Mapping

import torch
from torch import Tensor

from posttrain.engine.base import CompletionDelta, ContextLengthError, Prompt
from posttrain.engine.detokenize import IncrementalText, find_stop
from posttrain.engine.local.fused import FusedDecoder
from posttrain.engine.local.kv import SharedPrefix, SlotCache, WindowSpec
from posttrain.engine.local.precision import check_precision, serving_copy
from posttrain.engine.local.prefix_cache import PrefixCache
from posttrain.engine.local.sequence import Request, RequestStatus, Sequence
from posttrain.engine.local.spec_decode import DraftProposer, SpecConfig, group_rows, lookup_propose, verify
from posttrain.engine.local.worker import EngineWorker, WorkerClosed
from posttrain.engine.sampling import choose, process_for
from posttrain.errors import UserError
from posttrain.models.llama import CausalLM
from posttrain.models.tokenizer import Tokenizer
from posttrain.types import Completion, FinishReason, SamplingParams

log = logging.getLogger(__name__)

# a lone greedy sequence decodes up to this many tokens per C call (`_decode_greedy_run`): Python's per-token
# cost goes, and a request submitted meanwhile waits at most this many tokens to be admitted
GREEDY_RUN = 16


class WeightsMismatchError(UserError, KeyError):
    """`load_weights` got a state whose names (or shapes) are not the model's: the message lists them."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


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
        if self.device.type != "cpu" and (speculative is not None or precision != "fp32"):
            raise EngineDeviceError(f"the local engine on {self.device} samples at fp32 without speculative decoding: "
                                    "precision bf16/int8 and speculation run on CPU only")
        if next(model.parameters()).device != self.device:
            model.to(self.device)
        if prefill_chunk < 1 or max_prefill_tokens < prefill_chunk:
            raise ValueError("need prefill_chunk >= 1 and max_prefill_tokens >= prefill_chunk")
        if sliding_window is not None and speculative is not None:
            raise ValueError(
                "speculative decoding does not combine with a sliding window (rejected tokens would evict kept ones)"
            )
        if (max_context is not None and max_context < 2) or max_concurrency < 1:
            raise ValueError("need max_context >= 2 (or None) and max_concurrency >= 1")
        self.model = model
        self.precision = check_precision(precision)
        # bf16 / int8: a weight-rounded copy derived from `model` (engine/local/precision.py) samples instead, kept
        # current with it; behaviour logprobs are then that policy's, not the learner module's
        self._copy = serving_copy(model, precision) if precision != "fp32" else None
        self.policy_model: CausalLM = model if self._copy is None else self._copy.module
        self.samples_with_learner_module = self._copy is None
        self.tokenizer = tokenizer
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.max_batch_rows = max_batch_rows
        self.prefill_chunk, self.max_prefill_tokens = prefill_chunk, max_prefill_tokens
        self.window = sliding_window
        self.spec = speculative
        self.draft = DraftProposer(speculative.draft_model) if speculative and speculative.method == "draft" else None
        self.dtype = next(model.parameters()).dtype
        use_prefix = prefix_cache_tokens > 0 and sliding_window is None
        self.prefix = (
            PrefixCache(model.config, max(1, prefix_cache_tokens // prefix_block), prefix_block, self.dtype, self.device)
            if use_prefix
            else None
        )
        self.cache_completions = cache_completions
        self.policy_version = 0
        # a sliding window keeps any length in bounded memory: no context limit unless one is given
        self.max_context = (
            max_context if max_context is not None or sliding_window is not None else model.config.max_position_embeddings
        )
        self.max_concurrency = max_concurrency
        self._clamp_noted = False
        self._worker: EngineWorker | None = None
        self._driver: threading.Thread | None = None  # the thread in a direct generate/stream, if any
        self._owner = threading.RLock()  # held by a direct generate/stream, and to start or stop the worker
        self.cascade = sliding_window is None  # samples share their prompt's KV instead of copying it
        # the packed one-token decode step (engine/local/fused.py) where it applies; the model's forward elsewhere
        self.fused = (
            FusedDecoder(self.policy_model, precision=precision)
            if fused_decode and self.device.type == "cpu" and sliding_window is None
            and FusedDecoder.supports(self.policy_model) else None
        )  # fmt: skip
        self.kv: SlotCache | None = None  # running rows: what each sample adds to its prompt
        self.pkv: SlotCache | None = None  # prompt store: one row per admitted request
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []  # admission order
        self.p_owner: list[Request] = []  # p_owner[i].prompt_row == i
        self.running: list[Sequence] = []  # running[i].row == i
        self.reserved = 0  # running rows promised to requests still in prefill
        self._next_id = 0
        self.stats = {
            "prefill_tokens": 0,  # prompt tokens run through the model
            "prompt_tokens_submitted": 0,  # prompt tokens x n, what a no-sharing engine would prefill
            "generated_tokens": 0,
            "steps": 0,
            "decode_forwards": 0,  # target forwards over the running rows
            "decode_row_steps": 0,  # sum over those forwards of the rows they carried
            "decode_tokens": 0,  # tokens those forwards emitted (> row steps when speculation is accepted)
            "spec_proposed": 0,
            "spec_accepted": 0,
        }

    # -- weights ------------------------------------------------------------------------------
    def load_weights(self, state: Mapping[str, Tensor], version: int) -> None:
        """Adopt `state` (every parameter of the model, by its state-dict name) and tag later completions `version`.

        Free when the tensors are the model's own (a learner sharing the module passes
        `model.state_dict()`): those are not copied. Raises `WeightsMismatchError`
        naming missing, unexpected or misshapen entries, before changing anything.
        Runs on the calling thread: call it between generations (the loop does, after each update).
        """
        own = self.model.state_dict(keep_vars=True)
        aliases: dict[int, list[str]] = {}  # tied weights: one tensor under several names, any of which will do
        for name, t in own.items():
            aliases.setdefault(id(t), []).append(name)
        missing = [names[0] for names in aliases.values() if not any(n in state for n in names)]
        unexpected = [k for k in state if k not in own]
        misshapen = [
            f"{k} {tuple(state[k].shape)} != {tuple(own[k].shape)}" for k in state if k in own and state[k].shape != own[k].shape
        ]
        if missing or unexpected or misshapen:
            parts = [
                f"{label}: {_names(items)}"
                for label, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape", misshapen))
                if items
            ]
            raise WeightsMismatchError(f"load_weights needs exactly the model's state dict; {'; '.join(parts)}")
        with torch.no_grad():
            for name, t in state.items():
                dst = own[name]
                if not _same_memory(t, dst):
                    dst.copy_(t)
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

    # -- metrics ------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Counters plus derived ratios: prefill share, prefix hit rate, acceptance, tokens per forward."""
        s = dict(self.stats)
        s["prefill_fraction"] = s["prefill_tokens"] / max(s["prompt_tokens_submitted"], 1)
        if self.prefix is not None:
            s["prefix_cache_lookup_tokens"] = self.prefix.lookup_tokens
            s["prefix_cache_hit_tokens"] = self.prefix.hit_tokens
            s["prefix_hit_rate"] = self.prefix.hit_rate
        if self.spec is not None:
            s["spec_acceptance_rate"] = s["spec_accepted"] / max(s["spec_proposed"], 1)
        s["tokens_per_forward"] = s["decode_tokens"] / max(s["decode_row_steps"], 1)
        return s

    # -- requests -----------------------------------------------------------------------------
    def encode(self, prompts: list[str]) -> list[list[int]]:
        return [self.tokenizer.encode(p) for p in prompts]

    def _ids(self, prompt: Prompt, params: SamplingParams) -> list[int]:
        """The prompt's token ids, checked. Raises ValueError (ContextLengthError for a prompt too long)."""
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids:
            raise ValueError("empty prompt: every prompt needs at least one token")
        vocab = self.model.config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"prompt token ids must lie in [0, {vocab}), got {min(ids)}..{max(ids)}")
        if params.n > self.max_batch_rows:
            raise ValueError(f"n={params.n} exceeds the engine's max_batch_rows={self.max_batch_rows}")
        if self.max_context is not None and len(ids) >= self.max_context:
            raise ContextLengthError(
                f"the prompt has {len(ids)} tokens; this model's context holds {self.max_context} "
                "(prompt and completion together)"
            )
        return ids

    def _budget(self, prompt_len: int, max_tokens: int) -> int:
        """`max_tokens`, cut to what fits in the context after the prompt (said once per engine)."""
        if self.max_context is None or prompt_len + max_tokens <= self.max_context:
            return max_tokens
        room = self.max_context - prompt_len
        if not self._clamp_noted:
            self._clamp_noted = True
            log.warning(
                "a request asked for %d new tokens after a %d-token prompt; this model's context holds %d, so it gets %d "
                "(such completions end with finish reason 'length'; noted once per engine)",
                max_tokens, prompt_len, self.max_context, room,
            )
        return room

    def submit(
        self,
        prompt: Prompt,
        params: SamplingParams,
        generator: torch.Generator | None = None,
        stream: bool = False,
        index: int = 0,
    ) -> Request:
        """Queue one prompt for `params.n` samples; `step()` runs it. Raises ValueError on bad input."""
        self._check_thread()
        ids = self._ids(prompt, params)
        if generator is None and params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(params.seed)
        stop_ids = set(params.stop_token_ids)
        if self.tokenizer.eos_id is not None and not params.ignore_eos:
            stop_ids.add(self.tokenizer.eos_id)
        max_tokens = self._budget(len(ids), params.max_tokens)
        req = Request(
            self._next_id, ids, params, generator, stream, index=index, stop_ids=frozenset(stop_ids), max_tokens=max_tokens
        )
        self._next_id += 1
        self.stats["prompt_tokens_submitted"] += len(ids) * params.n
        self.waiting.append(req)
        return req

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running)

    def kv_bytes(self) -> int:
        """Bytes of KV held in preallocated caches (running rows + prompt store)."""
        return sum(c.nbytes() for c in (self.kv, self.pkv) if c is not None)

    def submit_all(self, prompts: list[Prompt], params: SamplingParams, stream: bool = False) -> list[Request]:
        """`submit` every prompt, sharing one generator when seeded (as `generate` does); every prompt is
        checked before any is queued."""
        ids = [self._ids(p, params) for p in prompts]
        generator = torch.Generator(device=self.device).manual_seed(params.seed) if params.seed is not None else None
        return [self.submit(p, params, generator, stream, i) for i, p in enumerate(ids)]

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (grouped in prompt order)."""
        if not prompts:
            return []
        with self._owner:
            worker = self._worker
            if worker is None or worker.dormant:  # this thread drives the engine (one OpenMP team)
                with self._driving():
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
            future = (self._worker or self.start_worker()).submit(prompts, params)
        except WorkerClosed:  # closed just now by another thread: a new worker takes it
            future = self.start_worker().submit(prompts, params)
        groups = await asyncio.wrap_future(future)
        return [g.completions for g in groups]

    def stream(self, prompts: list[Prompt], params: SamplingParams) -> Iterator[CompletionDelta]:
        """Per-token deltas of the completions `generate` would return, as each step produces them."""
        with self._owner:
            worker = self._worker
            if worker is None or worker.dormant:
                with self._driving():
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

    # -- the worker ---------------------------------------------------------------------------
    def start_worker(self, max_jobs: int | None = None, max_queue: int | None = None) -> EngineWorker:
        """The engine's worker thread, started if it is not running (waits for a direct `generate` in
        progress on another thread); `max_jobs` (default `max_concurrency`) and `max_queue` update its limits."""
        with self._owner:
            if self._worker is None or self._worker.closed:
                self._worker = EngineWorker(self, max_jobs or self.max_concurrency, max_queue or 1024, lock=self._owner)
            else:
                self._worker.max_jobs = max_jobs or self._worker.max_jobs
                self._worker.max_queue = max_queue or self._worker.max_queue
                self._worker.ensure_thread()
            return self._worker

    def close(self) -> None:
        """Stop the worker thread once the jobs already submitted are done (no-op when none runs)."""
        with self._owner:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()  # not holding the lock: the worker takes it for each step it still has to run

    @contextlib.contextmanager
    def _driving(self) -> Iterator[None]:
        """This thread calls submit/step directly (it holds `_owner`; the worker, if any, is dormant)."""
        self._driver = threading.current_thread()
        try:
            yield
        finally:
            self._driver = None

    def _check_thread(self) -> None:
        worker = self._worker
        me = threading.current_thread()
        if worker is not None and worker.thread is not None and me is not worker.thread and me is not self._driver:
            raise RuntimeError(
                "LocalEngine.submit/step called outside its worker thread while the worker runs: "
                "use generate, stream or agenerate"
            )

    # -- the step loop ------------------------------------------------------------------------
    def step(self) -> list[CompletionDelta]:
        """Admit, prefill one chunk per admitted prompt, decode every running sequence -> stream deltas."""
        self._check_thread()
        deltas: list[CompletionDelta] = []
        with self._eval_mode():
            if self._copy is not None:  # re-derived only when the learner's parameters changed
                self._copy.refresh()
            with torch.inference_mode():
                self._admit()
                if self.prefilling:
                    self._prefill(deltas)
                if self.running:
                    if self.spec is not None:
                        self._decode_spec(deltas)
                    else:
                        self._decode(deltas)
        self.stats["steps"] += 1
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

    def _slots_for(self, req: Request) -> int:
        extra = self.spec.k + 1 if self.spec is not None else 0
        return (0 if self._shares(req) else len(req.prompt)) + req.max_tokens + extra + 2

    def _shares(self, req: Request) -> bool:
        """Its samples read the prompt from the prompt store (cascade); a lone sample copies it into its row,
        which keeps the decode step to plain attention."""
        return self.cascade and req.params.n > 1

    def _admit(self) -> None:
        while self.waiting:
            req = self.waiting[0]
            n = req.params.n
            if len(self.running) + self.reserved + n > self.max_batch_rows:
                return
            chunk = min(len(req.prompt), self.prefill_chunk)
            widest = max([chunk] + [min(len(r.prompt) - r.n_cached, self.prefill_chunk) for r in self.prefilling])
            if self.prefilling and (len(self.prefilling) + 1) * widest > self.max_prefill_tokens:
                return
            self.waiting.popleft()
            self._ensure_capacity(req)
            req.prompt_row = len(self.p_owner)
            req.status = RequestStatus.PREFILL
            self.prefilling.append(req)
            self.p_owner.append(req)
            self.reserved += n
            if self.prefix is not None:  # keep at least one prompt token to compute: its logits start sampling
                slots = self.prefix.match(req.prompt, len(req.prompt) - 1)
                self.prefix.read_into(slots, self.pkv, req.prompt_row)
                req.n_cached = len(slots) * self.prefix.block
            else:
                req.n_cached = 0
            self.pkv.clear_row(req.prompt_row)

    def _ensure_capacity(self, req: Request) -> None:
        slots = self._slots_for(req)
        rows = len(self.running) + self.reserved + req.params.n
        cfg = self.model.config
        chunk = self.prefill_chunk
        if self.kv is None:
            r0 = min(self.max_batch_rows, max(rows, 8))
            self.kv = SlotCache(cfg, r0, slots, self.dtype, self.window, chunk, self.device)
            self.pkv = SlotCache(cfg, 8, len(req.prompt) + 2, self.dtype, self.window, chunk, self.device)
        if rows > self.kv.rows or slots > self.kv.slots:
            self.kv.grow(min(self.max_batch_rows, max(rows, 2 * self.kv.rows if rows > self.kv.rows else 0)), slots)
        p_rows = len(self.p_owner) + 1
        if p_rows > self.pkv.rows or len(req.prompt) + 2 > self.pkv.slots:
            self.pkv.grow(2 * self.pkv.rows if p_rows > self.pkv.rows else 0, len(req.prompt) + 2)
        if self.draft is not None:
            self.draft.ensure(self.kv.rows, len(req.prompt) + req.max_tokens + self.spec.k + 3)  # whole sequences

    def _prefill(self, deltas: list[CompletionDelta]) -> None:
        reqs = self.prefilling
        b = len(reqs)
        chunks = [min(len(r.prompt) - r.n_cached, self.prefill_chunk) for r in reqs]
        t = max(chunks)
        dev = self.device
        # [b, t] built on the host, one copy to the device (on a CPU engine that copy is the tensor itself)
        ids = torch.tensor([r.prompt[r.n_cached : r.n_cached + c] + [0] * (t - c) for r, c in zip(reqs, chunks)],
                           dtype=torch.long, device=dev)
        start = [r.n_cached for r in reqs]
        rows = [r.prompt_row for r in reqs]
        rows = slice(0, b) if rows == list(range(b)) else torch.tensor(rows, device=dev)
        cache = self.pkv.bind(rows, start, None if min(chunks) == t else chunks, t)
        last = torch.tensor(chunks, device=dev)[:, None] - 1
        logits = self.policy_model(ids, cache=cache, logits_index=last)[:, 0]  # [b, V]
        self.stats["prefill_tokens"] += sum(chunks)
        done = []
        for r, c in zip(reqs, chunks):
            r.n_cached += c
            if r.n_cached == len(r.prompt):
                done.append(r)
        if done:
            self.prefilling = [r for r in reqs if r.n_cached < len(r.prompt)]
        for i, r in enumerate(reqs):
            if r.n_cached == len(r.prompt):
                self._start_samples(r, logits[i], deltas)

    def _free_prompt_row(self, req: Request) -> None:
        hole, last = req.prompt_row, self.p_owner[-1]
        if last is not req:
            self.pkv.copy_rows(self.pkv, [last.prompt_row], [hole], last.n_cached)
            self.p_owner[hole] = last
            last.prompt_row = hole
        self.p_owner.pop()
        self.pkv.clear_row(len(self.p_owner))

    def _start_samples(self, req: Request, logits: Tensor, deltas: list[CompletionDelta]) -> None:
        """Fork the finished prefill to n running rows and draw every sample's first token."""
        n, p_len = req.params.n, len(req.prompt)
        rows = list(range(len(self.running), len(self.running) + n))
        if self.prefix is not None:
            pr = req.prompt_row
            self.prefix.insert(req.prompt, lambda lo, hi: [c[pr, :, lo:hi] for c in self.pkv.k + self.pkv.v])
        shared = self._shares(req)
        base = p_len if shared else 0
        if not shared:
            self.pkv.copy_rows(self.kv, [req.prompt_row] * n, rows, p_len)
            self._free_prompt_row(req)
        # text as it grows, for streaming and stop strings (a plain request decodes once, when it finishes)
        texts = req.stream or bool(req.params.stop)
        seqs = [
            Sequence(req, j, list(req.prompt), row, p_len, base, text=IncrementalText(self.tokenizer.decode) if texts else None)
            for j, row in enumerate(rows)
        ]
        req.samples, req.unfinished, req.status = seqs, n, RequestStatus.RUNNING
        self.running.extend(seqs)
        self.reserved -= n
        toks, lps = self._sample(logits[None].expand(n, -1), seqs)
        finished = [s for s, t, lp in zip(seqs, toks.tolist(), lps.tolist()) if self._emit(s, t, lp, deltas)]
        self._retire(finished)

    def _decode_greedy_run(self, deltas: list[CompletionDelta]) -> bool:
        """A lone greedy sequence decodes up to `GREEDY_RUN` tokens in one C call (`FusedDecoder.decode_greedy`):
        the same forwards, argmax and logprobs as that many `_decode` steps, without the Python between
        tokens (~0.3 ms a token, 15% of a 10M model's). Only when nothing waits to be admitted or prefilled (a
        run delays admission by at most `GREEDY_RUN` tokens), without speculation or a shared prompt, with no
        filtering (temperature 0, no top-k/top-p/min-p) and no stop strings (text is checked per token, and a
        run past a stop would waste forwards). -> whether it ran."""
        if len(self.running) != 1 or self.waiting or self.prefilling or self.fused is None or self.spec is not None:
            return False
        s = self.running[0]
        req, params = s.request, s.request.params
        plain = params.temperature == 0 and params.top_k == 0 and params.top_p >= 1.0 and params.min_p == 0.0
        n = min(GREEDY_RUN, req.max_tokens - len(s.out))
        if not plain or params.stop or s.base or n < 2:
            return False
        got = self.fused.decode_greedy(s.all[-1], s.n_cached - s.base, self.kv, n, req.stop_ids)
        if got is None:
            return False
        toks, lps = got
        s.n_cached += len(toks)
        self.stats["decode_forwards"] += len(toks)
        self.stats["decode_row_steps"] += len(toks)
        self.stats["decode_tokens"] += len(toks)
        for t, lp in zip(toks, lps):  # the run ends at a stop id or at max_tokens: so does the last _emit
            if self._emit(s, t, lp, deltas):
                self._retire([s])
                break
        return True

    def _decode(self, deltas: list[CompletionDelta]) -> None:
        if self._decode_greedy_run(deltas):
            return
        seqs = self.running
        b = len(seqs)
        start = [s.n_cached - s.base for s in seqs]
        shared = self._shared(seqs)
        last = torch.tensor([s.all[-1] for s in seqs], device=self.device)
        if self.fused is not None and shared is None:
            logits = self.fused.step(last, start, self.kv)
        else:
            logits = self.policy_model(last[:, None], cache=self.kv.bind(slice(0, b), start, None, 1, shared))[:, 0]  # [b, V]
        for s in seqs:
            s.n_cached += 1
        self.stats["decode_forwards"] += 1
        self.stats["decode_row_steps"] += b
        toks, lps = self._sample(logits, seqs)
        finished = [s for s, t, lp in zip(seqs, toks.tolist(), lps.tolist()) if self._emit(s, t, lp, deltas)]
        self.stats["decode_tokens"] += b
        self._retire(finished)

    def _decode_spec(self, deltas: list[CompletionDelta]) -> None:
        seqs, cfg = self.running, self.spec
        b = len(seqs)
        ks = [max(0, min(cfg.k, s.request.max_tokens - len(s.out) - 1)) for s in seqs]
        if max(ks) == 0:
            return self._decode(deltas)
        q = None
        if self.draft is None:
            props, srcs = [], []
            for s, kk in zip(seqs, ks):
                p, src = (
                    lookup_propose(s.all, kk, cfg.ngram_max, cfg.ngram_min, s.lookup_at if cfg.carry else -1) if kk else ([], -1)
                )
                props.append(p)
                srcs.append(src)
        else:
            kd = max(ks)
            drafts_t, q = self.draft.propose(seqs, kd)
            props = [drafts_t[i, : ks[i]].tolist() for i in range(b)]
        k = max(len(p) for p in props)
        if k == 0:
            if self.draft is None and cfg.carry:  # one plain token: sources advance with it
                for s in seqs:
                    if s.lookup_at >= 0:
                        s.lookup_at += 1
            return self._decode(deltas)
        ids = torch.tensor([[s.all[-1], *p] + [0] * (k - len(p)) for s, p in zip(seqs, props)], device=self.device)
        n_valid = [len(p) + 1 for p in props]
        n_draft = torch.tensor(n_valid, device=self.device) - 1
        start = [s.n_cached - s.base for s in seqs]
        ragged = None if min(n_valid) == 1 + k else n_valid
        shared = self._shared(seqs)
        logits = None
        if self.fused is not None and shared is None:  # the compiled kernel verifies a few rows' drafts in one pass
            logits = self.fused.forward_tokens(ids, start, ragged, self.kv)
        if logits is None:
            logits = self.policy_model(ids, cache=self.kv.bind(slice(0, b), start, ragged, 1 + k, shared))  # [b, 1+k, V]
        self.stats["decode_forwards"] += 1
        self.stats["decode_row_steps"] += b
        groups = group_rows(seqs, self.device)
        if len(groups) == 1:  # one request (or one set of params): no per-group copies
            (params, gen), _ = next(iter(groups.items()))
            logp = torch.log_softmax(process_for(logits, params), -1)
            qs = None if q is None else q[:, :k]
            n_acc, nxt = verify(logp.exp(), ids[:, 1:], n_draft, qs, params.temperature == 0, gen or self.generator)
        else:
            n_acc = torch.empty(b, dtype=torch.long, device=self.device)
            nxt = torch.empty(b, dtype=torch.long, device=self.device)
            logp = torch.empty(logits.shape, dtype=torch.float32, device=self.device)
            for (params, gen), idx in groups.items():
                processed = process_for(logits[idx], params)
                logp[idx] = torch.log_softmax(processed, -1)
                qs = None if q is None else q[idx][:, :k]
                a, x = verify(logp[idx].exp(), ids[idx, 1:], n_draft[idx], qs, params.temperature == 0, gen or self.generator)
                n_acc[idx], nxt[idx] = a, x
        n_acc_l, nxt_l = n_acc.tolist(), nxt.tolist()
        # every emitted token's logprob in one gather: row i emits its a_i accepted drafts, then nxt_i
        toks = [props[i][: n_acc_l[i]] + [nxt_l[i]] for i in range(b)]
        row_idx = [i for i in range(b) for _ in toks[i]]
        pos_idx = [j for i in range(b) for j in range(len(toks[i]))]
        flat_lps = logp[row_idx, pos_idx, [t for x in toks for t in x]].tolist()
        finished, emitted, at = [], 0, 0
        for i, s in enumerate(seqs):
            a = n_acc_l[i]
            lps = flat_lps[at : at + a + 1]
            at += a + 1
            s.n_cached += 1 + a
            if self.draft is not None:
                s.draft_cached += min(a, k - 1)
            elif srcs[i] >= 0:  # the source of the next token, assuming what was emitted replaced what was read
                s.lookup_at = srcs[i] + 1 + a
            elif s.lookup_at >= 0:
                s.lookup_at += 1 + a
            self.stats["spec_proposed"] += len(props[i])
            self.stats["spec_accepted"] += a
            for t, lp in zip(toks[i], lps):
                emitted += 1
                if self._emit(s, t, lp, deltas):
                    finished.append(s)
                    break
        self.stats["decode_tokens"] += emitted
        self._retire(finished)

    def _shared(self, seqs: list[Sequence]) -> SharedPrefix | None:
        """Each running row's group in the prompt store, for cascade attention."""
        if not self.cascade or not any(s.base for s in seqs):
            return None
        groups = len(self.p_owner)
        count = [0] * groups
        group, member = [], []
        for s in seqs:
            g = s.request.prompt_row if s.base else 0  # a row holding its own prompt: any group, all masked
            group.append(g)
            member.append(count[g])
            count[g] += 1
        dev = self.device
        width = max(s.base for s in seqs)
        lens = torch.tensor([s.base for s in seqs], device=dev)
        mask = torch.zeros((len(seqs), width), dtype=self.dtype, device=dev).masked_fill_(
            torch.arange(width, device=dev)[None] >= lens[:, None], float("-inf")
        )
        return SharedPrefix(
            self.pkv, groups, width, max(count), torch.tensor(group, device=dev), torch.tensor(member, device=dev), lens,
            mask[:, None, None],
        )

    # -- sampling and bookkeeping -------------------------------------------------------------
    def _sample(self, logits: Tensor, seqs: list[Sequence]) -> tuple[Tensor, Tensor]:
        """[b, V] raw logits -> (tokens [b], logprobs [b]) with each request's params and generator."""
        groups = group_rows(seqs, self.device)
        if len(groups) == 1:
            (params, gen), _ = next(iter(groups.items()))
            return self._sample_one(logits, params, gen)
        toks = torch.empty(logits.shape[0], dtype=torch.long, device=self.device)
        lps = torch.empty(logits.shape[0], dtype=torch.float32, device=self.device)
        for (params, gen), idx in groups.items():
            toks[idx], lps[idx] = self._sample_one(logits[idx], params, gen)
        return toks, lps

    def _sample_one(self, logits: Tensor, params: SamplingParams, gen) -> tuple[Tensor, Tensor]:
        processed = process_for(logits, params)
        logp = torch.log_softmax(processed, -1)
        tok = choose(processed, params.temperature == 0, gen or self.generator)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)

    def _emit(self, s: Sequence, tok: int, lp: float, deltas: list[CompletionDelta]) -> bool:
        """Append one token; decide whether the sequence is finished; queue a stream delta."""
        s.all.append(tok)
        s.out.append(tok)
        s.logprobs.append(lp)
        self.stats["generated_tokens"] += 1
        req, params = s.request, s.request.params
        new = s.text.push(tok) if s.text is not None else ""
        if tok in req.stop_ids:
            s.finish = FinishReason.STOP
        elif new and params.stop and self._hit_stop(s, s.text, new, params.stop):
            s.finish = FinishReason.STOP
        elif len(s.out) >= req.max_tokens:
            s.finish = FinishReason.LENGTH
        if s.finish is not None:
            text = self.tokenizer.decode(s.out)  # once per completion: the text `generate` returns
            if s.stop_at >= 0:
                at = find_stop(text, params.stop)
                text = text[:at] if at >= 0 else text
            s.completion = Completion(s.out, text, s.logprobs, s.finish, self.policy_version)
        if req.stream:
            deltas.append(self._delta(s, tok, lp))
        return s.finish is not None

    def _hit_stop(self, s: Sequence, text: IncrementalText, new: str, stops: tuple[str, ...]) -> bool:
        """Whether a stop string ends in the text `new` just added to `text` (only its tail is searched)."""
        tail = text.tail(len(new) + max(len(x) for x in stops) - 1)
        at = find_stop(tail, stops)
        if at >= 0:
            s.stop_at = text.length - len(tail) + at
        return at >= 0

    def _delta(self, s: Sequence, tok: int, lp: float) -> CompletionDelta:
        """The text this token made visible: final text once finished; before, the incremental text less
        what may yet become a stop string."""
        if s.completion is not None:
            text = s.completion.text[s.sent_text :]
        else:
            so_far = s.text
            assert so_far is not None  # a streamed sequence keeps its text
            stops = s.request.params.stop
            upto = so_far.length - (max(len(x) for x in stops) - 1 if stops else 0)
            text = so_far.tail(so_far.length - s.sent_text)[: upto - s.sent_text] if upto > s.sent_text else ""
        s.sent_text += len(text)
        return CompletionDelta(s.request.index, s.index, s.request.id, [tok], [lp], text, s.finish, s.completion)

    def _retire(self, finished: list[Sequence]) -> None:
        """Free the rows of finished sequences: the running rows past the new end move into the holes, in one copy.

        Completions are cached in the prefix tree first, while their rows still hold them."""
        if not finished:
            return
        if self.prefix is not None and self.cache_completions:
            for s in finished:
                self.prefix.insert(s.all[: s.n_cached], self._kv_source(s))
        done = {id(s) for s in finished}
        n_old, n_new = len(self.running), len(self.running) - len(finished)
        holes = sorted(s.row for s in finished if s.row < n_new)
        movers = [s for s in self.running[n_new:] if id(s) not in done]
        if movers:
            self.kv.copy_rows(self.kv, [m.row for m in movers], holes, max(m.n_cached for m in movers))
            for m, hole in zip(movers, holes):
                if self.draft is not None:
                    self.draft.move_row(m.row, hole, m.draft_cached)
                self.running[hole] = m
                m.row = hole
        del self.running[n_new:]
        for row in range(n_new, n_old):
            self.kv.clear_row(row)
        for s in finished:
            req = s.request
            req.unfinished -= 1
            if req.unfinished == 0:
                req.status = RequestStatus.FINISHED
                if self._shares(req):
                    self._free_prompt_row(req)

    def _kv_source(self, s: Sequence):
        """Per layer keys then values [H_kv, n, D] of a sequence's cached tokens (prompt + row)."""
        pr, row = s.request.prompt_row, s.row

        def source(lo: int, hi: int) -> list[Tensor]:
            base = s.base
            rows = [c[row, :, max(lo - base, 0) : max(hi - base, 0)] for c in self.kv.k + self.kv.v]
            if lo >= base:
                return rows
            prompts = [c[pr, :, lo : min(hi, base)] for c in self.pkv.k + self.pkv.v]
            return [torch.cat((p, r), dim=1) for p, r in zip(prompts, rows)]

        return source


def _same_memory(a: Tensor, b: Tensor) -> bool:
    """`a` is `b`'s own storage (same address, layout and type): a learner sharing the module passed it."""
    return a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.device == b.device and a.stride() == b.stride()


def _names(items: list[str], most: int = 8) -> str:
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more
