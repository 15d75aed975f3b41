"""The learner: turns a batch of scored token rows into one policy update.

Covers: the update as a loop of typed steps: `rl.epochs` passes over `rl.minibatches` minibatches, each one
optimizer step whose gradients accumulate over `rl.micro_batches` micro-steps (`Learner.micro_step`: one
`MicroBatch` in, its `MicroStats` out; the same update as one pass, within float tolerance). The loss is the
clipped policy gradient with token-level (or other) aggregation, optional k3 KL to a frozen reference, gradient
clipping, warm-up and a schedule; truncated importance sampling when the sampler is not the learner's own
module; train-inference mismatch metrics (|learner logp - sampler logp|, `Mismatch`) on the first minibatch,
before any parameter moves. How processes combine is the `Reducer` passed in (`rl/reducer.py`: the identity in
one process). Memory and precision (`[rl]`): logprobs in chunks of `logprob_chunk` positions (never the full
[T, V] logits), `device`, `dtype` (bf16 autocast over fp32 master weights), activation checkpointing,
`packing` (`train_batch.pack_rows`) in place of padding, and `share_prefix` (each group's rows as one prefix
tree where that costs fewer FLOPs than the padded rows).
Does not cover: building the batch (`rl/train_batch.py`), data parallelism (`distributed/learner.py` wraps the
model and passes its all-reducing reducer), building LoRA adapters (models/lora.py: the learner then trains only
the parameters that require grad).
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import astuple, dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from posttrain.config import RLConfig
from posttrain.models.llama import CausalLM
from posttrain.models.logprobs import chunked_logprobs, shared_prefix_logprobs
from posttrain.models.prefix_tree import PrefixTrees, layout_costs, prefix_trees
from posttrain.rl.losses import (
    aggregate_loss,
    clipped_policy_loss,
    k3_kl,
    loss_normalizer,
    truncated_importance_weights,
)
from posttrain.rl.reducer import IdentityReducer, Reducer
from posttrain.rl.train_batch import TokenValues, TrainBatch, pack_rows, unpack_rows


@dataclass(frozen=True)
class MicroBatch:
    """One micro-step's input: this process's rows of a minibatch and what its loss compares against."""

    rows: TrainBatch  # [b, T] this process's rows
    old: Tensor  # [b, T-1] the old policy's logprobs: the clip's reference
    behaviour: Tensor  # [b, T-1] the sampler's logprobs
    normalizer: Tensor  # 0-d: the whole minibatch's loss denominator (`loss_normalizer`), on every process


@dataclass
class MicroStats:
    """Sums over the sampled tokens of a micro-step's rows; added up over a minibatch, then over the processes."""

    pg_loss: float = 0.0  # the aggregated policy-gradient loss
    clip: float = 0.0  # clipped tokens
    tokens: float = 0.0  # sampled tokens
    kl: float = 0.0  # the aggregated KL to the reference (0 without one)
    entropy: float = 0.0  # the policy's entropy, summed over sampled tokens
    loss: float = 0.0  # what was back-propagated: pg_loss + kl_beta x kl

    def add(self, other: "MicroStats") -> None:
        self.pg_loss += other.pg_loss
        self.clip += other.clip
        self.tokens += other.tokens
        self.kl += other.kl
        self.entropy += other.entropy
        self.loss += other.loss


@dataclass
class Mismatch:
    """Sampler vs learner on identical tokens, before any parameter moved: sums and the largest gap."""

    num: float = 0.0  # sum of |learner logp - sampler logp| over sampled tokens
    den: float = 0.0  # sampled tokens
    largest: float = 0.0
    kl: float = 0.0  # sum of KL(sampler || learner), k3 estimator (>= 0)

    def observe(self, logp: Tensor, behaviour: Tensor, mask: Tensor) -> None:
        diff = (logp - behaviour).abs() * mask
        self.num += float(diff.sum())
        self.den += float(mask.sum())
        self.largest = max(self.largest, float(diff.max()) if diff.numel() else 0.0)
        self.kl += float((k3_kl(behaviour, logp) * mask).sum())


@dataclass
class TokenKeeper:
    """The per-token values an update keeps for the run store (`Learner.record_tokens`): the pre-update logprobs
    (the importance-sampling pass's when it ran, else the first minibatch's forward, as the mismatch metrics)
    and the first epoch's entropies; NaN where none was computed."""

    logp: Tensor  # [B, T-1] of the prepared batch
    entropy: Tensor  # [B, T-1]
    from_forward: bool  # logp comes from the first minibatch's forward (no importance-sampling pass)

    @classmethod
    def start(cls, old_policy: Tensor, importance_sampling: bool) -> TokenKeeper:
        nan = torch.full_like(old_policy, math.nan)
        return cls(old_policy.clone() if importance_sampling else nan.clone(), nan, not importance_sampling)

    def observer(self, rows: Tensor, first: bool) -> Callable[[Tensor, Tensor], None]:
        def seen(logp: Tensor, ent: Tensor) -> None:
            self.entropy[rows] = ent.float()
            if first and self.from_forward:
                self.logp[rows] = logp
        return seen

    def values(self, given: TrainBatch, batch: TrainBatch) -> TokenValues:
        """The kept values in the rows of the batch `update` was given (packed here: unpacked back)."""
        values = TokenValues(self.logp.cpu(), self.entropy.cpu())
        if batch.segment_ids is not None and given.segment_ids is None:
            assert given.lengths is not None
            width = batch.input_ids.shape[1]
            values = TokenValues(unpack_rows(values.logp, given.lengths, width),
                                 unpack_rows(values.entropy, given.lengths, width))
        return values


def scheduled_lr(lr: float, update: int, warmup: int, schedule: str, total: int | None, min_ratio: float) -> float:
    """The learning rate of optimizer step `update` (0-based): linear warm-up over `warmup` steps, then
    constant, or a cosine / linear decay from lr to lr x min_ratio at step `total` - 1 (constant when the
    total is unknown)."""
    if warmup and update < warmup:
        return lr * (update + 1) / warmup
    if schedule == "constant" or not total or total - 1 <= warmup:
        return lr
    progress = min(1.0, (update - warmup) / (total - 1 - warmup))
    shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress
    return lr * (min_ratio + (1.0 - min_ratio) * shape)


class Learner:
    """One policy's optimizer and update rule.

    `importance_sampling`: the sampler is not this module (a remote or
    reduced-precision engine, an older policy): the learner computes its own
    pre-update logprobs, clips against those and weights each token by the
    truncated ratio to the behaviour logprobs (`rl.tis_cap`). Off (the local
    engine shares this module), the behaviour logprobs are the old policy.
    `reducer`: how the processes sharing each update combine (`IdentityReducer`: this process alone).
    """

    def __init__(
        self,
        model: CausalLM,
        cfg: RLConfig,
        max_tokens: int,
        temperature: float = 1.0,
        importance_sampling: bool = False,
        total_updates: int | None = None,
        reducer: Reducer | None = None,
    ) -> None:
        self.model = model
        self.reducer: Reducer = reducer or IdentityReducer()
        self.cfg = cfg
        self.max_tokens = max_tokens
        self.temperature = temperature if temperature > 0 else 1.0
        self.importance_sampling = importance_sampling
        self.device = torch.device(cfg.device)
        model.to(self.device)
        model.gradient_checkpointing = cfg.activation_checkpointing
        # only what requires grad trains: every weight, or the LoRA adapters (models/lora.py freezes the rest)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._per_token = sum(p.numel() for layer in model.model.layers for p in layer.parameters())  # linear FLOPs / 2
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.ref_model: CausalLM | None = None
        if cfg.kl_beta > 0:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        self.updates = 0
        self.total_updates = total_updates
        # what the policy's forward goes through: the model, or a DDP / FSDP wrapper (posttrain/distributed/)
        self.forward_module: torch.nn.Module = model
        # keep the first pass's per-token logprobs and entropies (already computed for the loss and the mismatch
        # metrics) in `token_values` after each update: the trainer stores them with the step's samples
        self.record_tokens = False
        self.token_values: TokenValues | None = None

    def _lr(self) -> float:
        return scheduled_lr(self.cfg.lr, self.updates, self.cfg.warmup_steps, self.cfg.lr_schedule,
                            self.total_updates, self.cfg.lr_min_ratio)

    def _precision(self) -> contextlib.AbstractContextManager[Any]:
        if self.cfg.dtype == "bf16":  # fp32 master weights; matmuls in bf16
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _logp(self, batch: TrainBatch, entropy: bool = False, reference: bool = False) -> tuple[Tensor, Tensor | None]:
        """([b, T-1] logprobs of each target, its entropy when asked), `logprob_chunk` positions at a time;
        with `rl.share_prefix`, each group's shared prefix runs once where that costs fewer FLOPs (then only
        the masked targets are computed: the others are 0, which every use multiplies by the mask)."""
        model, head = (self.ref_model, self.ref_model.lm_head) if reference and self.ref_model is not None else (
            self.forward_module, self.model.lm_head)
        trees = self._prefix_trees(batch)
        if trees is not None:
            assert batch.lengths is not None and batch.groups is not None  # `_prefix_trees` needs both
            with self._precision():
                logp, ent = shared_prefix_logprobs(model, batch.input_ids, batch.lengths, batch.groups, batch.mask,
                                                   self.temperature, self.cfg.logprob_chunk, entropy=entropy, head=head,
                                                   trees=trees)
            return logp.float(), ent
        with self._precision():
            logp, ent = chunked_logprobs(model, batch.input_ids, self.temperature, self.cfg.logprob_chunk,
                                         position_ids=batch.position_ids, segment_ids=batch.segment_ids, entropy=entropy,
                                         head=head)
        return logp.float(), ent

    def _prefix_trees(self, batch: TrainBatch) -> PrefixTrees | None:
        """The batch's prefix trees when `rl.share_prefix` is on, its rows carry their groups (and are not
        packed), and the trees' forward costs fewer FLOPs than the padded rows'; None otherwise."""
        if not self.cfg.share_prefix or batch.groups is None or batch.lengths is None or batch.segment_ids is not None:
            return None
        if batch.mask.sum() == 0:
            return None
        trees = prefix_trees(batch.input_ids, batch.lengths, batch.groups, batch.mask)
        c = self.model.config
        flat, tree = layout_costs(batch.lengths, trees.widths, self._per_token, c.hidden_size,
                                  c.num_hidden_layers)
        head = 2.0 * c.vocab_size * c.hidden_size  # the vocabulary projection: every position, or the targets only
        flat += head * batch.mask.numel()
        tree += head * trees.targets.numel()
        return trees if tree < flat else None

    @torch.no_grad()
    def _learner_old(self, batch: TrainBatch) -> Tensor:
        """[B, T-1] the learner's own logprobs of the batch before any parameter moves."""
        out = torch.zeros_like(batch.old_logp)
        for rows in torch.arange(batch.input_ids.shape[0]).chunk(self.cfg.minibatches * self.cfg.micro_batches):
            out[rows] = self._logp(batch.rows(rows))[0]
        return out

    def prepare(self, batch: TrainBatch) -> TrainBatch:
        """The batch as `update` trains on it: on the learner's device, packed when `rl.packing`."""
        if self.cfg.packing and batch.segment_ids is None:
            batch = pack_rows(batch, self.cfg.pack_tokens)
        return batch.to(self.device)

    def update(self, batch: TrainBatch) -> dict[str, float]:
        """One policy update: `rl.epochs` passes over the batch's `rl.minibatches` minibatches, one optimizer
        step each (a minibatch without a sampled token is skipped); metrics are the steps' means, and the
        sampler-learner mismatch is measured on the first step's micro-batches, before any parameter moves."""
        self.model.train()
        given, batch = batch, self.prepare(batch)
        old_policy = self._learner_old(batch) if self.importance_sampling else batch.old_logp
        mismatch = Mismatch()
        keeper = TokenKeeper.start(old_policy, self.importance_sampling) if self.record_tokens else None
        steps: list[dict[str, float]] = []
        for epoch in range(self.cfg.epochs):
            for rows in torch.arange(batch.input_ids.shape[0]).chunk(self.cfg.minibatches):
                if batch.mask[rows].sum() == 0:
                    continue
                steps.append(self.minibatch_step(batch, old_policy, rows, mismatch if not steps else None,
                                                 keeper if epoch == 0 else None))
        self.token_values = keeper.values(given, batch) if keeper is not None else None
        return self._metrics(steps, mismatch)

    def minibatch_step(self, batch: TrainBatch, old_policy: Tensor, rows: Tensor, mismatch: Mismatch | None,
                       keeper: TokenKeeper | None = None) -> dict[str, float]:
        """One optimizer step over the minibatch `rows` ([r] indices into `batch`): its micro-steps' gradients
        accumulated, the per-process sums reduced, the gradients clipped and applied -> the step's metrics.
        `keeper` (first epoch only) keeps the forwards' per-token values; `mismatch` is given on the first step."""
        normalizer = loss_normalizer(batch.mask[rows], self.cfg.loss_agg, self.max_tokens)
        self.optimizer.zero_grad(set_to_none=True)
        stats = MicroStats()
        for whole in rows.chunk(self.cfg.micro_batches):
            if batch.mask[whole].sum() == 0:  # every process sees the whole batch: they all skip together
                continue
            mine = self.reducer.local_rows(whole)
            micro = MicroBatch(batch.rows(mine), old_policy[mine], batch.old_logp[mine], normalizer)
            seen = None if keeper is None else keeper.observer(mine, first=mismatch is not None)
            stats.add(self.micro_step(micro, mismatch, seen))
        grad_norm = self.clip_gradients()
        stats = MicroStats(*self.reducer.sum(list(astuple(stats))))
        for group in self.optimizer.param_groups:
            group["lr"] = self._lr()
        self.optimizer.step()
        self.updates += 1
        tokens = max(stats.tokens, 1.0)
        out = {"pg_loss": stats.pg_loss, "clip_frac": stats.clip / tokens, "entropy": stats.entropy / tokens,
               "grad_norm": grad_norm, "loss": stats.loss}
        if self.ref_model is not None:
            out["kl"] = stats.kl
        return out

    def micro_step(self, micro: MicroBatch, mismatch: Mismatch | None = None,
                   seen: Callable[[Tensor, Tensor], None] | None = None) -> MicroStats:
        """Forward and backward over one micro-batch, gradients accumulating; `mismatch` observes the
        sampler-learner gap first when given, and `seen` gets the forward's
        (logprobs, entropies). The loss is scaled by the reducer's world: the data-parallel wrappers average
        gradients over the processes, and each process's loss is its part of the sum."""
        cfg, mask = self.cfg, micro.rows.mask
        logp, ent = self._logp(micro.rows, entropy=True)
        assert ent is not None
        if mismatch is not None:
            mismatch.observe(logp.detach(), micro.behaviour, mask)
        if seen is not None:
            seen(logp.detach(), ent.detach())
        pg, clipped = clipped_policy_loss(logp, micro.old, micro.rows.advantages, cfg.clip_low, cfg.clip_high)
        if self.importance_sampling:
            pg = pg * truncated_importance_weights(micro.old, micro.behaviour, cfg.tis_cap)
        loss = aggregate_loss(pg, mask, cfg.loss_agg, self.max_tokens, normalizer=micro.normalizer)
        stats = MicroStats(pg_loss=loss.item(), clip=float((clipped.float() * mask).sum()), tokens=float(mask.sum()))
        if self.ref_model is not None:
            with torch.no_grad():
                ref_logp = self._logp(micro.rows, reference=True)[0]
            kl = aggregate_loss(k3_kl(logp, ref_logp), mask, cfg.loss_agg, self.max_tokens, normalizer=micro.normalizer)
            loss = loss + cfg.kl_beta * kl
            stats.kl = kl.item()
        stats.entropy = float((ent * mask).sum())
        (loss * float(self.reducer.world)).backward()
        stats.loss = loss.item()
        return stats

    def _metrics(self, steps: list[dict[str, float]], mismatch: Mismatch) -> dict[str, float]:
        """The update's metrics: each step figure's mean over the optimizer steps, the mismatch over every process."""
        sums: dict[str, float] = {}
        for step in steps:
            for k, v in step.items():
                sums[k] = sums.get(k, 0.0) + v
        metrics = {k: v / max(len(steps), 1) for k, v in sums.items()}
        num, den, kl = self.reducer.sum([mismatch.num, mismatch.den, mismatch.kl])
        (largest,) = self.reducer.max([mismatch.largest])
        metrics.update(mismatch_mean=num / den if den else 0.0, mismatch_max=largest,
                       mismatch_kl=kl / den if den else 0.0, lr=self._lr(), optimizer_steps=len(steps))
        return metrics

    def policy_state(self) -> dict[str, Any]:
        """The weights an engine adopts after an update (`engine.load_weights`): the module's own state dict."""
        return self.model.state_dict()

    def clip_gradients(self) -> float:
        """Clip the global gradient norm to `rl.grad_clip`; the norm before clipping."""
        return float(self.reducer.whole(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)))

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = state["updates"]
