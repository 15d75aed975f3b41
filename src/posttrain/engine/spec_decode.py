"""Exact speculative decoding: proposers and the rejection rule that keeps the target's distribution.

Covers: `SpecConfig`; the prompt-lookup proposer (the longest recent n-gram
match in the sequence's own tokens proposes what followed it: free, and
strong when the output copies the input); the draft-model proposer (a smaller
`CausalLM` with its own slot cache, caught up lazily on the tokens it has not
seen); and `verify`, the standard rule (Leviathan et al. 2023; Chen et al.
2023): accept draft d with probability min(1, p(d)/q(d)), on the first
rejection sample from norm(max(p - q, 0)), and after a full acceptance sample
a bonus token from p. The emitted tokens are then distributed exactly as plain
sampling from p; greedy accepts iff d == argmax p, so greedy output is
token-identical to plain decoding.
Does not cover: tree drafts, EAGLE/Medusa heads, sliding-window rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from posttrain.engine.kv import SlotCache
from posttrain.engine.sampling import choose, process_for
from posttrain.models.llama import CausalLM


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """How the engine speculates."""

    method: str = "ngram"  # "ngram" (prompt lookup) or "draft" (a draft model)
    k: int = 4  # tokens proposed per step
    ngram_max: int = 3  # longest suffix n-gram looked up
    ngram_min: int = 1  # shortest
    draft_model: CausalLM | None = None

    def __post_init__(self) -> None:
        if self.method not in ("ngram", "draft"):
            raise ValueError(f"speculative method must be 'ngram' or 'draft', got {self.method!r}")
        if self.k < 1:
            raise ValueError(f"speculative k must be >= 1, got {self.k}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min}, {self.ngram_max}")
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("speculative method 'draft' needs a draft_model")


def ngram_propose(tokens: list[int], k: int, n_max: int, n_min: int, horizon: int = 4096) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the longest matching suffix n-gram."""
    L = len(tokens)
    lo = max(0, L - horizon)
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        pat = tokens[L - n :]
        first = pat[0]
        for i in range(L - n - 1, lo - 1, -1):
            if tokens[i] == first and tokens[i : i + n] == pat:
                return tokens[i + n : i + n + k]
    return []


def verify(
    p: Tensor,  # [b, K+1, V] target probabilities (processed) at the fed positions
    drafts: Tensor,  # [b, K] proposed tokens (anything past n_draft)
    n_draft: Tensor,  # [b] proposals per row
    q: Tensor | None,  # [b, K, V] draft probabilities, or None for deterministic (prompt-lookup) proposals
    greedy: bool,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    """-> (accepted count [b], the token that follows the accepted drafts [b])."""
    b, kp1, _ = p.shape
    k = kp1 - 1
    rows = torch.arange(b)
    if k == 0:
        n_acc = torch.zeros(b, dtype=torch.long)
    else:
        p_d = p[:, :k].gather(-1, drafts[..., None]).squeeze(-1)  # [b, K]
        if greedy:
            ok = drafts == p[:, :k].argmax(-1)
        else:
            q_d = torch.ones_like(p_d) if q is None else q.gather(-1, drafts[..., None]).squeeze(-1)
            u = torch.rand(p_d.shape, generator=generator)
            ok = u * q_d < p_d  # u < p/q without dividing by a zero q
        ok &= torch.arange(k)[None, :] < n_draft[:, None]
        n_acc = ok.long().cumprod(-1).sum(-1)  # accepted prefix length
    at = p[rows, n_acc]  # [b, V] target distribution where the next token is drawn
    if greedy:
        return n_acc, at.argmax(-1)
    rejected = n_acc < n_draft
    final = at.clone()
    if bool(rejected.any()):
        r = rejected.nonzero().squeeze(-1)
        d = drafts[r, n_acc[r]]
        if q is None:
            resid = final[r].scatter(-1, d[:, None], 0.0)
        else:
            resid = (final[r] - q[r, n_acc[r]]).clamp(min=0.0)
        mass = resid.sum(-1, keepdim=True)
        final[r] = torch.where(mass > 0, resid / mass.clamp(min=1e-30), final[r])
    return n_acc, torch.multinomial(final, 1, generator=generator).squeeze(-1)


class DraftProposer:
    """Proposes with a small model whose slot cache mirrors the engine's running rows."""

    def __init__(self, model: CausalLM) -> None:
        self.model = model
        self.kv: SlotCache | None = None

    def ensure(self, rows: int, slots: int) -> None:
        if self.kv is None:
            self.kv = SlotCache(self.model.config, rows, slots, dtype=next(self.model.parameters()).dtype)
        else:
            self.kv.grow(rows, slots)

    def move_row(self, src: int, dst: int, n: int) -> None:
        self.kv.copy_rows(self.kv, [src], [dst], n)

    def propose(self, seqs: list, k: int) -> tuple[Tensor, Tensor]:
        """-> (drafts [b, k], draft probabilities [b, k, V]) for the running rows 0..b-1.

        Each sequence's `draft_cached` (tokens whose KV the draft holds) moves
        to cover every token but the last proposal.
        """
        b = len(seqs)
        pending = [s.all[s.draft_cached :] for s in seqs]
        t = max(len(x) for x in pending)
        ids = torch.zeros((b, t), dtype=torch.long)
        for i, x in enumerate(pending):
            ids[i, : len(x)] = torch.tensor(x)
        n_valid = [len(x) for x in pending]
        start = [s.draft_cached for s in seqs]
        last = torch.tensor(n_valid)[:, None] - 1
        cache = self.kv.bind(slice(0, b), start, None if min(n_valid) == t else n_valid, t)
        logits = self.model(ids, cache=cache, logits_index=last)[:, 0]
        for s, n in zip(seqs, n_valid):
            s.draft_cached += n
        drafts, probs = [], []
        for j in range(k):
            tok, prob = _sample_groups(logits, seqs)
            drafts.append(tok)
            probs.append(prob)
            if j == k - 1:
                break
            cache = self.kv.bind(slice(0, b), [s.draft_cached + j for s in seqs], None, 1)
            logits = self.model(tok[:, None], cache=cache)[:, 0]
        return torch.stack(drafts, 1), torch.stack(probs, 1)


def _sample_groups(logits: Tensor, seqs: list) -> tuple[Tensor, Tensor]:
    """Sample one token per row with each request's params and generator -> (tokens [b], probs [b, V])."""
    out = torch.empty(logits.shape[0], dtype=torch.long)
    probs = torch.empty(logits.shape, dtype=torch.float32)
    for (params, gen), idx in group_rows(seqs).items():
        sel = logits if idx is None else logits[idx]
        processed = process_for(sel, params)
        tok = choose(processed, params.temperature == 0, gen)
        pr = torch.softmax(processed, -1)
        if idx is None:
            return tok, pr
        out[idx], probs[idx] = tok, pr
    return out, probs


def group_rows(seqs: list) -> dict:
    """(params, generator) -> row index tensor, or None when one group covers every row."""
    groups: dict = {}
    for i, s in enumerate(seqs):
        groups.setdefault((s.request.params, s.request.generator), []).append(i)
    if len(groups) == 1:
        return {key: None for key in groups}
    return {key: torch.tensor(v) for key, v in groups.items()}
