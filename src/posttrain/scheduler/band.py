"""The difficulty band: a domain's difficulty knob moved so that its pass rate stays inside [low, high].

Covers: `BandController`, one integer level per domain between its bounds
(a generator's `digits`, a lookup's `hops`, a reasoning-gym curriculum
`level`), a window of attempts at the current level, and the move once the
window is full: one level up above `high`, one down below `low`, nothing
inside; every move recorded (`BandMove`) with the pass rate that caused it.
Does not cover: building a domain's source at a level (the scheduler is
handed a `level -> TaskSource` function by `rl/build.py`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class BandMove:
    step: int
    domain: str
    old: int
    new: int
    pass_rate: float


@dataclass(slots=True)
class _Level:
    level: int
    lo: int
    hi: int
    attempts: int = 0
    passes: int = 0


@dataclass
class BandController:
    """Per-domain difficulty levels kept in the learnable band."""

    low: float = 0.2
    high: float = 0.8
    window: int = 64
    """Valid attempts at a level before its pass rate decides a move."""
    levels: dict[str, _Level] = field(default_factory=dict)
    history: list[BandMove] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0.0 <= self.low < self.high <= 1.0:
            raise ValueError(f"band needs 0 <= low < high <= 1, got [{self.low}, {self.high}]")

    def add(self, domain: str, level: int, lo: int, hi: int) -> None:
        if not lo <= level <= hi:
            raise ValueError(f"{domain}: level {level} outside [{lo}, {hi}]")
        self.levels[domain] = _Level(level, lo, hi)

    def level(self, domain: str) -> int | None:
        lv = self.levels.get(domain)
        return None if lv is None else lv.level

    def observe(self, domain: str, passes: int, attempts: int, step: int) -> BandMove | None:
        """Count attempts at the current level; the move made when the window filled, if any."""
        lv = self.levels.get(domain)
        if lv is None or attempts <= 0:
            return None
        lv.attempts += attempts
        lv.passes += passes
        if lv.attempts < self.window:
            return None
        rate = lv.passes / lv.attempts
        lv.attempts = lv.passes = 0
        new = lv.level + 1 if rate > self.high else lv.level - 1 if rate < self.low else lv.level
        new = min(max(new, lv.lo), lv.hi)
        if new == lv.level:
            return None
        move = BandMove(step, domain, lv.level, new, rate)
        lv.level = new
        self.history.append(move)
        return move

    def state_dict(self) -> dict[str, Any]:
        return {"levels": {d: (v.level, v.lo, v.hi, v.attempts, v.passes) for d, v in self.levels.items()},
                "history": [asdict(m) for m in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.levels = {d: _Level(*v) for d, v in state["levels"].items()}
        self.history = [BandMove(**m) for m in state["history"]]
