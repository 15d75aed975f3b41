"""Log-probabilities of chosen tokens: the one function sampler and learner share.

Covers: per-token logprobs under a temperature-scaled distribution, for a
batch of already-computed logits, and for whole padded sequences;
`chunked_logprobs`, the learner's: the vocabulary projection, log-softmax and
gather (and, optionally, the entropy) run over `chunk` target positions at a
time, so the full [T, V] logits never exist: peak memory O(chunk x V), and in
the backward pass each chunk's logits are recomputed from its hidden states
(activation checkpointing of the head). Per position the arithmetic is the
same as the unchunked path's (in fp32 bit for bit, tests/models/test_logprobs.py).
`shared_prefix_logprobs`: the same at selected positions, with each group's
shared prefix run once (prefix trees, `models/prefix_tree.py`).
Also `logprob_mismatch`: the train-inference gap (mean and max |delta log p|
over real tokens) between sampler and learner logprobs of the same tokens.
Does not cover: top-p/top-k renormalisation (the engine applies those to
sampling and reports the processed distribution's logprobs itself).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.models.llama import CausalLM
from posttrain.models.prefix_tree import PrefixTrees, prefix_trees

DEFAULT_CHUNK = 256  # target positions per vocabulary projection: 256 x 151936 fp32 logits = 156 MB


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """logits [..., V], targets [...] -> log p(target) [...] under softmax(logits / temperature)."""
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def sequence_logprobs(
    model: CausalLM,
    input_ids: Tensor,  # [B, T] right-padded
    temperature: float = 1.0,
) -> Tensor:
    """log p(input_ids[:, t] | input_ids[:, :t]) for t >= 1 -> [B, T-1].

    Right padding sits after every real token, so a plain causal forward gives
    the real tokens exactly what a padded-free forward would.
    """
    logits = model(input_ids)  # [B, T, V]
    return token_logprobs(logits[:, :-1], input_ids[:, 1:], temperature)


def chunked_logprobs(
    model: torch.nn.Module,  # a CausalLM, or a wrapper (DDP, FSDP) whose forward is one
    input_ids: Tensor,  # [B, T]
    temperature: float = 1.0,
    chunk: int = DEFAULT_CHUNK,
    *,
    position_ids: Tensor | None = None,
    segment_ids: Tensor | None = None,
    entropy: bool = False,
    head: torch.nn.Module | None = None,
) -> tuple[Tensor, Tensor | None]:
    """log p(input_ids[:, t] | input_ids[:, :t]) for t >= 1 -> ([B, T-1], entropy [B, T-1] or None).

    `chunk` target positions (over the flattened batch) are projected at a time; with gradients on, each
    chunk is checkpointed, so backward keeps only the [T, H] hidden states, not the [T, V] logits. The
    entropy (of the temperature-scaled distribution) carries no gradient. `model` may be a wrapper whose
    `forward` is the native model's (DDP, FSDP); `head` is then the native model's `lm_head`.
    """
    if chunk < 1:
        raise ValueError(f"logprob chunk must be >= 1, got {chunk}")
    h = model(input_ids, position_ids, segment_ids=segment_ids, return_hidden=True)[:, :-1]  # [B, T-1, H]
    b, t, d = h.shape
    head = head if head is not None else model.lm_head
    logp, ent = _project(h.reshape(b * t, d), input_ids[:, 1:].reshape(b * t), head, temperature, chunk, entropy)
    return logp.view(b, t), (ent.view(b, t) if ent is not None else None)


def shared_prefix_logprobs(
    model: torch.nn.Module,  # a CausalLM, or a wrapper (DDP, FSDP) whose forward is one
    input_ids: Tensor,  # [B, T] right-padded
    lengths: Tensor,  # [B] real tokens per row
    groups: Tensor,  # [B] the group of each row: rows of one group share their longest common prefix
    mask: Tensor,  # [B, T-1] the targets wanted (the others come back 0)
    temperature: float = 1.0,
    chunk: int = DEFAULT_CHUNK,
    *,
    entropy: bool = False,
    head: torch.nn.Module | None = None,
    trees: PrefixTrees | None = None,
) -> tuple[Tensor, Tensor | None]:
    """`chunked_logprobs` at the positions `mask` selects, with each group's shared prefix run once
    (`models/prefix_tree.py`): the GRPO learner's n completions of one prompt cost the prompt once.
    Equal to `chunked_logprobs` there within float tolerance (tests/models/test_logprobs.py), gradients
    included (the shared prefix's states gather every branch's); 0 (and entropy 0) elsewhere."""
    if chunk < 1:
        raise ValueError(f"logprob chunk must be >= 1, got {chunk}")
    trees = trees or prefix_trees(input_ids, lengths, groups, mask)
    h = model(trees.ids, trees.positions, branch_ids=trees.branches, return_hidden=True)  # [G, W, H]
    # the state that predicts each target [N, H]; index_select, not h[context]: a state shared by several branches
    # gathers their gradients, and indexing's backward (index_put with accumulate) adds them in an order that
    # varies from run to run with 2+ threads on a busy CPU; index_select's backward (index_add) does not
    flat = h.reshape(-1, h.shape[-1]).index_select(0, trees.context)
    lp, ent = _project(flat, trees.targets, head if head is not None else model.lm_head, temperature, chunk, entropy)
    b, t = mask.shape
    logp = lp.new_zeros(b, t).index_put((trees.rows, trees.cols), lp)
    ents = ent.new_zeros(b, t).index_put((trees.rows, trees.cols), ent) if ent is not None else None
    return logp, ents


def _project(flat_h: Tensor, flat_t: Tensor, head: torch.nn.Module, temperature: float, chunk: int,
             entropy: bool) -> tuple[Tensor, Tensor | None]:
    """Hidden states [N, H] and their targets [N] -> (log p [N], entropy [N] or None), `chunk` at a time;
    with gradients on, each chunk's logits are recomputed in backward instead of kept."""

    def piece(hc: Tensor, tc: Tensor) -> tuple[Tensor, Tensor]:
        logits = head(hc)
        logp = token_logprobs(logits, tc, temperature)
        if not entropy:
            return logp, logp.new_zeros(())
        with torch.no_grad():
            scaled = logits.float() / temperature if temperature > 0 and temperature != 1.0 else logits.float()
            logq = torch.log_softmax(scaled, -1)
            return logp, -(logq.exp() * logq).sum(-1)

    n = flat_h.shape[0]
    recompute = torch.is_grad_enabled() and n > chunk
    logps, ents = [], []
    for start in range(0, n, chunk):
        hc, tc = flat_h[start : start + chunk], flat_t[start : start + chunk]
        if recompute:
            from torch.utils.checkpoint import checkpoint

            lp, ent = checkpoint(piece, hc, tc, use_reentrant=False)
        else:
            lp, ent = piece(hc, tc)
        logps.append(lp)
        ents.append(ent)
    if not logps:
        return flat_h.new_zeros(0), (flat_h.new_zeros(0) if entropy else None)
    return torch.cat(logps), (torch.cat(ents) if entropy else None)


def logprob_mismatch(sampler_logp: Tensor, learner_logp: Tensor, mask: Tensor) -> tuple[float, float]:
    """Mean and max |learner - sampler| log p over tokens where `mask` is set (all [B, T]); (0, 0) when none."""
    m = mask.bool()
    if not bool(m.any()):
        return 0.0, 0.0
    diff = (learner_logp.float() - sampler_logp.float()).abs()[m]
    return float(diff.mean()), float(diff.max())
