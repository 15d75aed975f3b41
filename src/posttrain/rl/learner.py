"""The learner: turns scored groups into one policy update.

Covers: packing trajectories' token views (`Trajectory.segments()`: one row
per append-only segment, each carrying its episode's advantage) into
right-padded batches with sampled-token masks and behaviour logprobs; the
clipped policy-gradient update with token-level (or other) aggregation,
optional k3 KL to a frozen reference, gradient clipping, warm-up, several
epochs / minibatches, gradient accumulation over micro-batches (the same
update as one pass, within float tolerance); truncated importance sampling
when the sampler is not the learner's own module; and train-inference
mismatch metrics (|learner logp - sampler logp|) on the first pass, before
any parameter moves.
Does not cover: distributed data parallelism or LoRA.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posttrain.config import RLConfig
from posttrain.models.llama import CausalLM
from posttrain.models.logprobs import token_logprobs
from posttrain.rl.losses import (
    aggregate_loss,
    clipped_policy_loss,
    k3_kl,
    loss_normalizer,
    truncated_importance_weights,
)
from posttrain.types import Group


@dataclass
class TrainBatch:
    input_ids: Tensor  # [B, T] token views, right-padded
    mask: Tensor  # [B, T-1] 1.0 where target t+1 is a sampled token of a trainable trajectory
    old_logp: Tensor  # [B, T-1] behaviour logprobs at those positions (0 elsewhere)
    advantages: Tensor  # [B] each row's episode advantage


def pack_groups(groups: list[Group], advantages: Tensor, valid: Tensor, pad_id: int) -> TrainBatch:
    """G groups of n trajectories (advantages, valid: [G, n]) -> a TrainBatch with one row per segment.

    A single-turn trajectory is one row; a trajectory whose history was
    rewritten contributes one row per segment, all with its advantage. Rows of
    trajectories that are not valid stay in the batch fully masked.
    """
    flat_adv = advantages.reshape(-1).float()
    flat_valid = valid.reshape(-1)
    views, row_adv, row_valid = [], [], []
    for i, t in enumerate(t for g in groups for t in g.trajectories):
        for view in t.segments():
            views.append(view)
            row_adv.append(flat_adv[i])
            row_valid.append(bool(flat_valid[i]))
    width = max(len(v) for v in views)
    b = len(views)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    mask = torch.zeros((b, width - 1))
    old = torch.zeros((b, width - 1))
    for i, v in enumerate(views):
        ids[i, : len(v)] = torch.tensor(v.ids)
        if row_valid[i] and len(v) > 1:
            mask[i, : len(v) - 1] = torch.tensor(v.mask[1:], dtype=torch.float)
            old[i, : len(v) - 1] = torch.tensor(v.logprobs[1:]) * mask[i, : len(v) - 1]
    return TrainBatch(ids, mask, old, torch.stack(row_adv) if row_adv else torch.zeros(0))


class Learner:
    """One policy's optimizer and update rule.

    `importance_sampling`: the sampler is not this module (a remote or
    reduced-precision engine, an older policy): the learner computes its own
    pre-update logprobs, clips against those and weights each token by the
    truncated ratio to the behaviour logprobs (`rl.tis_cap`). Off (the local
    engine shares this module), the behaviour logprobs are the old policy.
    """

    def __init__(
        self,
        model: CausalLM,
        cfg: RLConfig,
        max_tokens: int,
        temperature: float = 1.0,
        importance_sampling: bool = False,
    ) -> None:
        self.model = model
        self.cfg = cfg
        self.max_tokens = max_tokens
        self.temperature = temperature if temperature > 0 else 1.0
        self.importance_sampling = importance_sampling
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.ref_model: CausalLM | None = None
        if cfg.kl_beta > 0:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        self.updates = 0

    def _lr(self) -> float:
        if self.cfg.warmup_steps and self.updates < self.cfg.warmup_steps:
            return self.cfg.lr * (self.updates + 1) / self.cfg.warmup_steps
        return self.cfg.lr

    def _logp(self, model: CausalLM, ids: Tensor) -> tuple[Tensor, Tensor]:
        logits = model(ids)[:, :-1]  # [b, T-1, V]
        return logits, token_logprobs(logits, ids[:, 1:], self.temperature)  # [b, T-1]

    @torch.no_grad()
    def _learner_old(self, batch: TrainBatch) -> Tensor:
        """[B, T-1] the learner's own logprobs of the batch before any parameter moves."""
        out = torch.zeros_like(batch.old_logp)
        for rows in torch.arange(batch.input_ids.shape[0]).chunk(self.cfg.minibatches * self.cfg.micro_batches):
            out[rows] = self._logp(self.model, batch.input_ids[rows])[1]
        return out

    def update(self, batch: TrainBatch) -> dict[str, float]:
        self.model.train()
        cfg = self.cfg
        b = batch.input_ids.shape[0]
        behaviour = batch.old_logp
        old_policy = self._learner_old(batch) if self.importance_sampling else behaviour
        chunks = torch.arange(b).chunk(cfg.minibatches)
        sums: dict[str, float] = {}
        n_mb = 0
        mismatch_num = mismatch_den = mismatch_max = mismatch_kl = 0.0
        first = True
        for _ in range(cfg.epochs):
            for rows in chunks:
                mb_mask = batch.mask[rows]
                if mb_mask.sum() == 0:
                    continue
                norm = loss_normalizer(mb_mask, cfg.loss_agg, self.max_tokens)
                stats: dict[str, Any] = {"pg_loss": 0.0, "clip": 0.0, "tokens": 0.0, "entropy": 0.0, "kl": 0.0}
                self.optimizer.zero_grad(set_to_none=True)
                loss_total = 0.0
                for micro in rows.chunk(cfg.micro_batches):
                    mask = batch.mask[micro]
                    if mask.sum() == 0:
                        continue
                    ids = batch.input_ids[micro]
                    logits, logp = self._logp(self.model, ids)
                    old = old_policy[micro]
                    if first:  # before any parameter moved: sampler vs learner on identical tokens
                        diff = (logp.detach() - behaviour[micro]).abs() * mask
                        mismatch_num += float(diff.sum())
                        mismatch_den += float(mask.sum())
                        mismatch_max = max(mismatch_max, float(diff.max()))
                        # KL(sampler || learner) on the sampler's tokens, k3 estimator (>= 0)
                        mismatch_kl += float((k3_kl(behaviour[micro], logp.detach()) * mask).sum())
                    pg, clipped = clipped_policy_loss(logp, old, batch.advantages[micro], cfg.clip_low, cfg.clip_high)
                    if self.importance_sampling:
                        pg = pg * truncated_importance_weights(old, behaviour[micro], cfg.tis_cap)
                    loss = aggregate_loss(pg, mask, cfg.loss_agg, self.max_tokens, normalizer=norm)
                    stats["pg_loss"] += loss.item()
                    stats["clip"] += float((clipped.float() * mask).sum())
                    stats["tokens"] += float(mask.sum())
                    if self.ref_model is not None:
                        with torch.no_grad():
                            _, ref_logp = self._logp(self.ref_model, ids)
                        kl = aggregate_loss(k3_kl(logp, ref_logp), mask, cfg.loss_agg, self.max_tokens, normalizer=norm)
                        loss = loss + cfg.kl_beta * kl
                        stats["kl"] += kl.item()
                    with torch.no_grad():
                        logq = torch.log_softmax(logits.float() / self.temperature, -1)
                        ent = -(logq.exp() * logq).sum(-1)
                        stats["entropy"] += float((ent * mask).sum())
                    loss.backward()
                    loss_total += loss.item()
                first = False
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip))
                for group in self.optimizer.param_groups:
                    group["lr"] = self._lr()
                self.optimizer.step()
                self.updates += 1
                tokens = max(stats["tokens"], 1.0)
                step_stats = {"pg_loss": stats["pg_loss"], "clip_frac": stats["clip"] / tokens,
                              "entropy": stats["entropy"] / tokens, "grad_norm": grad_norm, "loss": loss_total}
                if self.ref_model is not None:
                    step_stats["kl"] = stats["kl"]
                for k, v in step_stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_mb += 1
        metrics = {k: v / max(n_mb, 1) for k, v in sums.items()}
        metrics.update(mismatch_mean=mismatch_num / mismatch_den if mismatch_den else 0.0, mismatch_max=mismatch_max,
                       mismatch_kl=mismatch_kl / mismatch_den if mismatch_den else 0.0,
                       lr=self._lr(), optimizer_steps=n_mb)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = state["updates"]
