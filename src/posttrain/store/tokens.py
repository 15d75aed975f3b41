"""Per-token records of a stored sample: what the dashboard overlays on its completion text.

Covers: `StepTokens` (one step's records, every stored sample's last completion, as flat columns the run store
writes in one row: token ids as int32, the sampler's logprob, the learner's logprob and entropy from its first
pass over the update batch as little-endian float16 with NaN where the learner computed none, the loss mask as
one byte per token; each token id's text is stored once per run, in `token_pieces`), `TokenRow` (one sample's
record as readers use it, with its tokens' texts, and its JSON form for the page), and `read_step_tokens` (a
step's rows from a store, this layout or the one row per sample of stores written before it).
Only values the trainer already has are recorded: the sampler's logprobs come with the completion, the learner's
from the forward its update runs anyway (`Learner.token_values`); nothing is computed for the record alone.
Does not cover: the tables' schema and writes (`run_store.py`), what the learner records (`rl/token_record.py`).
"""

from __future__ import annotations

import json
import math
import sqlite3
import struct
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

import numpy as np

F16_MAX = 65504.0  # the largest finite float16: values beyond it are clamped, never stored as infinities


def pack_f16(values: Any) -> bytes:
    """Float values (a sequence or array) -> little-endian float16 bytes (2 per value); NaN stays NaN (a missing
    value), infinities and values beyond float16's range clamp to its largest finite value."""
    return np.clip(np.asarray(values, dtype=np.float64), -F16_MAX, F16_MAX).astype("<f2").tobytes()


def unpack_f16(blob: bytes | None) -> list[float]:
    """`pack_f16`'s bytes -> floats (an empty list for None)."""
    if not blob:
        return []
    return list(struct.unpack(f"<{len(blob) // 2}e", blob))


@dataclass(frozen=True, slots=True)
class TokenRow:
    """One sample's last completion, token by token (all lists [T_completion]). `learner_logp` and `entropy` are
    NaN where the learner did not compute them (a group dropped for zero variance, a masked token, a row of
    another data-parallel rank)."""

    group_idx: int
    sample_idx: int
    pieces: list[str]  # each token's text (decoded alone; special tokens as "")
    sampler_logp: list[float]  # the behaviour logprob the engine returned with the token
    learner_logp: list[float]  # the learner's logprob of the token before its update moved any parameter
    entropy: list[float]  # the learner's entropy at the token's position (the distribution it was sampled from)
    loss_mask: list[bool]  # the token counted in the loss

    @classmethod
    def from_columns(cls, group_idx: int, sample_idx: int, pieces: str, sampler: bytes, learner: bytes | None,
                     entropy: bytes | None, mask: bytes) -> "TokenRow":
        """A row of the one-row-per-sample table of older stores (`sample_tokens`, the columns after `step`)."""
        n = len(mask)
        pad = [math.nan] * n
        return cls(group_idx, sample_idx, json.loads(pieces), unpack_f16(sampler), unpack_f16(learner) or pad,
                   unpack_f16(entropy) or pad, [bool(b) for b in mask])

    def to_json(self, digits: int = 3) -> dict[str, Any]:
        """The page's form: values rounded to `digits`, missing ones None (JSON has no NaN)."""

        def col(xs: list[float]) -> list[float | None]:
            return [round(x, digits) if math.isfinite(x) else None for x in xs]

        return {"pieces": self.pieces, "sampler_logp": col(self.sampler_logp), "learner_logp": col(self.learner_logp),
                "entropy": col(self.entropy), "loss_mask": [int(m) for m in self.loss_mask]}


@dataclass(frozen=True)
class StepTokens:
    """One step's per-token records as flat columns over its samples' tokens, in sample order ([N] each, N the
    sum of the samples' lengths); `samples` says whose tokens they are."""

    samples: np.ndarray  # [S, 3] int32: group_idx, sample_idx, number of tokens
    ids: np.ndarray  # [N] int32 token ids
    sampler_logp: np.ndarray  # [N] float
    learner_logp: np.ndarray  # [N] float, NaN where the learner computed none
    entropy: np.ndarray  # [N] float, NaN where the learner computed none
    loss_mask: np.ndarray  # [N] bool
    pieces: dict[int, str] = field(default_factory=dict)  # texts of token ids the store may not hold yet

    def columns(self) -> tuple[bytes, ...]:
        """The store's columns after `step`: samples, ids, the three value series, the mask."""
        return (self.samples.astype("<i4").tobytes(), self.ids.astype("<i4").tobytes(), pack_f16(self.sampler_logp),
                pack_f16(self.learner_logp), pack_f16(self.entropy), self.loss_mask.astype(np.uint8).tobytes())

    @classmethod
    def from_columns(cls, samples: bytes, ids: bytes, sampler: bytes, learner: bytes, entropy: bytes,
                     mask: bytes) -> StepTokens:
        f16 = np.dtype("<f2")
        return cls(np.frombuffer(samples, "<i4").reshape(-1, 3), np.frombuffer(ids, "<i4"),
                   np.frombuffer(sampler, f16).astype(float), np.frombuffer(learner, f16).astype(float),
                   np.frombuffer(entropy, f16).astype(float), np.frombuffer(mask, np.uint8).astype(bool))

    @classmethod
    def from_rows(cls, rows: list[TokenRow], vocab: dict[str, int] | None = None) -> StepTokens:
        """Rows with texts -> columns (for records built without a tokenizer): each text's id from `vocab`, a text
        it lacks given the next free id there (pass the same `vocab` for every step of a run)."""
        ids = {} if vocab is None else vocab
        flat = [ids.setdefault(p, len(ids)) for r in rows for p in r.pieces]
        cat = lambda name: np.array([x for r in rows for x in getattr(r, name)], dtype=float)  # noqa: E731
        return cls(np.array([(r.group_idx, r.sample_idx, len(r.pieces)) for r in rows], np.int32).reshape(-1, 3),
                   np.array(flat, np.int32), cat("sampler_logp"), cat("learner_logp"), cat("entropy"),
                   np.array([m for r in rows for m in r.loss_mask], bool), {i: p for p, i in ids.items()})

    def rows(self, pieces: Mapping[int, str], only: Collection[tuple[int, int]] | None = None) -> list[TokenRow]:
        """Per sample (those in `only` when given), with each token's text from `pieces` (a missing id shows as "")."""
        out, at = [], 0
        ids, s, le, en, m = (self.ids.tolist(), self.sampler_logp.tolist(), self.learner_logp.tolist(),
                             self.entropy.tolist(), self.loss_mask.tolist())
        for g, j, n in self.samples.tolist():
            if only is None or (g, j) in only:
                out.append(TokenRow(g, j, [pieces.get(i, "") for i in ids[at:at + n]], s[at:at + n], le[at:at + n],
                                    en[at:at + n], m[at:at + n]))
            at += n
        return out


def read_step_tokens(db: sqlite3.Connection, step: int, only: Collection[tuple[int, int]] | None = None
                     ) -> dict[tuple[int, int], TokenRow]:
    """A step's per-token records by (group_idx, sample_idx), of the samples in `only` when given; empty when the
    store has none (or predates them)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "step_tokens" in tables:
        row = db.execute("SELECT samples, ids, sampler_logp, learner_logp, entropy, loss_mask FROM step_tokens "
                         "WHERE step = ?", (step,)).fetchone()
        if row is not None:
            record = StepTokens.from_columns(*row)
            wanted = np.unique(record.ids).tolist()
            pieces: dict[int, str] = {}
            for at in range(0, len(wanted), 900):  # SQLite's bound-parameter limit
                part = wanted[at:at + 900]
                pieces.update(db.execute(f"SELECT id, piece FROM token_pieces WHERE id IN ({','.join('?' * len(part))})",
                                         part).fetchall())
            return {(r.group_idx, r.sample_idx): r for r in record.rows(pieces, only)}
    if "sample_tokens" in tables:  # a store written before the one-row-per-step layout
        return {(r[0], r[1]): TokenRow.from_columns(*r) for r in db.execute(
            "SELECT group_idx, sample_idx, pieces, sampler_logp, learner_logp, entropy, loss_mask FROM sample_tokens "
            "WHERE step = ?", (step,)) if only is None or (r[0], r[1]) in only}
    return {}
