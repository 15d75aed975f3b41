"""A step's per-token records for the run store: each stored sample's last completion, token by token.

Covers: `token_rows` (for every sampled trajectory, its last completion's tokens with the sampler's logprobs, and
for those the update trained on, the learner's pre-update logprob, entropy and loss mask from `Learner.token_values`,
found through the rows `pack_groups` laid out), and `TokenPieces` (each token id's text, decoded once per id).
Nothing here runs a model: the values are the ones the sampler and the update already computed.
Does not cover: storing (`store/run_store.py`, `store/tokens.py`), computing the values (`rl/learner.py`).
"""

from __future__ import annotations

import math
from typing import Protocol

from posttrain.rl.train_batch import TokenValues, TrainBatch
from posttrain.store.tokens import TokenRow
from posttrain.types import Group


class _Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class TokenPieces:
    """Token ids -> their texts, each decoded alone once and remembered (a vocabulary is finite). A token that is
    part of a multi-byte character decodes to a replacement character; special tokens decode to ""."""

    def __init__(self, tokenizer: _Decoder) -> None:
        self.tokenizer = tokenizer
        self.known: dict[int, str] = {}

    def __call__(self, ids: list[int]) -> list[str]:
        known = self.known
        try:
            return [known[i] for i in ids]
        except KeyError:
            for i in ids:
                if i not in known:
                    known[i] = self.tokenizer.decode([i])
            return [known[i] for i in ids]


def token_rows(sampled: list[Group], kept: list[Group], batch: TrainBatch | None, values: TokenValues | None,
               pieces: TokenPieces) -> list[TokenRow]:
    """Per-token rows of every sampled trajectory (group and sample indices as the store's sample rows).

    `batch` is the update's (`pack_groups(kept, ...)`, its rows unpacked) and `values` the learner's figures in its
    rows; both None when no update ran. A trajectory's rows are its segments
    in order; its last completion is the end of its last segment. Learner values are kept only where the loss
    mask is on (elsewhere the learner may not have computed them) and only when the row's tokens are the
    completion's (anything else is left NaN rather than shown against the wrong tokens)."""
    trained: dict[int, tuple[int, int]] = {}  # id(trajectory) -> (its last row, its length)
    mask = input_ids = logps = entropies = None
    if batch is not None and batch.lengths is not None:
        # as Python lists once: slicing a tensor per trajectory cost more than the rest of the record
        mask, input_ids, lengths = batch.mask.tolist(), batch.input_ids.tolist(), batch.lengths.tolist()
        if values is not None:
            logps, entropies = values.logp.tolist(), values.entropy.tolist()
        row = 0
        for g in kept:
            for t in g.trajectories:
                row += 1 if len(t.turns) == 1 else len(t.segments())  # one turn: one segment
                trained[id(t)] = (row - 1, int(lengths[row - 1]))
    nan = math.nan
    out = []
    for i, g in enumerate(sampled):
        for j, t in enumerate(g.trajectories):
            c = t.completion
            n = len(c.token_ids)
            learner, entropy, loss = [nan] * n, [nan] * n, [False] * n
            at = trained.get(id(t))
            if at is not None and n and mask is not None and input_ids is not None:
                r, length = at
                lo, hi = length - n, length  # the completion's positions; its targets are one to the left
                if lo >= 1 and input_ids[r][lo:hi] == list(c.token_ids):
                    loss = [bool(m) for m in mask[r][lo - 1 : hi - 1]]
                    if logps is not None and entropies is not None:
                        learner = [x if m else nan for x, m in zip(logps[r][lo - 1 : hi - 1], loss)]
                        entropy = [x if m else nan for x, m in zip(entropies[r][lo - 1 : hi - 1], loss)]
            out.append(TokenRow(i, j, pieces(list(c.token_ids)), [float(x) for x in c.logprobs], learner, entropy, loss))
    return out
