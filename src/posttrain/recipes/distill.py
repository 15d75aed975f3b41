"""Distil a draft model for speculative decoding from the model it will draft for.

Covers: `distill_draft`, which samples continuations from the target model (the
local engine, batched, at the temperature it will serve at) and trains a small
draft on the target's whole next-token distributions along those continuations
(forward KL on the completion positions, target logits computed on the fly with
no gradient); and `acceptance`, the figures that predict what speculation gains:
the expected acceptance of one proposed token, E[sum_x min(p(x), q(x))] (Leviathan
et al., 2023: exactly the acceptance probability of speculative sampling), and
the greedy agreement rate (how often argmax q = argmax p), both measured on
held-out continuations of the target. The draft shares the target's tokenizer.
Does not cover: the proposer and the exact accept/reject rule
(engine/local/spec_decode.py), tree drafts or EAGLE-style heads, choosing the
draft's size (the caller builds it, or starts it from a smaller checkpoint).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posttrain.engine.local.engine import LocalEngine
from posttrain.models.batch import pad_rows
from posttrain.models.llama import CausalLM
from posttrain.models.tokenizer import Tokenizer
from posttrain.types import SamplingParams


@dataclass(frozen=True)
class DistillConfig:
    """How a draft is distilled. `temperature`: the target samples the training continuations at it, and
    the KL is taken between both models' distributions at it (serve at it for the measured acceptance)."""

    steps: int = 300
    batch_size: int = 64
    lr: float = 1e-3
    temperature: float = 1.0
    max_new_tokens: int = 64
    samples_per_prompt: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.max_new_tokens < 1 or self.samples_per_prompt < 1:
            raise ValueError("steps, batch_size, max_new_tokens and samples_per_prompt must be >= 1")
        if not (self.lr > 0 and self.temperature > 0):
            raise ValueError("lr and temperature must be > 0")


@dataclass(frozen=True)
class Acceptance:
    """How well a draft predicts its target on a set of target continuations (completion positions only)."""

    expected: float  # mean over positions of sum_x min(p(x), q(x)) at the distillation temperature
    greedy: float  # share of positions where argmax q equals argmax p
    kl: float  # mean KL(p || q) in nats
    positions: int


@dataclass(frozen=True)
class DistillReport:
    before: Acceptance
    after: Acceptance
    steps: int
    sequences: int  # target continuations trained on
    sample_seconds: float  # sampling the target's continuations
    train_seconds: float


@dataclass(frozen=True)
class Continuations:
    """Right-padded token ids [B, T] and the weight of each next-token position [B, T-1] (1 on completion)."""

    ids: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return self.ids.shape[0]

    def rows(self, index: torch.Tensor) -> "Continuations":
        return Continuations(self.ids[index], self.mask[index])


def sample_continuations(target: CausalLM, tokenizer: Tokenizer, prompts: Sequence[str], temperature: float,
                         max_new_tokens: int, n: int = 1, seed: int = 0) -> Continuations:
    """The target's own continuations of `prompts` (n each), through the local engine, as training rows."""
    engine = LocalEngine(target, tokenizer, seed=seed)
    params = SamplingParams(n=n, temperature=temperature, max_tokens=max_new_tokens, seed=seed)
    groups = engine.generate(list(prompts), params)
    rows, weights = [], []
    for prompt, group in zip(prompts, groups, strict=True):
        p = tokenizer.encode(prompt)
        for c in group:
            rows.append(p + list(c.token_ids))
            weights.append([0.0] * (len(p) - 1) + [1.0] * len(c.token_ids))
    ids, mask = pad_rows(rows, weights, tokenizer.pad_id)
    return Continuations(ids, mask)


def _log_probs(model: CausalLM, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    return F.log_softmax(model(ids)[:, :-1].float() / temperature, dim=-1)


@torch.no_grad()
def acceptance(target: CausalLM, draft: CausalLM, data: Continuations, temperature: float = 1.0,
               batch_size: int = 64) -> Acceptance:
    """The draft's expected acceptance, greedy agreement and KL against the target on `data`."""
    total = agree = kl = 0.0
    positions = 0.0
    for lo in range(0, len(data), batch_size):
        part = data.rows(torch.arange(lo, min(lo + batch_size, len(data))))
        lp, lq = _log_probs(target, part.ids, temperature), _log_probs(draft, part.ids, temperature)
        w = part.mask
        total += float((torch.minimum(lp.exp(), lq.exp()).sum(-1) * w).sum())
        agree += float(((lp.argmax(-1) == lq.argmax(-1)).float() * w).sum())
        kl += float(((lp.exp() * (lp - lq)).sum(-1) * w).sum())
        positions += float(w.sum())
    if positions == 0:
        raise ValueError("no completion positions to measure acceptance on")
    return Acceptance(total / positions, agree / positions, kl / positions, int(positions))


def distill_draft(
    target: CausalLM,
    draft: CausalLM,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    held_out_prompts: Sequence[str],
    cfg: DistillConfig = DistillConfig(),
    on_step: Callable[[int, float], None] | None = None,
) -> DistillReport:
    """Train `draft` (in place) towards `target` on the target's continuations of `prompts`; measure its
    acceptance before and after on the target's continuations of `held_out_prompts`. `on_step(step, loss)`
    is called after every update."""
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"the draft's vocabulary ({draft.config.vocab_size}) is not the target's "
                         f"({target.config.vocab_size}): a draft must share its target's tokenizer")
    if not prompts or not held_out_prompts:
        raise ValueError("distillation needs training prompts and held-out prompts")
    was_training = target.training
    target.eval()
    t0 = time.perf_counter()
    train = sample_continuations(target, tokenizer, prompts, cfg.temperature, cfg.max_new_tokens,
                                 cfg.samples_per_prompt, cfg.seed)
    held = sample_continuations(target, tokenizer, held_out_prompts, cfg.temperature, cfg.max_new_tokens, 1, cfg.seed + 1)
    sample_seconds = time.perf_counter() - t0
    before = acceptance(target, draft, held, cfg.temperature)
    t1 = time.perf_counter()
    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
    rng = random.Random(cfg.seed)
    order: list[int] = []
    draft.train()
    for step in range(1, cfg.steps + 1):
        if len(order) < cfg.batch_size:  # epochs over the continuations, each in a fresh order
            more = list(range(len(train)))
            rng.shuffle(more)
            order += more
        pick, order = order[: cfg.batch_size], order[cfg.batch_size :]
        part = train.rows(torch.tensor(pick))
        with torch.no_grad():
            lp = _log_probs(target, part.ids, cfg.temperature)
        lq = _log_probs(draft, part.ids, cfg.temperature)
        per_pos = (lp.exp() * (lp - lq)).sum(-1)  # KL(p || q) at each position
        loss = (per_pos * part.mask).sum() / part.mask.sum().clamp(min=1.0)
        lr = cfg.lr * min(1.0, step / 20) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))  # warm-up, cosine
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if on_step is not None:
            on_step(step, float(loss.detach()))
    draft.eval()
    target.train(was_training)
    train_seconds = time.perf_counter() - t1
    after = acceptance(target, draft, held, cfg.temperature)
    return DistillReport(before, after, cfg.steps, len(train), sample_seconds, train_seconds)
