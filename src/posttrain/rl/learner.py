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
any parameter moves. Memory and precision (`[rl]`): logprobs in chunks of
`logprob_chunk` positions (never the full [T, V] logits), `device`, `dtype`
(bf16 autocast over fp32 master weights), activation checkpointing, and
`packing` (`pack_rows`: several sequences per row, per-segment positions and
attention, per-token advantages) in place of padding; `share_prefix` (each
group's rows as one prefix tree: the prompt runs once for its n completions,
where that costs fewer FLOPs than the padded rows).
Does not cover: distributed data parallelism (posttrain/distributed/ wraps this
learner), building LoRA adapters (models/lora.py: the learner then trains only
the parameters that require grad).
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, replace
from typing import Any

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
from posttrain.types import Group


@dataclass
class TrainBatch:
    input_ids: Tensor  # [B, T] token views, right-padded
    mask: Tensor  # [B, T-1] 1.0 where target t+1 is a sampled token of a trainable trajectory
    old_logp: Tensor  # [B, T-1] behaviour logprobs at those positions (0 elsewhere)
    advantages: Tensor  # [B] each row's episode advantage, or [B, T-1] per target (packed rows)
    lengths: Tensor | None = None  # [B] real tokens per row (what `pack_rows` packs by)
    position_ids: Tensor | None = None  # [B, T] packed rows: positions restart at each segment
    segment_ids: Tensor | None = None  # [B, T] packed rows: attention stays inside equal ids
    groups: Tensor | None = None  # [B] the group each row came from: its rows share a prefix (`rl.share_prefix`)

    def to(self, device: torch.device) -> "TrainBatch":
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device)

        return TrainBatch(self.input_ids.to(device), self.mask.to(device), self.old_logp.to(device),
                          self.advantages.to(device), move(self.lengths), move(self.position_ids), move(self.segment_ids),
                          move(self.groups))

    def rows(self, index: Tensor) -> "TrainBatch":
        def pick(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[index]

        return replace(self, input_ids=self.input_ids[index], mask=self.mask[index], old_logp=self.old_logp[index],
                       advantages=self.advantages[index], lengths=pick(self.lengths),
                       position_ids=pick(self.position_ids), segment_ids=pick(self.segment_ids), groups=pick(self.groups))


def pack_groups(groups: list[Group], advantages: Tensor, valid: Tensor, pad_id: int) -> TrainBatch:
    """G groups of n trajectories (advantages, valid: [G, n]) -> a TrainBatch with one row per segment.

    A single-turn trajectory is one row; a trajectory whose history was
    rewritten contributes one row per segment, all with its advantage. Rows of
    trajectories that are not valid stay in the batch fully masked.
    """
    flat_adv = advantages.reshape(-1).float()
    flat_valid = valid.reshape(-1).tolist()
    views, row_traj, row_valid, row_group = [], [], [], []
    for i, (gi, t) in enumerate((gi, t) for gi, g in enumerate(groups) for t in g.trajectories):
        for view in t.segments():
            views.append(view)
            row_traj.append(i)
            row_valid.append(bool(flat_valid[i]))
            row_group.append(gi)
    width = max(len(v) for v in views)
    ids, mask, lp = [], [], []  # built as padded lists, each made a tensor once
    zeros = [0.0] * (width - 1)
    for v, ok in zip(views, row_valid):
        ids.append([*v.ids, *[pad_id] * (width - len(v))])
        if ok and len(v) > 1:
            tail = [0.0] * (width - len(v))
            mask.append([*map(float, v.mask[1:]), *tail])
            lp.append([*v.logprobs[1:], *tail])
        else:
            mask.append(zeros)
            lp.append(zeros)
    mask_t = torch.tensor(mask, dtype=torch.float).reshape(len(views), width - 1)
    old = torch.tensor(lp, dtype=torch.float).reshape(len(views), width - 1) * mask_t
    lengths = torch.tensor([len(v) for v in views], dtype=torch.long)
    return TrainBatch(torch.tensor(ids, dtype=torch.long), mask_t, old,
                      flat_adv[torch.tensor(row_traj, dtype=torch.long)] if row_traj else torch.zeros(0), lengths,
                      groups=torch.tensor(row_group, dtype=torch.long))


def pack_rows(batch: TrainBatch, width: int | None = None, pad_id: int = 0) -> TrainBatch:
    """A padded batch -> the same sequences packed first-fit-decreasing into rows of `width` tokens (at least
    the longest sequence). Each sequence keeps its tokens, mask, behaviour logprobs and advantage (now per
    target); positions restart at 0 per sequence and attention stays inside it (`segment_ids`); the target
    that would cross from one sequence into the next is masked. Padding is a segment of its own."""
    if batch.lengths is None:
        raise ValueError("pack_rows needs the batch's row lengths (pack_groups records them)")
    lengths = [int(n) for n in batch.lengths]
    width = max(width or 0, max(lengths))
    bins, fill = pack_bins(lengths, width)
    r = len(bins)
    ids = torch.full((r, width), pad_id, dtype=torch.long)
    pos = torch.zeros((r, width), dtype=torch.long)
    seg = torch.zeros((r, width), dtype=torch.long)
    mask = torch.zeros((r, width - 1))
    old = torch.zeros((r, width - 1))
    adv = torch.zeros((r, width - 1))
    row_adv = batch.advantages if batch.advantages.dim() == 1 else None
    if row_adv is None:
        raise ValueError("pack_rows packs a padded batch (one advantage per row)")
    for j, members in enumerate(bins):
        at = 0
        for k, i in enumerate(members):
            n = lengths[i]
            ids[j, at : at + n] = batch.input_ids[i, :n]
            pos[j, at : at + n] = torch.arange(n)
            seg[j, at : at + n] = k
            mask[j, at : at + n - 1] = batch.mask[i, : n - 1]
            old[j, at : at + n - 1] = batch.old_logp[i, : n - 1]
            adv[j, at : at + n - 1] = row_adv[i]
            at += n
        seg[j, at:] = len(members)  # padding attends only to padding: no all-masked (NaN) rows
        pos[j, at:] = torch.arange(width - at)
    return TrainBatch(ids, mask, old, adv, torch.tensor(fill), pos, seg)


def pack_bins(lengths: list[int], width: int) -> tuple[list[list[int]], list[int]]:
    """First-fit-decreasing: the sequences (by index) of each packed row of `width` tokens, and each row's fill."""
    bins: list[list[int]] = []
    fill: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for j, used in enumerate(fill):
            if used + lengths[i] <= width:
                bins[j].append(i)
                fill[j] += lengths[i]
                break
        else:
            bins.append([i])
            fill.append(lengths[i])
    return bins, fill


def unpack_rows(packed: Tensor, lengths: Tensor, width: int) -> Tensor:
    """Per-target values of a packed batch ([r, W-1], `pack_rows` of sequences of `lengths` into rows of `width`)
    -> the same values per sequence ([N, max(lengths)-1] right-padded with NaN): `pack_rows`' placement undone."""
    n = [int(x) for x in lengths]
    out = packed.new_full((len(n), max(n) - 1), float("nan"))
    for j, members in enumerate(pack_bins(n, max(width, max(n)))[0]):
        at = 0
        for i in members:
            out[i, : n[i] - 1] = packed[j, at : at + n[i] - 1]
            at += n[i]
    return out


@dataclass
class TokenValues:
    """The learner's own per-target figures from an update, in the rows of the batch it was given (NaN where
    none was computed): what the run store's per-token records keep (`rl/token_record.py`)."""

    logp: Tensor  # [B, T-1] log p of each target before any parameter moved (the mismatch metrics' value)
    entropy: Tensor  # [B, T-1] the entropy at each target's position, from the first epoch's forward


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
    """

    def __init__(
        self,
        model: CausalLM,
        cfg: RLConfig,
        max_tokens: int,
        temperature: float = 1.0,
        importance_sampling: bool = False,
        total_updates: int | None = None,
    ) -> None:
        self.model = model
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
        self.loss_scale = 1.0  # the data-parallel learner's world size: the wrappers average gradients over ranks
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

    def local_rows(self, rows: Tensor) -> Tensor:
        """The rows of a micro-batch this process computes (all of them; a data-parallel learner's share)."""
        return rows

    def reduce_stats(self, values: list[float], op: str = "sum") -> list[float]:
        """Per-process sums (or maxima) -> the totals over every process (one process: as they are)."""
        return values

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
        self.model.train()
        cfg = self.cfg
        given = batch
        batch = self.prepare(batch)
        b = batch.input_ids.shape[0]
        behaviour = batch.old_logp
        old_policy = self._learner_old(batch) if self.importance_sampling else behaviour
        # per-token record (`record_tokens`): the pre-update logprobs (the importance-sampling pass's when it ran,
        # else the first minibatch's forward, as the mismatch metrics) and the first epoch's entropies
        kept_logp = kept_ent = None
        if self.record_tokens:
            kept_logp = old_policy.clone() if self.importance_sampling else torch.full_like(behaviour, math.nan)
            kept_ent = torch.full_like(behaviour, math.nan)
        chunks = torch.arange(b).chunk(cfg.minibatches)
        sums: dict[str, float] = {}
        n_mb = 0
        mismatch_num = mismatch_den = mismatch_max = mismatch_kl = 0.0
        first = True
        for epoch in range(cfg.epochs):
            for rows in chunks:
                mb_mask = batch.mask[rows]
                if mb_mask.sum() == 0:
                    continue
                norm = loss_normalizer(mb_mask, cfg.loss_agg, self.max_tokens)
                stats: dict[str, Any] = {"pg_loss": 0.0, "clip": 0.0, "tokens": 0.0, "entropy": 0.0, "kl": 0.0}
                self.optimizer.zero_grad(set_to_none=True)
                loss_total = 0.0
                for whole in rows.chunk(cfg.micro_batches):
                    if batch.mask[whole].sum() == 0:  # every process sees the whole batch: they all skip together
                        continue
                    micro = self.local_rows(whole)
                    mask = batch.mask[micro]
                    part = batch.rows(micro)
                    logp, ent = self._logp(part, entropy=True)
                    old = old_policy[micro]
                    if kept_logp is not None and kept_ent is not None and epoch == 0:
                        assert ent is not None
                        kept_ent[micro] = ent.detach().float()
                        if first and not self.importance_sampling:
                            kept_logp[micro] = logp.detach()
                    if first:  # before any parameter moved: sampler vs learner on identical tokens
                        diff = (logp.detach() - behaviour[micro]).abs() * mask
                        mismatch_num += float(diff.sum())
                        mismatch_den += float(mask.sum())
                        mismatch_max = max(mismatch_max, float(diff.max()) if diff.numel() else 0.0)
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
                            ref_logp = self._logp(part, reference=True)[0]
                        kl = aggregate_loss(k3_kl(logp, ref_logp), mask, cfg.loss_agg, self.max_tokens, normalizer=norm)
                        loss = loss + cfg.kl_beta * kl
                        stats["kl"] += kl.item()
                    assert ent is not None
                    stats["entropy"] += float((ent * mask).sum())
                    (loss * self.loss_scale).backward()
                    loss_total += loss.item()
                first = False
                grad_norm = self.clip_gradients()
                keys = ("pg_loss", "clip", "tokens", "kl", "entropy")
                totals = self.reduce_stats([float(stats[k]) for k in keys] + [loss_total])
                stats, loss_total = dict(zip(keys, totals[:-1])), totals[-1]
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
        self.token_values = None
        if kept_logp is not None and kept_ent is not None:
            values = TokenValues(kept_logp.cpu(), kept_ent.cpu())
            if batch.segment_ids is not None and given.segment_ids is None:  # packed here: back to the given rows
                assert given.lengths is not None
                width = batch.input_ids.shape[1]
                values = TokenValues(unpack_rows(values.logp, given.lengths, width),
                                     unpack_rows(values.entropy, given.lengths, width))
            self.token_values = values
        mismatch_num, mismatch_den, mismatch_kl = self.reduce_stats([mismatch_num, mismatch_den, mismatch_kl])
        (mismatch_max,) = self.reduce_stats([mismatch_max], op="max")
        metrics.update(mismatch_mean=mismatch_num / mismatch_den if mismatch_den else 0.0, mismatch_max=mismatch_max,
                       mismatch_kl=mismatch_kl / mismatch_den if mismatch_den else 0.0,
                       lr=self._lr(), optimizer_steps=n_mb)
        return metrics

    def policy_state(self) -> dict[str, Any]:
        """The weights an engine adopts after an update (`engine.load_weights`): the module's own state dict."""
        return self.model.state_dict()

    def clip_gradients(self) -> float:
        """Clip the global gradient norm to `rl.grad_clip`; the norm before clipping."""
        return float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip))

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = state["updates"]
