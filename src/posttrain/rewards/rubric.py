"""`Rubric`: a weighted composition of outcome and process verifiers into one reward.

Covers: `RubricPart` (a verifier, its weight, its role, whether it may fail
without sinking the verdict, whether failing it zeroes the reward) and
`Rubric`, which runs every part through the guard (`rewards.base.score`)
concurrently and combines their verdicts:

- score: the weighted mean of the parts' scores, sum(w_i * s_i) / sum(w_i),
  over the parts that ran; a failed *gate* part makes the score 0 (a reward
  that pays for the answer only when the format is legal);
- passed: every outcome part passed (every part, when none is an outcome),
  and the score reaches `pass_threshold` when one is set;
- status: a required part that ERRORs or TIMEs OUT makes the whole verdict
  that status (ERROR before TIMEOUT), so an infrastructure failure is never
  scored; an *optional* part that fails is left out and the weights of the
  rest renormalise; if no part with a weight ran, the verdict is an ERROR;
- breakdown: each part's score by name; details: the failing parts' details;
  info: each part's structured findings (`Verdict.info`) by name, for the parts that have any.

Concurrency: asynchronous parts (a judge, sandboxed tests) overlap with each
other and with the synchronous ones (answers, formats), which run in turn
on the calling thread.

The version hash covers every part's verifier id, weight, role and flags.
Registered as kind "rubric":
`{"type": "rubric", "parts": [{"verifier": spec, "weight": 1.0, "role": "outcome"}, ...]}`.
Does not cover: the parts themselves.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.rewards.base import SyncVerifier, Verifier, score, verifier_id
from posttrain.rewards.registry import VerifierSpec, make_verifier, register_verifier
from posttrain.types import Task, Verdict, VerdictStatus

Role = Literal["outcome", "process"]


@dataclass(repr=False)
class RubricPart:
    """One verifier in a rubric. `gate`: failing it (passed=False) makes the rubric's score 0."""

    verifier: Verifier
    weight: float = 1.0
    role: Role = "outcome"
    optional: bool = False
    gate: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        if not (self.weight >= 0.0):
            raise ValueError(f"rubric part {self.name or self.verifier.name!r}: weight must be >= 0, got {self.weight}")
        if self.role not in ("outcome", "process"):
            raise ValueError(f"rubric part role must be 'outcome' or 'process', got {self.role!r}")
        self.name = self.name or self.verifier.name

    def __repr__(self) -> str:  # stable across processes: the version hash reads it
        return (
            f"RubricPart({self.name!r}, {verifier_id(self.verifier)}, weight={self.weight!r}, role={self.role!r}, "
            f"optional={self.optional!r}, gate={self.gate!r})"
        )


def _unique_names(parts: list[RubricPart]) -> None:
    seen: dict[str, int] = {}
    for p in parts:
        n = seen.get(p.name, 0)
        seen[p.name] = n + 1
        if n:
            p.name = f"{p.name}#{n + 1}"


@dataclass
class Rubric:
    """Weighted parts judged concurrently; see the module docstring for the score, pass and error rules."""

    parts: list[RubricPart]
    pass_threshold: float | None = None
    part_timeout_s: float | None = None
    name: str = "rubric"

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a rubric needs at least one part")
        if sum(p.weight for p in self.parts) <= 0:
            raise ValueError("a rubric's weights must not all be 0")
        _unique_names(self.parts)

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        blocking = [isinstance(p.verifier, SyncVerifier) for p in self.parts]
        if not any(blocking) or all(blocking):
            per_part = await asyncio.gather(*(score(p.verifier, tasks, responses, self.part_timeout_s) for p in self.parts))
        else:
            per_part = await self._overlapped(tasks, responses, blocking)
        return [self._combine([pv[i] for pv in per_part]) for i in range(len(tasks))]

    async def _overlapped(self, tasks: Sequence[Task], responses: Sequence[str], blocking: list[bool]) -> list[list[Verdict]]:
        """Synchronous parts block the event loop while they compute, which would stall the I/O of the
        asynchronous parts (a judge's requests); so those run on their own loop in a worker thread while
        the synchronous ones run here (on the main thread, where math-verify's time bound works)."""
        io_parts = [p for p, b in zip(self.parts, blocking) if not b]

        def run_io() -> list[list[Verdict]]:
            async def all_io() -> list[list[Verdict]]:
                return list(await asyncio.gather(*(score(p.verifier, tasks, responses, self.part_timeout_s) for p in io_parts)))

            return asyncio.run(all_io())

        # in the caller's context: its parts execute where the run's verifications do (`use_sandboxes`)
        io_future = asyncio.get_running_loop().run_in_executor(None, contextvars.copy_context().run, run_io)
        cpu = [await score(p.verifier, tasks, responses, self.part_timeout_s) for p, b in zip(self.parts, blocking) if b]
        io = iter(await io_future)
        cpu_iter = iter(cpu)
        return [next(cpu_iter) if b else next(io) for b in blocking]

    def _combine(self, verdicts: list[Verdict]) -> Verdict:
        breakdown: dict[str, float] = {}
        notes: list[str] = []
        failed_status: VerdictStatus | None = None
        total = weight = 0.0
        gated = False
        ran: list[tuple[RubricPart, Verdict]] = []
        for part, v in zip(self.parts, verdicts):
            if not v.ok:
                notes.append(f"{part.name}: {v.status.value}{' (optional, left out)' if part.optional else ''}: {v.details}")
                if not part.optional and failed_status is not VerdictStatus.ERROR:
                    failed_status = v.status
                continue
            ran.append((part, v))
            breakdown[part.name] = v.score
            total += part.weight * v.score
            weight += part.weight
            if part.gate and not v.passed:
                gated = True
            if not v.passed and v.details:
                notes.append(f"{part.name}: {v.details}")
        details = "; ".join(notes)
        info: dict[str, Any] = {p.name: v.info for p, v in zip(self.parts, verdicts, strict=True) if v.info}
        if failed_status is not None or weight <= 0:
            status = failed_status or VerdictStatus.ERROR
            if failed_status is None:
                details = "; ".join(["no weighted rubric part ran", *notes])
            return Verdict(0.0, False, status, details=details, breakdown=breakdown, info=info)
        value = 0.0 if gated else total / weight
        outcome = [v for p, v in ran if p.role == "outcome"] or [v for _, v in ran]
        passed = all(v.passed for v in outcome) and not gated
        if self.pass_threshold is not None:
            passed = passed and value >= self.pass_threshold
        if gated:
            details = "gate failed: score 0; " + details
        return Verdict(value, passed, details=details, breakdown=breakdown, info=info)


def _part(raw: Any, index: int) -> RubricPart:
    if not isinstance(raw, dict) or "verifier" not in raw:
        raise ValueError(f"rubric part {index}: expected an object with a 'verifier' key, got {raw!r}")
    unknown = set(raw) - {"verifier", "weight", "role", "optional", "gate", "name"}
    if unknown:
        raise ValueError(f"rubric part {index}: unknown keys {sorted(unknown)}")
    spec: VerifierSpec = raw["verifier"]
    return RubricPart(
        verifier=make_verifier(spec),
        weight=float(raw.get("weight", 1.0)),
        role=raw.get("role", "outcome"),
        optional=bool(raw.get("optional", False)),
        gate=bool(raw.get("gate", False)),
        name=str(raw.get("name", "")),
    )


@register_verifier("rubric")
def _rubric(parts: list[dict[str, Any]], pass_threshold: float | None = None, part_timeout_s: float | None = None) -> Rubric:
    if not isinstance(parts, list):
        raise ValueError(f"rubric 'parts' must be a list, got {type(parts).__name__}")
    return Rubric([_part(p, i) for i, p in enumerate(parts)], pass_threshold=pass_threshold, part_timeout_s=part_timeout_s)
