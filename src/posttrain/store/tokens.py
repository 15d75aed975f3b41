"""Per-token records of a stored sample: what the dashboard overlays on its completion text.

Covers: `TokenRow` (one sample's last completion, token by token: each token's text, the sampler's logprob, the
learner's logprob and entropy from its first pass over the update batch, and whether the loss counted it), stored
compactly in the run store's `sample_tokens` table (values as little-endian float16 blobs, NaN where the learner
did not compute a value; the loss mask as one byte per token), and its conversion to JSON for the page.
Only values the trainer already has are recorded: the sampler's logprobs come with the completion, the learner's
from the forward its update runs anyway (`Learner.token_values`); nothing is computed for the record alone.
Does not cover: the table's schema and writes (`run_store.py`), what the learner records (`rl/token_record.py`).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any

F16_MAX = 65504.0  # the largest finite float16: values beyond it are clamped, never stored as infinities


def pack_f16(values: list[float]) -> bytes:
    """Float values -> little-endian float16 bytes (2 per value); NaN stays NaN (a missing value), infinities clamp."""
    if all(-F16_MAX <= v <= F16_MAX for v in values if v == v):  # the common case, checked at half the cost
        return struct.pack(f"<{len(values)}e", *values)
    return struct.pack(f"<{len(values)}e", *(v if v != v else max(-F16_MAX, min(F16_MAX, v)) for v in values))


def unpack_f16(blob: bytes | None) -> list[float]:
    """`pack_f16`'s bytes -> floats (an empty list for None)."""
    if not blob:
        return []
    return list(struct.unpack(f"<{len(blob) // 2}e", blob))


@dataclass(frozen=True, slots=True)
class TokenRow:
    """One sample's last completion, token by token (all lists [T_completion]); as the `sample_tokens` table
    stores it after (step, group_idx, sample_idx). `learner_logp` and `entropy` are NaN where the learner did not
    compute them (a group dropped for zero variance, a masked token, a row of another data-parallel rank)."""

    group_idx: int
    sample_idx: int
    pieces: list[str]  # each token's text (decoded alone; special tokens as "")
    sampler_logp: list[float]  # the behaviour logprob the engine returned with the token
    learner_logp: list[float]  # the learner's logprob of the token before its update moved any parameter
    entropy: list[float]  # the learner's entropy at the token's position (the distribution it was sampled from)
    loss_mask: list[bool]  # the token counted in the loss

    def values(self) -> tuple:
        """The row's column values after the step: ids, pieces as JSON, the value blobs."""
        return (self.group_idx, self.sample_idx, json.dumps(self.pieces), pack_f16(self.sampler_logp),
                pack_f16(self.learner_logp), pack_f16(self.entropy), bytes(self.loss_mask))

    @classmethod
    def from_columns(cls, group_idx: int, sample_idx: int, pieces: str, sampler: bytes, learner: bytes | None,
                     entropy: bytes | None, mask: bytes) -> "TokenRow":
        """A row read back from the table (the columns after `step`)."""
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
