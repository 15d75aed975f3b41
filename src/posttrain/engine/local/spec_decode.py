"""Exact speculative decoding: proposers and the rejection rule that keeps the target's distribution.

Covers: `SpecConfig`; the prompt-lookup proposer (the longest recent n-gram
match in the sequence's own tokens proposes what followed it: free, and
strong when the output copies the input), with the alignment carried over
a substitution (when no suffix matches, as right after a token that differs
from its source, keep reading the source where the last proposal left off:
an edit that changes a word does not lose its place in the text being
copied); the draft-model proposer (a smaller
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

from posttrain.engine.local.fused import FusedDecoder
from posttrain.engine.local.kv import SlotCache
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
    carry: bool = True  # prompt lookup: without a suffix match, continue from where the last proposal's source left off

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
    return lookup_propose(tokens, k, n_max, n_min, -1, horizon)[0]


def lookup_propose(
    tokens: list[int], k: int, n_max: int, n_min: int, carry: int = -1, horizon: int = 4096
) -> tuple[list[int], int]:
    """-> (up to k proposed tokens, the index in `tokens` they were read from, or -1).

    The longest suffix n-gram (n_max down to n_min) that occurred before proposes what followed its
    latest occurrence. Without a match, `carry` (an index into `tokens`, from the previous step's
    source advanced by the tokens emitted since) proposes tokens[carry:], so a substitution does
    not lose the alignment. Proposals depend on the history only, so verification stays exact.
    """
    L = len(tokens)
    lo = max(0, L - horizon)
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        pat = tokens[L - n :]
        first = pat[0]
        for i in range(L - n - 1, lo - 1, -1):
            if tokens[i] == first and tokens[i : i + n] == pat:
                return tokens[i + n : i + n + k], i + n
    if 0 <= carry < L:
        return tokens[carry : carry + k], carry
    return [], -1


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
    if q is None and p.numel() <= SMALL_VERIFY:
        return _verify_lookup_small(p, drafts, n_draft, greedy, generator)
    if k == 0:
        n_acc = torch.zeros(b, dtype=torch.long)
    else:
        in_range = torch.arange(k)[None, :] < n_draft[:, None]
        if greedy:
            ok = drafts == p[:, :k].argmax(-1)
        else:
            p_d = p[:, :k].gather(-1, drafts[..., None]).squeeze(-1)  # [b, K]
            u = torch.rand(p_d.shape, generator=generator)
            # accept with probability min(1, p/q): u < p/q, written without dividing by a zero q
            ok = u < p_d if q is None else u * q.gather(-1, drafts[..., None]).squeeze(-1) < p_d
        n_acc = (ok & in_range).cumprod(-1).sum(-1)  # accepted prefix length
    at = p[torch.arange(b), n_acc]  # [b, V] target distribution where the next token is drawn
    if greedy:
        return n_acc, at.argmax(-1)
    if k > 0:  # where a draft was rejected, draw from the residual max(p - q, 0) instead (multinomial normalises)
        rejected = (n_acc < n_draft)[:, None]
        d = drafts.gather(1, n_acc.clamp(max=k - 1)[:, None])  # the rejected draft token
        if q is None:  # a deterministic proposal: q is one-hot on the draft, the residual is p without it
            resid = at.scatter(1, d, 0.0)
        else:
            resid = (at - q[torch.arange(b), n_acc.clamp(max=k - 1)]).clamp(min=0.0)
            resid = torch.where(resid.sum(-1, keepdim=True) > 0, resid, at)  # p == q there: never rejected in exact arithmetic
        at = torch.where(rejected, resid, at)
    return n_acc, torch.multinomial(at, 1, generator=generator).squeeze(-1)


SMALL_VERIFY = 8192  # probabilities up to which a lookup verify runs in plain Python (a few rows x k x vocab)


def _verify_lookup_small(p: Tensor, drafts: Tensor, n_draft: Tensor, greedy: bool, generator) -> tuple[Tensor, Tensor]:
    """`verify` for deterministic proposals on a few rows, in plain Python: the same rule with two tensor
    ops instead of twenty (at batch 1 the per-op cost, not arithmetic, is what a verify step spends).

    Row i accepts draft j with probability p_j(d_j) (q is one-hot), stops at the first rejection, and then
    draws from p without the rejected token (the normalised residual), or from p at the position after
    the last draft when all were accepted; the draw is an inverse-CDF lookup with its own uniform.
    """
    P = p.tolist()
    D, N = drafts.tolist(), n_draft.tolist()
    b, k = len(P), len(P[0]) - 1 if P else 0
    U = None if greedy else torch.rand((b, k + 1), generator=generator, dtype=torch.float64).tolist()
    n_acc, nxt = [], []
    for i in range(b):
        rows, a = P[i], 0
        while a < N[i]:
            d = D[i][a]
            row = rows[a]
            if (d != max(range(len(row)), key=row.__getitem__)) if greedy else (U[i][a] >= row[d]):
                break
            a += 1
        row = rows[a]
        if greedy:
            x = max(range(len(row)), key=row.__getitem__)
        else:
            if a < N[i]:  # rejected: the residual of a one-hot proposal is p without the draft token
                row = list(row)
                row[D[i][a]] = 0.0
            x = _inverse_cdf(row, U[i][k])
        n_acc.append(a)
        nxt.append(x)
    return torch.tensor(n_acc), torch.tensor(nxt)


def _inverse_cdf(weights: list[float], u: float) -> int:
    """Index drawn with probability weights[j] / sum(weights), from one uniform u in [0, 1)."""
    target, acc, last = u * sum(weights), 0.0, 0
    for j, w in enumerate(weights):
        if w > 0.0:
            acc += w
            last = j
            if target < acc:
                return j
    return last  # rounding left target at the very top: the last token with mass


class DraftProposer:
    """Proposes with a small model whose slot cache mirrors the engine's running rows. Its forwards go
    through the compiled decode kernel where it applies (at batch 1 the PyTorch module's per-call overhead
    made a 0.86M draft cost 2 ms a token, more than a 10M target's kernel step); the model's forward else."""

    def __init__(self, model: CausalLM) -> None:
        self.model = model
        self.kv: SlotCache | None = None
        # the compiled kernel's view of the draft, or None: the PyTorch module proposes (set to None to force it)
        self.fused = FusedDecoder(model) if FusedDecoder.supports(model) else None

    def _forward(self, ids: Tensor, start: list[int], n_valid: list[int] | None) -> Tensor:
        """ids [b, t] at slots start[i].. (n_valid[i] real) -> logits of each row's last real token [b, V]."""
        b, t = ids.shape
        valid = n_valid or [t] * b
        if self.fused is not None:
            out = self.fused.forward_tokens(ids, start, n_valid, self.kv)
            if out is not None:
                return out[torch.arange(b), torch.tensor(valid) - 1]
        last = torch.tensor(valid)[:, None] - 1
        return self.model(ids, cache=self.kv.bind(slice(0, b), start, n_valid, t), logits_index=last)[:, 0]

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
        logits = self._forward(ids, start, None if min(n_valid) == t else n_valid)
        for s, n in zip(seqs, n_valid):
            s.draft_cached += n
        drafts, probs = [], []
        for j in range(k):
            tok, prob = _sample_groups(logits, seqs)
            drafts.append(tok)
            probs.append(prob)
            if j == k - 1:
                break
            logits = self._forward(tok[:, None], [s.draft_cached + j for s in seqs], None)
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


def group_rows(seqs: list, device: torch.device | None = None) -> dict:
    """(params, generator) -> row index tensor (on `device`), or None when one group covers every row."""
    groups: dict = {}
    for i, s in enumerate(seqs):
        groups.setdefault((s.request.params, s.request.generator), []).append(i)
    if len(groups) == 1:
        return {key: None for key in groups}
    return {key: torch.tensor(v, device=device) for key, v in groups.items()}
