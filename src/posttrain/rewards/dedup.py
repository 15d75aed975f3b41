"""Judge each distinct item of a batch once: the one response dedup (`distinct`, `fan_out`) and `Deduplicated`.

`distinct(keys)` and `fan_out(verdicts, slots)` are the mechanism every verifier that skips repeated work
uses (`PythonTests` keys by the exact program and tests it would run); `Deduplicated` (kind `dedup`) wraps
any verifier with it, keyed by (task id, response).

Covers: a wrapper for expensive, deterministic verifiers (unit tests in the
sandbox) that a sampled group hits with many identical responses: a small
model's 16 samples of one task are often a handful of distinct programs. The
distinct pairs go through the inner verifier's guarded `score` call (so their
verdicts carry the inner verifier's id and latency); duplicates get copies.
Does not cover: caching across batches (a response's verdict may depend on
the sandbox's limits and time; one batch is the unit it is safe to share in).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.rewards.base import Verifier, score
from posttrain.rewards.registry import VerifierSpec, make_verifier, register_verifier
from posttrain.types import Task, Verdict


@dataclass
class Deduplicated:
    """Runs `inner` once per distinct (task id, response) in a batch.

    >>> v = make_verifier({"type": "dedup", "inner": "python_tests"})
    """

    inner: Any  # a Verifier; its name and version enter this one's version hash
    name: str = "dedup"

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        unique, slots = distinct([(task.id, response) for task, response in zip(tasks, responses)])
        verdicts = await score(self.inner, [tasks[i] for i in unique], [responses[i] for i in unique])
        return fan_out(verdicts, slots)


def distinct(keys: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    """(the batch index of each distinct key's first occurrence, and for every item the position of its key
    among the distinct ones)."""
    first: dict[Hashable, int] = {}
    unique: list[int] = []
    slots: list[int] = []
    for i, key in enumerate(keys):
        if key not in first:
            first[key] = len(unique)
            unique.append(i)
        slots.append(first[key])
    return unique, slots


def fan_out(verdicts: Sequence[Verdict], slots: Sequence[int]) -> list[Verdict]:
    """One verdict per item from the distinct items' verdicts; each a copy of its own (breakdown and info
    copied too), so a consumer that edits one (stamping a verifier id, say) leaves the others alone."""
    return [dataclasses.replace(verdicts[n], breakdown=dict(verdicts[n].breakdown), info=copy.deepcopy(verdicts[n].info))
            for n in slots]


@register_verifier("dedup")
def _dedup(inner: VerifierSpec = "python_tests") -> Verifier:
    return Deduplicated(make_verifier(inner))
