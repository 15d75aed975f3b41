"""`LocalEngine`'s speculative step: propose, verify in one target forward, accept, emit.

Covers: per row, up to k drafts (never past the token budget) from prompt lookup (carrying each row's
source alignment across steps) or the draft model; the target's verification forward
(engine/local/runner.py); the rejection rule of engine/local/spec_decode.py per (params, generator) group,
so the emitted tokens are distributed exactly as plain sampling (greedy: token-identical); every emitted
token's logprob in one gather; the acceptance counters. A step with nothing to propose is left to the
plain decode step.
Does not cover: the proposers and the rule themselves (engine/local/spec_decode.py), sliding windows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.engine.base import CompletionDelta
from posttrain.engine.local.counters import EngineCounters
from posttrain.engine.local.emit import Emitter
from posttrain.engine.local.runner import ModelRunner
from posttrain.engine.local.sampler import Sampler
from posttrain.engine.local.sequence import Sequence
from posttrain.engine.local.spec_decode import DraftProposer, SpecConfig, group_rows, lookup_propose, verify
from posttrain.engine.sampling import process_for


class Speculator:
    """One speculative decode step over the running rows."""

    def __init__(self, cfg: SpecConfig, draft: DraftProposer | None, runner: ModelRunner, sampler: Sampler,
                 emitter: Emitter, counters: EngineCounters, device: torch.device) -> None:
        self.cfg, self.draft, self.runner, self.sampler = cfg, draft, runner, sampler
        self.emitter, self.counters, self.device = emitter, counters, device

    def step(self, seqs: list[Sequence], deltas: list[CompletionDelta]) -> list[Sequence] | None:
        """-> the sequences this step finished, or None: nothing to propose, decode one plain token instead."""
        cfg = self.cfg
        ks = [max(0, min(cfg.k, s.request.max_tokens - len(s.out) - 1)) for s in seqs]
        if max(ks) == 0:
            return None
        props, srcs, q = self._propose(seqs, ks)
        k = max(len(p) for p in props)
        if k == 0:
            if self.draft is None and cfg.carry:  # one plain token: sources advance with it
                for s in seqs:
                    if s.lookup_at >= 0:
                        s.lookup_at += 1
            return None
        ids = torch.tensor([[s.all[-1], *p] + [0] * (k - len(p)) for s, p in zip(seqs, props)], device=self.device)
        n_valid = [len(p) + 1 for p in props]
        n_draft = torch.tensor(n_valid, device=self.device) - 1
        logits = self.runner.verify(ids, seqs, None if min(n_valid) == 1 + k else n_valid)
        n_acc, nxt, logp = self._verify(seqs, logits, ids, n_draft, q, k)
        return self._accept(seqs, props, srcs, n_acc, nxt, logp, k, deltas)

    def _propose(self, seqs: list[Sequence], ks: list[int]) -> tuple[list[list[int]], list[int] | None, Tensor | None]:
        """-> (each row's drafts, prompt lookup's source of each (None with a draft model), the draft model's
        probabilities [b, k, V] or None)."""
        cfg = self.cfg
        if self.draft is None:
            props, srcs = [], []
            for s, kk in zip(seqs, ks):
                p, src = (
                    lookup_propose(s.all, kk, cfg.ngram_max, cfg.ngram_min, s.lookup_at if cfg.carry else -1) if kk else ([], -1)
                )
                props.append(p)
                srcs.append(src)
            return props, srcs, None
        drafts_t, q = self.draft.propose(seqs, max(ks))
        return [drafts_t[i, : ks[i]].tolist() for i in range(len(seqs))], None, q

    def _verify(self, seqs: list[Sequence], logits: Tensor, ids: Tensor, n_draft: Tensor, q: Tensor | None,
                k: int) -> tuple[Tensor, Tensor, Tensor]:
        """-> (accepted drafts per row [b], the token after them [b], log-probabilities [b, 1+k, V])."""
        b, generator = len(seqs), self.sampler.generator
        groups = group_rows(seqs, self.device)
        if len(groups) == 1:  # one request (or one set of params): no per-group copies
            (params, gen), _ = next(iter(groups.items()))
            logp = torch.log_softmax(process_for(logits, params), -1)
            qs = None if q is None else q[:, :k]
            n_acc, nxt = verify(logp.exp(), ids[:, 1:], n_draft, qs, params.temperature == 0, gen or generator)
            return n_acc, nxt, logp
        n_acc = torch.empty(b, dtype=torch.long, device=self.device)
        nxt = torch.empty(b, dtype=torch.long, device=self.device)
        logp = torch.empty(logits.shape, dtype=torch.float32, device=self.device)
        for (params, gen), idx in groups.items():
            processed = process_for(logits[idx], params)
            logp[idx] = torch.log_softmax(processed, -1)
            qs = None if q is None else q[idx][:, :k]
            a, x = verify(logp[idx].exp(), ids[idx, 1:], n_draft[idx], qs, params.temperature == 0, gen or generator)
            n_acc[idx], nxt[idx] = a, x
        return n_acc, nxt, logp

    def _accept(self, seqs: list[Sequence], props: list[list[int]], srcs: list[int] | None, n_acc: Tensor, nxt: Tensor,
                logp: Tensor, k: int, deltas: list[CompletionDelta]) -> list[Sequence]:
        """Emit each row's accepted drafts and the token after them; move its cache lengths and lookup source."""
        b = len(seqs)
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
            elif srcs is not None and srcs[i] >= 0:  # the next token's source, as if what was emitted replaced what was read
                s.lookup_at = srcs[i] + 1 + a
            elif s.lookup_at >= 0:
                s.lookup_at += 1 + a
            self.counters.spec_proposed += len(props[i])
            self.counters.spec_accepted += a
            for t, lp in zip(toks[i], lps):
                emitted += 1
                if self.emitter.emit(s, t, lp, deltas):
                    finished.append(s)
                    break
        self.counters.decode_tokens += emitted
        return finished
