"""Plain records shared by every package: tasks, completions, turns, trajectories, groups, verdicts.

Covers: the data that flows through the RL loop and evaluation
(`Task` -> `Turn`s of `Completion`s -> `Trajectory` with a `Verdict` ->
`Group`), the learner's `TokenView` of a trajectory, the sampling
parameters every engine understands, and `ToolCall` (an agent's call, which
the agent runtime and `posttrain serve` both read and write).
Does not cover: behaviour. These are dataclasses with validation of their own
fields only; logic lives in the packages that produce or consume them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

DOMAIN_KEY = "domain"  # Task.meta key naming the task's domain in a run over several domains
MESSAGES_KEY = "messages"  # Task.meta key of a conversational task's messages ([{"role", "content"}], a user turn last)


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
    latency_s: float | None = None  # request to last token, when the engine timed this completion's request alone


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
    info: dict[str, Any] = field(default_factory=dict)  # structured findings (tests passed/total, compiler
    # diagnostics) for programs; `details` is the same for people
    latency_s: float | None = None  # time the verifier spent on this item (set by `rewards.score`)
    outcome: float | None = None  # the verifier's own score when training blended a process score into `score`
    # (an agent domain's `process_weight`); None: `score` is the verifier's own

    @property
    def ok(self) -> bool:
        return self.status is VerdictStatus.OK


class RolloutStatus(str, enum.Enum):
    """How an attempt ended, apart from how well it did (that is the verdict's job)."""

    OK = "ok"  # the rollout ran to its end; the verdict is the signal
    TRUNCATED = "truncated"  # cut by a length or turn budget; still trained on (its verdict says how it did)
    ENV_ERROR = "env_error"  # the environment failed (sandbox error, unreachable endpoint): masked, never scored 0
    ABORTED = "aborted"  # stopped from outside (shutdown, stale policy): masked
    OVERLONG = "overlong"  # the prompt does not fit the model's context: nothing sampled, masked (a failure of the
    # task for this model, which the scheduler counts: a domain whose every prompt is too long retires)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for: `arguments` as parsed JSON (the OpenAI function-call shape)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""  # the endpoint's tool_call id (native calls); "" for the text format


@dataclass(slots=True)
class Turn:
    """One model call: the context the engine saw, what it sampled, and the tokens that came back.

    `context_ids` are the exact ids the engine was given; `observation_ids`
    are appended after the completion before the next call (a tool's output,
    the next user message, template tokens). Nothing here is ever re-tokenised.
    """

    context_ids: list[int]  # [T_context]
    completion: Completion
    observation_ids: list[int] = field(default_factory=list)  # [T_observation]
    trains: bool = True  # False: sampled, but only context for the learner (`spec.Opening.trains`): masked out


@dataclass(slots=True)
class TokenView:
    """What the learner trains on: one append-only token sequence and which of its tokens were sampled.

    `logprobs[t]` is the behaviour log-probability of `ids[t]` where `mask[t]`
    (0.0 elsewhere); `versions[t]` the policy version that sampled it (-1
    elsewhere). `mask[0]` is always False: a context is never empty.
    """

    ids: list[int]  # [T]
    logprobs: list[float]  # [T]
    mask: list[bool]  # [T] true only on sampled tokens
    versions: list[int]  # [T]

    def __len__(self) -> int:
        return len(self.ids)


def _extends(longer: list[int], prefix: list[int]) -> bool:
    return len(longer) >= len(prefix) and longer[: len(prefix)] == prefix


@dataclass(slots=True)
class Trajectory:
    """One attempt at a task: its turns, the verdict on it, and how the rollout ended.

    A single-turn rollout is the one-turn case (`Trajectory.single_turn`).
    `segments()` gives the learner its token views: one per run of turns
    whose contexts extend each other append-only; a context that rewrites
    history (compaction, a sub-agent) starts a new segment, and every segment
    is a training sample carrying the episode's advantage.
    """

    task: Task
    turns: list[Turn]
    verdict: Verdict | None = None
    status: RolloutStatus = RolloutStatus.OK

    @classmethod
    def single_turn(
        cls, task: Task, prompt_ids: list[int], completion: Completion, verdict: Verdict | None = None
    ) -> "Trajectory":
        return cls(task, [Turn(list(prompt_ids), completion)], verdict)

    @property
    def prompt_ids(self) -> list[int]:
        """The first context: the rendered task prompt."""
        return self.turns[0].context_ids

    @property
    def completion(self) -> Completion:
        """The last turn's completion: the response a single-turn verifier judges."""
        return self.turns[-1].completion

    @property
    def sampled_tokens(self) -> int:
        return sum(len(t.completion.token_ids) for t in self.turns)

    @property
    def trainable(self) -> bool:
        """Carries signal: an OK verdict and an environment that did not fail."""
        return (
            self.verdict is not None
            and self.verdict.ok
            and self.status in (RolloutStatus.OK, RolloutStatus.TRUNCATED)
        )

    def segments(self) -> list[TokenView]:
        """The append-only token views of this attempt, in order (one for a single-turn rollout)."""
        views: list[TokenView] = []
        ids: list[int] = []
        logp: list[float] = []
        mask: list[bool] = []
        vers: list[int] = []
        for turn in self.turns:
            ctx = turn.context_ids
            if not ctx:
                raise ValueError(f"trajectory of task {self.task.id!r}: a turn with an empty context")
            if ids and not _extends(ctx, ids):  # history rewritten: close the segment, start afresh
                views.append(TokenView(ids, logp, mask, vers))
                ids, logp, mask, vers = [], [], [], []
            grow = len(ctx) - len(ids)  # context tokens not yet in the view (the whole context, or what came after)
            ids = ids + ctx[len(ids):]
            logp += [0.0] * grow
            mask += [False] * grow
            vers += [-1] * grow
            c = turn.completion
            if len(c.logprobs) != len(c.token_ids):
                raise ValueError(f"trajectory of task {self.task.id!r}: {len(c.token_ids)} tokens but {len(c.logprobs)} logprobs")
            ids += c.token_ids
            n = len(c.token_ids)
            logp += c.logprobs if turn.trains else [0.0] * n
            mask += [turn.trains] * n
            vers += [c.policy_version if turn.trains else -1] * n
            ids += turn.observation_ids
            logp += [0.0] * len(turn.observation_ids)
            mask += [False] * len(turn.observation_ids)
            vers += [-1] * len(turn.observation_ids)
        views.append(TokenView(ids, logp, mask, vers))
        return [_trim(v) for v in views]

    def token_view(self) -> TokenView:
        """The one token view of an append-only attempt; an attempt with rewritten history has several
        (`segments()`), and asking for one view of it is an error."""
        views = self.segments()
        if len(views) != 1:
            raise ValueError(f"trajectory of task {self.task.id!r} has {len(views)} segments: use segments()")
        return views[0]


def _trim(view: TokenView) -> TokenView:
    """Drop trailing unsampled tokens (the last observation): nothing after them is trained on."""
    end = len(view.mask)
    while end > 1 and not view.mask[end - 1]:
        end -= 1
    if end == len(view.mask) or not any(view.mask):
        return view
    return TokenView(view.ids[:end], view.logprobs[:end], view.mask[:end], view.versions[:end])


@dataclass(slots=True)
class Group:
    """The n samples drawn for one task: the unit GRPO normalises over.

    `episodes` holds the agent episodes behind the trajectories (an `AgentRollouter`'s, one per
    trajectory, in order; empty for single-turn rollouts): they travel with the group from whichever
    process sampled it to the trainer, which stores their transcripts and per-turn metrics.
    """

    task: Task
    trajectories: list[Trajectory]
    episodes: list[Any] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [t.verdict.score if t.verdict is not None else float("nan") for t in self.trajectories]

    @property
    def outcomes(self) -> list[float]:
        """The verifier's own scores: `rewards` before any process score was blended in (an agent domain's
        `process_weight`, kept in `verdict.outcome`). Whether a group is informative is decided
        on these: a shaping term refines the ranking inside a group whose outcome varies, and never makes a
        group trainable on its own (GRPO's per-group std would blow its small differences up to unit size)."""
        return [float("nan") if t.verdict is None else t.verdict.score if t.verdict.outcome is None
                else t.verdict.outcome for t in self.trajectories]

    def signal_scores(self, signal_from: str) -> list[float]:
        """The scores that decide whether the group has variance (`train.signal_from`): "outcome" (`outcomes`)
        or "reward" (`rewards`)."""
        return self.outcomes if signal_from == "outcome" else self.rewards

    @property
    def valid(self) -> list[bool]:
        """Which trajectories carry signal (OK verdict, environment did not fail): the rest are masked."""
        return [t.trainable for t in self.trajectories]


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
