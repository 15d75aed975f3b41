"""A step's per-token records for the run store: each stored sample's last completion, token by token.

Covers: `step_tokens` (for every sampled trajectory, its last completion's tokens with the sampler's logprobs, and
for those the update trained on, the learner's pre-update logprob, entropy and loss mask from `Learner.token_values`,
found through the rows `pack_groups` laid out; gathered as whole columns, not token by token), and `TokenPieces`
(each token id's text, decoded once per id and handed to the store once per run).
Nothing here runs a model: the values are the ones the sampler and the update already computed.
Does not cover: storing (`store/run_store.py`, `store/tokens.py`), computing the values (`rl/learner.py`).
"""

from __future__ import annotations

from itertools import chain
from typing import Protocol

import numpy as np
import torch

from posttrain.rl.train_batch import TokenValues, TrainBatch
from posttrain.store.tokens import StepTokens
from posttrain.types import Group


class _Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class TokenPieces:
    """Token ids -> their texts, each decoded alone once (a vocabulary is finite). A token that is part of a
    multi-byte character decodes to a replacement character; special tokens decode to ""."""

    def __init__(self, tokenizer: _Decoder) -> None:
        self.tokenizer = tokenizer
        self.known: dict[int, str] = {}

    def new(self, ids: list[int] | np.ndarray) -> dict[int, str]:
        """The texts of the ids among `ids` not handed out before (decoded now; `handed` marks them out once the
        store holds them, so a failed write never loses a text)."""
        unseen = set(np.unique(np.asarray(ids, dtype=np.int64)).tolist()) - self.known.keys()
        return {i: self.tokenizer.decode([i]) for i in sorted(unseen)}

    def handed(self, fresh: dict[int, str]) -> None:
        self.known.update(fresh)


def step_tokens(sampled: list[Group], kept: list[Group], batch: TrainBatch | None, values: TokenValues | None,
                pieces: TokenPieces) -> StepTokens:
    """Per-token records of every sampled trajectory (group and sample indices as the store's sample rows), with
    the texts of token ids `pieces` had not handed out before.

    `batch` is the update's (`pack_groups(kept, ...)`, its rows unpacked) and `values` the learner's figures in its
    rows; both None when no update ran. A trajectory's rows are its segments in order; its last completion is the
    end of its last segment. Learner values are kept only where the loss mask is on (elsewhere the learner may not
    have computed them) and only when the row's tokens are the completion's (anything else is left NaN rather than
    shown against the wrong tokens)."""
    trajs = [(i, j, t) for i, g in enumerate(sampled) for j, t in enumerate(g.trajectories)]
    lengths = [len(t.completion.token_ids) for _, _, t in trajs]
    n = sum(lengths)
    ids = np.fromiter(chain.from_iterable(t.completion.token_ids for _, _, t in trajs), np.int64, n)
    sampler = np.fromiter(chain.from_iterable(_fitted(t.completion.logprobs, k) for (_, _, t), k in zip(trajs, lengths)),
                          np.float64, n)
    learner, entropy = np.full(n, np.nan), np.full(n, np.nan)
    loss = np.zeros(n, bool)
    if batch is not None and batch.lengths is not None and n:
        _place_learner_values(trajs, lengths, ids, kept, batch, values, (learner, entropy, loss))
    samples = np.array([(i, j, k) for (i, j, _), k in zip(trajs, lengths)], np.int32).reshape(-1, 3)
    return StepTokens(samples, ids.astype(np.int32), sampler, learner, entropy, loss, pieces.new(ids))


def _fitted(logprobs: list[float], n: int) -> list[float]:
    """A completion's sampler logprobs, one per token (NaN where an engine returned none)."""
    return logprobs if len(logprobs) == n else (list(logprobs) + [np.nan] * n)[:n]


def _place_learner_values(trajs: list, lengths: list[int], ids: np.ndarray, kept: list[Group], batch: TrainBatch,
                          values: TokenValues | None, out: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    """Fill `out` (learner logp, entropy, loss mask over the flat tokens) for the trajectories the update trained
    on, as whole-column gathers from the batch's rows."""
    assert batch.lengths is not None
    row_of: dict[int, int] = {}  # id(trajectory) -> its last row in the batch
    row = 0
    for g in kept:
        for t in g.trajectories:
            row += 1 if len(t.turns) == 1 else len(t.segments())  # one turn: one segment
            row_of[id(t)] = row - 1
    starts = np.cumsum([0, *lengths[:-1]])
    lens_of_row = batch.lengths.tolist()
    picked = [(k, row_of[id(t)]) for k, (_, _, t) in enumerate(trajs)
              if id(t) in row_of and lengths[k] and lens_of_row[row_of[id(t)]] - lengths[k] >= 1]
    if not picked:
        return
    which = np.array([k for k, _ in picked])  # the trajectories placed, and their rows
    rows = np.array([r for _, r in picked])
    count = np.array(lengths)[which]
    owner = np.repeat(np.arange(len(picked)), count)  # per placed token: which placed trajectory it belongs to
    within = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)  # its index in its completion
    flat = torch.from_numpy(starts[which][owner] + within)  # its index in the step's columns
    r = torch.from_numpy(rows[owner])
    col = torch.from_numpy((np.array(lens_of_row)[rows] - count - 1)[owner] + within)  # its target's position
    differ = (batch.input_ids[r, col + 1] != torch.from_numpy(ids)[flat]).long()
    ok = torch.zeros(len(picked), dtype=torch.long).index_add_(0, torch.from_numpy(owner), differ)[owner] == 0
    mask = (batch.mask[r, col] > 0) & ok  # only trajectories whose every token is the row's
    learner, entropy, loss = out
    loss[flat[ok].numpy()] = mask[ok].numpy()
    if values is not None:
        on = flat[mask].numpy()
        learner[on] = values.logp[r, col][mask].double().numpy()
        entropy[on] = values.entropy[r, col][mask].double().numpy()
