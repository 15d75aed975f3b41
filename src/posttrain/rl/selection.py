"""Best-checkpoint selection and the early warning, as a pure function of the held-out metric series.

Covers: `Best` (the best value so far, its step, and how many evaluations in
a row have been more than `drop` below it) and `observe(best, step, value,
drop, patience) -> (best, improved, regressing)`: a value equal to the best
moves the best to the later step; a value more than `drop` below the best
counts towards the warning, anything else resets the count.
Does not cover: saving the model or telling the user (the trainer does both).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Best:
    step: int
    value: float
    below: int = 0  # consecutive evaluations more than `drop` below `value`


def observe(best: Best | None, step: int, value: float, drop: float, patience: int) -> tuple[Best, bool, bool]:
    """(the new best, whether this evaluation became the best, whether the warning is on)."""
    if best is None or value >= best.value:
        return Best(step, value), True, False
    below = best.below + 1 if value < best.value - drop else 0
    return Best(best.step, best.value, below), False, below >= patience
