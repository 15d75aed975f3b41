"""Plain records shared by every package: tasks, completions, groups, verdicts.

Covers: the data that flows through the RL loop and evaluation
(`Task` -> `Completion` -> `Verdict` -> `Group`), and the sampling parameters
every engine understands.
Does not cover: behaviour. These are dataclasses with validation of their own
fields only; logic lives in the packages that produce or consume them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Task:
    """One prompt plus the criteria that accept an answer to it.

    `answer` is the gold answer the verifier compares against (and that must
    itself score full marks). `meta` carries whatever a verifier or a
    curriculum needs: difficulty, family, tolerance, tests.
    """

    id: str
    prompt: str
    answer: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class FinishReason(str, enum.Enum):
    STOP = "stop"  # an end-of-sequence token or a stop string
    LENGTH = "length"  # max_tokens reached


@dataclass(slots=True)
class Completion:
    """One sampled continuation of a prompt.

    `logprobs[i]` is the log-probability of `token_ids[i]` under the
    distribution that was actually sampled from (after temperature), computed
    by the engine: the behaviour policy for importance correction.
    """

    token_ids: list[int]  # [T_completion], excluding the prompt
    text: str
    logprobs: list[float]  # [T_completion]
    finish_reason: FinishReason
    policy_version: int = 0


class VerdictStatus(str, enum.Enum):
    OK = "ok"  # the verifier ran; score is meaningful (right or wrong)
    ERROR = "error"  # the verifier itself failed: excluded from advantages
    TIMEOUT = "timeout"  # the verifier ran out of time: excluded from advantages


@dataclass(slots=True)
class Verdict:
    """A verifier's judgement of one completion.

    Only `status == OK` verdicts carry signal; errored ones are kept, stored
    and counted, but never scored as 0 silently.
    """

    score: float
    passed: bool
    status: VerdictStatus = VerdictStatus.OK
    verifier: str = ""  # "<name>@<version hash>", so results trace to checking code
    details: str = ""
    breakdown: dict[str, float] = field(default_factory=dict)  # per-part scores of a composite (Rubric)
    latency_s: float | None = None  # time the verifier spent on this item (set by `rewards.score`)

    @property
    def ok(self) -> bool:
        return self.status is VerdictStatus.OK


@dataclass(slots=True)
class Trajectory:
    """A completion together with the prompt tokens it continued and its verdict."""

    task: Task
    prompt_ids: list[int]  # [T_prompt]
    completion: Completion
    verdict: Verdict | None = None


@dataclass(slots=True)
class Group:
    """The n samples drawn for one task: the unit GRPO normalises over."""

    task: Task
    trajectories: list[Trajectory]

    @property
    def rewards(self) -> list[float]:
        return [t.verdict.score if t.verdict is not None else float("nan") for t in self.trajectories]

    @property
    def valid(self) -> list[bool]:
        return [t.verdict is not None and t.verdict.ok for t in self.trajectories]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample. `temperature == 0` means greedy decoding.

    Filters apply in HF's order: temperature, top-k, top-p, min-p. A stop
    string ends a completion and is cut from its text (its tokens stay in
    `token_ids`); EOS ends one unless `ignore_eos`.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    max_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    min_p: float = 0.0  # drop tokens less likely than min_p x the most likely one; 0 disables
    stop: tuple[str, ...] = ()  # stop strings
    ignore_eos: bool = False  # keep going past EOS (benchmarks that need a fixed length)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0, got {self.top_k}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1], got {self.min_p}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must hold non-empty strings, got {self.stop!r}")
