"""The learner: turns scored groups into one policy update.

Covers: packing trajectories into right-padded token batches with
completion masks and behaviour logprobs; the clipped policy-gradient update
with token-level (or other) aggregation, optional k3 KL to a frozen
reference, gradient clipping, warm-up, several epochs / minibatches; and
train-inference mismatch metrics (|learner logp - sampler logp|) on the
first pass, before any parameter moves.
Does not cover: distributed data parallelism or LoRA.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor

from posttrain.config import RLConfig
from posttrain.models.llama import CausalLM
from posttrain.models.logprobs import token_logprobs
from posttrain.rl.losses import aggregate_loss, clipped_policy_loss, k3_kl
from posttrain.types import Group


@dataclass
class TrainBatch:
    input_ids: Tensor  # [B, T] prompt + completion, right-padded
    mask: Tensor  # [B, T-1] 1.0 where target t+1 is a completion token of a valid sample
    old_logp: Tensor  # [B, T-1] behaviour logprobs at those positions (0 elsewhere)
    advantages: Tensor  # [B]


def pack_groups(groups: list[Group], advantages: Tensor, valid: Tensor, pad_id: int) -> TrainBatch:
    """Flatten G groups of n trajectories (advantages, valid: [G, n]) into a TrainBatch of B = G * n rows."""
    trajs = [t for g in groups for t in g.trajectories]
    seqs = [t.prompt_ids + t.completion.token_ids for t in trajs]
    width = max(len(s) for s in seqs)
    b = len(seqs)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    mask = torch.zeros((b, width - 1))
    old = torch.zeros((b, width - 1))
    flat_valid = valid.reshape(-1)
    for i, (t, s) in enumerate(zip(trajs, seqs)):
        ids[i, : len(s)] = torch.tensor(s)
        p, c = len(t.prompt_ids), len(t.completion.token_ids)
        if c and bool(flat_valid[i]):
            mask[i, p - 1 : p - 1 + c] = 1.0
            old[i, p - 1 : p - 1 + c] = torch.tensor(t.completion.logprobs)
    return TrainBatch(ids, mask, old, advantages.reshape(-1).float())


class Learner:
    def __init__(self, model: CausalLM, cfg: RLConfig, max_tokens: int, temperature: float = 1.0) -> None:
        self.model = model
        self.cfg = cfg
        self.max_tokens = max_tokens
        self.temperature = temperature if temperature > 0 else 1.0
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.ref_model: CausalLM | None = None
        if cfg.kl_beta > 0:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        self.updates = 0

    def _lr(self) -> float:
        if self.cfg.warmup_steps and self.updates < self.cfg.warmup_steps:
            return self.cfg.lr * (self.updates + 1) / self.cfg.warmup_steps
        return self.cfg.lr

    def update(self, batch: TrainBatch) -> dict[str, float]:
        self.model.train()
        cfg = self.cfg
        b = batch.input_ids.shape[0]
        chunks = torch.arange(b).chunk(cfg.minibatches)
        sums: dict[str, float] = {}
        n_mb = 0
        mismatch_mean = mismatch_max = 0.0
        first = True
        for _ in range(cfg.epochs):
            for rows in chunks:
                ids, mask = batch.input_ids[rows], batch.mask[rows]
                if mask.sum() == 0:
                    continue
                logits = self.model(ids)[:, :-1]  # [b, T-1, V]
                logp = token_logprobs(logits, ids[:, 1:], self.temperature)  # [b, T-1]
                old = batch.old_logp[rows]
                if first:  # before any parameter moved: sampler vs learner on identical tokens
                    diff = (logp.detach() - old).abs() * mask
                    mismatch_mean = float(diff.sum() / mask.sum())
                    mismatch_max = float(diff.max())
                    first = False
                pg, clipped = clipped_policy_loss(logp, old, batch.advantages[rows], cfg.clip_low, cfg.clip_high)
                loss = aggregate_loss(pg, mask, cfg.loss_agg, self.max_tokens)
                stats = {"pg_loss": loss.item(), "clip_frac": float((clipped.float() * mask).sum() / mask.sum())}
                if self.ref_model is not None:
                    with torch.no_grad():
                        ref_logp = token_logprobs(self.ref_model(ids)[:, :-1], ids[:, 1:], self.temperature)
                    kl = aggregate_loss(k3_kl(logp, ref_logp), mask, cfg.loss_agg, self.max_tokens)
                    loss = loss + cfg.kl_beta * kl
                    stats["kl"] = kl.item()
                with torch.no_grad():
                    logq = torch.log_softmax(logits.float() / self.temperature, -1)
                    ent = -(logq.exp() * logq).sum(-1)
                    stats["entropy"] = float((ent * mask).sum() / mask.sum())
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip))
                for group in self.optimizer.param_groups:
                    group["lr"] = self._lr()
                self.optimizer.step()
                self.updates += 1
                stats["loss"] = loss.item()
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_mb += 1
        metrics = {k: v / max(n_mb, 1) for k, v in sums.items()}
        metrics.update(mismatch_mean=mismatch_mean, mismatch_max=mismatch_max, lr=self._lr(), optimizer_steps=n_mb)
        return metrics

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = state["updates"]
