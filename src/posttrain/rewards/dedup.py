"""`Deduplicated` (kind `dedup`): judge each distinct (task, response) pair of a batch once.

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
from collections.abc import Sequence
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
        first: dict[tuple[str, str], int] = {}  # (task id, response) -> position among the distinct pairs
        unique: list[int] = []  # batch index of each distinct pair's first occurrence
        slot: list[int] = []  # for each batch item, its distinct pair
        for i, (task, response) in enumerate(zip(tasks, responses)):
            key = (task.id, response)
            if key not in first:
                first[key] = len(unique)
                unique.append(i)
            slot.append(first[key])
        verdicts = await score(self.inner, [tasks[i] for i in unique], [responses[i] for i in unique])
        return [copy.copy(verdicts[n]) for n in slot]


@register_verifier("dedup")
def _dedup(inner: VerifierSpec = "python_tests") -> Verifier:
    return Deduplicated(make_verifier(inner))
