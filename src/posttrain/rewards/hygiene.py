"""Reward hygiene around any verifier: an output-length cap applied before verification.

Covers: `LengthCapped`, which gives a response longer than `max_chars` a
recorded penalty score (0 by default, status OK: an over-long answer is the
policy's fault, so it must carry signal) without running the inner verifier,
and passes the rest to the inner verifier through the guard. Verifier
timeouts and the ERROR/TIMEOUT statuses live in `base.score`; excluding
those from advantages is `rl.advantages`' job.
`verifier_latency_metrics` gives a step's verifier latency percentiles.
Does not cover: token-level caps (the sampler's `max_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from posttrain.rewards.base import Verifier, score
from posttrain.types import Task, Verdict, VerdictStatus


@dataclass
class LengthCapped:
    """`inner`, except that responses over `max_chars` characters score `penalty` (passed=False) unverified."""

    inner: Verifier
    max_chars: int
    penalty: float = 0.0
    name: str = ""

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise ValueError(f"max_response_chars must be >= 1, got {self.max_chars}")
        self.name = self.name or self.inner.name

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        keep = [i for i, r in enumerate(responses) if len(r) <= self.max_chars]
        out: list[Verdict] = [
            Verdict(
                self.penalty,
                False,
                details=f"response is {len(r)} chars, over the {self.max_chars}-char cap: penalty {self.penalty:g}, not verified",
            )
            for r in responses
        ]
        if keep:
            verdicts = await score(self.inner, [tasks[i] for i in keep], [responses[i] for i in keep])
            for i, v in zip(keep, verdicts):
                out[i] = v
        return out


def linear_percentile(sorted_values: list[float], q: float) -> float:
    """The q-quantile (0..1) of sorted values by linear interpolation between closest ranks (numpy's default method)."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def verifier_latency_metrics(verdicts: Sequence[Verdict]) -> dict[str, float]:
    """Per-step verifier health: latency p50/p95/max over the verdicts that carry one, and timeouts counted."""
    times = sorted(v.latency_s for v in verdicts if v.latency_s is not None)
    out = {"verifier_timeouts": float(sum(v.status is VerdictStatus.TIMEOUT for v in verdicts))}
    if times:
        out.update(
            verifier_latency_p50=linear_percentile(times, 0.5),
            verifier_latency_p95=linear_percentile(times, 0.95),
            verifier_latency_max=times[-1],
        )
    return out
