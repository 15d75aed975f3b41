"""Token rows -> the right-padded tensors a supervised loss trains on.

Covers: `pad_rows`, one helper for every supervised batch built from token
lists (the built-in base's pre-training, draft distillation).
Does not cover: RL batches (`rl/learner.py: pack_groups` also carries
behaviour logprobs and advantages) or packing several sequences per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_rows(rows: Sequence[Sequence[int]], weights: Sequence[Sequence[float]],
             pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] right-padded ids and [B, T-1] loss weights; `weights[i][t]` weighs the prediction of rows[i][t + 1].

    >>> ids, w = pad_rows([[1, 2, 3], [4, 5]], [[0, 1], [1]], pad_id=0)
    >>> ids.tolist(), w.tolist()
    ([[1, 2, 3], [4, 5, 0]], [[0.0, 1.0], [1.0, 0.0]])
    """
    if not rows:
        raise ValueError("pad_rows needs at least one row")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width - 1))
    for i, (r, w) in enumerate(zip(rows, weights, strict=True)):
        ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        if len(w):
            mask[i, : len(w)] = torch.tensor(list(w), dtype=torch.float)
    return ids, mask
