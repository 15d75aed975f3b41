"""`LocalEngine`'s model runner: the forwards of a step, over the rows the scheduler placed.

Covers: a prefill chunk of every prefilling prompt in one forward (ragged chunks padded, each prompt in
its prompt-store row, the logits of each chunk's last token); the decode forward of one token per
running row (the packed step of engine/local/fused.py where it applies, else the model's forward with
cascade attention over the prompt store); a lone greedy sequence's run of tokens in one C call
(`greedy_run`); the verification forward of speculative decoding (1 + k tokens per row). Each advances
its sequences' cached lengths and the forward counters.
Does not cover: choosing tokens (engine/local/sampler.py), which rows run (engine/local/scheduler.py).
Devices: ids and index tensors are made on the engine's device; the C paths serve CPU engines only
(`fused` is None elsewhere).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.engine.local.counters import EngineCounters
from posttrain.engine.local.fused import FusedDecoder
from posttrain.engine.local.rows import RowAllocator
from posttrain.engine.local.sequence import Request, Sequence
from posttrain.models.llama import CausalLM

# a lone greedy sequence decodes up to this many tokens per C call (`greedy_run`): Python's per-token
# cost goes, and a request submitted meanwhile waits at most this many tokens to be admitted
GREEDY_RUN = 16


class ModelRunner:
    """Runs `model` (the policy the engine samples) over the allocator's caches."""

    def __init__(self, model: CausalLM, fused: FusedDecoder | None, rows: RowAllocator, counters: EngineCounters,
                 prefill_chunk: int, device: torch.device) -> None:
        self.model, self.fused, self.rows, self.counters = model, fused, rows, counters
        self.prefill_chunk, self.device = prefill_chunk, device

    def prefill(self, reqs: list[Request]) -> Tensor:
        """One chunk of each prompt -> logits of each chunk's last token [b, V]."""
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
        cache = self.rows.pkv.bind(rows, start, None if min(chunks) == t else chunks, t)
        last = torch.tensor(chunks, device=dev)[:, None] - 1
        logits = self.model(ids, cache=cache, logits_index=last)[:, 0]  # [b, V]
        self.counters.prefill_tokens += sum(chunks)
        for r, c in zip(reqs, chunks):
            r.n_cached += c
        return logits

    def decode(self, seqs: list[Sequence]) -> Tensor:
        """The newest token of every running row -> logits of the next [b, V]."""
        b = len(seqs)
        kv = self.rows.kv
        start = [s.n_cached - s.base for s in seqs]
        shared = self.rows.shared_prefix(seqs)
        last = torch.tensor([s.all[-1] for s in seqs], device=self.device)
        if self.fused is not None and shared is None:
            logits = self.fused.step(last, start, kv)
        else:
            logits = self.model(last[:, None], cache=kv.bind(slice(0, b), start, None, 1, shared))[:, 0]  # [b, V]
        for s in seqs:
            s.n_cached += 1
        self.counters.decode_forwards += 1
        self.counters.decode_row_steps += b
        return logits

    def greedy_run(self, s: Sequence) -> tuple[list[int], list[float]] | None:
        """Up to `GREEDY_RUN` greedy tokens of the lone running row `s` in one C call
        (`FusedDecoder.decode_greedy`): the same forwards, argmax and logprobs as that many plain steps,
        without the Python between tokens (~0.3 ms a token, 15% of a 10M model's). Only with no filtering
        (temperature 0, no top-k/top-p/min-p), no stop strings (text is checked per token, and a run past a
        stop would waste forwards) and no shared prompt. -> (tokens, logprobs), or None: not applicable."""
        req, params = s.request, s.request.params
        if self.fused is None:
            return None
        plain = params.temperature == 0 and params.top_k == 0 and params.top_p >= 1.0 and params.min_p == 0.0
        n = min(GREEDY_RUN, req.max_tokens - len(s.out))
        if not plain or params.stop or s.base or n < 2:
            return None
        got = self.fused.decode_greedy(s.all[-1], s.n_cached - s.base, self.rows.kv, n, req.stop_ids)
        if got is None:
            return None
        toks, lps = got
        s.n_cached += len(toks)
        self.counters.decode_forwards += len(toks)
        self.counters.decode_row_steps += len(toks)
        self.counters.decode_tokens += len(toks)
        return toks, lps

    def verify(self, ids: Tensor, seqs: list[Sequence], ragged: list[int] | None) -> Tensor:
        """ids [b, 1 + k]: each row's newest token and its drafts (the first ragged[i] real) -> logits [b, 1+k, V]."""
        b, t = ids.shape
        kv = self.rows.kv
        start = [s.n_cached - s.base for s in seqs]
        shared = self.rows.shared_prefix(seqs)
        logits = None
        if self.fused is not None and shared is None:  # the compiled kernel verifies a few rows' drafts in one pass
            logits = self.fused.forward_tokens(ids, start, ragged, kv)
        if logits is None:
            logits = self.model(ids, cache=kv.bind(slice(0, b), start, ragged, t, shared))  # [b, 1+k, V]
        self.counters.decode_forwards += 1
        self.counters.decode_row_steps += b
        return logits
