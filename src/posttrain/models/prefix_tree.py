"""Prefix trees: the rows of a group laid out once as their shared prefix and then each row's own rest.

Covers: `prefix_trees(input_ids, lengths, groups, mask)`, which turns right-padded rows (each tagged with
its group) into one tree row per group: the group's longest common prefix once (branch 0), then every
row's remaining tokens (branch k for the group's k-th row), positions continuing the prefix's, so that
under `llama.prefix_tree_mask` each token's hidden state equals the one it has in its own row; and, for
every wanted target (a position where `mask` is set), which tree position's hidden state predicts it, the
target token, and where its logprob goes in the [B, T-1] layout. `layout_costs`: a model's forward FLOPs
for either layout (linear layers per token plus attention per query-key pair), so a caller shares only
where it saves. The GRPO learner's n completions of one prompt then run the prompt once
instead of n times (`rl.share_prefix`, `models/logprobs.py: shared_prefix_logprobs`).
Does not cover: rows already packed several to a row (`rl.packing`), trees deeper than one shared prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class PrefixTrees:
    ids: Tensor  # [G, W] each group's tree row, right-padded
    positions: Tensor  # [G, W] the prefix 0..L-1, each branch continuing from L
    branches: Tensor  # [G, W] 0 the shared prefix, k the group's k-th row (1-based), -1 padding
    context: Tensor  # [N] flat index into [G * W]: the position whose hidden state predicts each target
    targets: Tensor  # [N] the target tokens
    rows: Tensor  # [N] each target's row in the input batch
    cols: Tensor  # [N] ... and its column in [B, T-1] (the target's position - 1)
    prefix_lengths: list[int]  # per tree row: its shared prefix's length
    widths: list[int]  # per tree row: its real tokens


def prefix_trees(input_ids: Tensor, lengths: Tensor, groups: Tensor, mask: Tensor, pad_id: int = 0) -> PrefixTrees:
    """Rows [B, T] with real `lengths` [B] and group ids `groups` [B] -> their prefix trees (one per distinct
    group, in increasing group id), with the targets where `mask` [B, T-1] is set (target t + 1 of row b wanted
    when mask[b, t] > 0). Vectorised: no per-row or per-token Python loop."""
    device = input_ids.device
    b, t = input_ids.shape
    ids, lens = input_ids, lengths.to(device)
    _, inv = torch.unique(groups.to(device), return_inverse=True)  # [B] the tree row of each input row
    g_count = int(inv.max()) + 1
    rows = torch.arange(b, device=device)
    first = torch.full((g_count,), b, dtype=torch.long, device=device).scatter_reduce(0, inv, rows, "amin")
    pos = torch.arange(t, device=device)
    # each row's common prefix with its group's first row; the group's prefix is the shortest of them
    same = (ids == ids[first[inv]]) & (pos < lens[:, None]) & (pos < lens[first[inv]][:, None])
    lcp = same.long().cumprod(1).sum(1)
    prefix = torch.full((g_count,), t, dtype=torch.long, device=device).scatter_reduce(0, inv, lcp, "amin")
    p_row = prefix[inv]  # [B]
    rest = lens - p_row  # each row's own tokens after the prefix
    # a branch starts where the group's previous rows' branches end: offsets by a cumulative sum in group order
    order = torch.argsort(inv * b + rows)  # rows by (group, row), stable
    csum = torch.cumsum(rest[order], 0) - rest[order]  # exclusive, over every row in that order
    group_start = torch.zeros(g_count, dtype=torch.long, device=device).scatter_reduce(
        0, inv[order], csum, "amin", include_self=False)
    offset = torch.empty_like(rest)
    offset[order] = csum - group_start[inv[order]]
    rank = torch.empty_like(rest)
    counts = torch.bincount(inv, minlength=g_count)
    starts = torch.cumsum(counts, 0) - counts
    rank[order] = torch.arange(b, device=device) - starts[inv[order]]
    widths = prefix + torch.zeros(g_count, dtype=torch.long, device=device).scatter_add(0, inv, rest)
    width = int(widths.max())
    out_ids = torch.full((g_count, width), pad_id, dtype=torch.long, device=device)
    out_pos = torch.arange(width, device=device).repeat(g_count, 1)
    out_branch = torch.full((g_count, width), -1, dtype=torch.long, device=device)
    # the prefix, from each group's first row
    in_prefix = pos[None, :] < prefix[:, None]  # [G, T]
    g_idx, m_idx = in_prefix.nonzero(as_tuple=True)
    out_ids[g_idx, m_idx] = ids[first[g_idx], m_idx]
    out_pos[g_idx, m_idx] = m_idx
    out_branch[g_idx, m_idx] = 0
    # every row's own tokens: original position m lands at column m + offset (the prefix's L cancels)
    own = (pos[None, :] >= p_row[:, None]) & (pos[None, :] < lens[:, None])  # [B, T]
    r_idx, m_idx = own.nonzero(as_tuple=True)
    col = m_idx + offset[r_idx]
    out_ids[inv[r_idx], col] = ids[r_idx, m_idx]
    out_pos[inv[r_idx], col] = m_idx
    out_branch[inv[r_idx], col] = rank[r_idx] + 1
    # target t + 1 of row r is predicted by position t: in the shared prefix, or in r's own branch
    tr, tc = (mask > 0).nonzero(as_tuple=True)
    ctx_col = torch.where(tc < p_row[tr], tc, tc + offset[tr])
    return PrefixTrees(out_ids, out_pos, out_branch, inv[tr] * width + ctx_col, ids[tr, tc + 1], tr, tc,
                       prefix.tolist(), widths.tolist())


def forward_cost(tokens: int, pairs: int, linear_params: int, hidden: int, layers: int) -> float:
    """A forward pass's FLOPs, roughly: 2 per linear parameter per token, and per query-key pair 4 per hidden
    unit per layer (the scores and the weighted sum)."""
    return 2.0 * linear_params * tokens + 4.0 * hidden * layers * pairs


def layout_costs(lengths: Tensor, widths: list[int], linear_params: int, hidden: int, layers: int) -> tuple[float, float]:
    """(the padded rows' forward FLOPs, the prefix trees') for rows of `lengths` whose trees are `widths` wide;
    both count every padded token and query-key pair, as the kernels compute them."""
    b, t = lengths.numel(), int(lengths.max())
    w = max(widths)
    flat = forward_cost(b * t, b * t * t, linear_params, hidden, layers)
    tree = forward_cost(len(widths) * w, len(widths) * w * w, linear_params, hidden, layers)
    return flat, tree
