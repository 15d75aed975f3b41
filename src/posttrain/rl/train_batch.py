"""The learner's input: scored groups as one batch of token rows.

Covers: `TrainBatch` (right-padded token views with sampled-token masks, behaviour logprobs and advantages;
optionally packed rows or each row's group), `pack_groups` (G groups of n trajectories -> one row per
append-only segment, `Trajectory.segments()`, each carrying its episode's advantage; invalid trajectories
stay as fully masked rows) and `pack_rows` (the same sequences packed first-fit-decreasing into fewer rows,
per-segment positions and attention, per-token advantages; `rl.packing`).
Does not cover: what the learner does with a batch (`rl/learner.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

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
