"""The records of one agent episode: tool calls, their results, turns, and the `Episode` itself.

Covers: `ToolCall` (a parsed or native call; the record lives in `types.py`, shared with `posttrain serve`,
and is re-exported here), `ToolResult` (what a call gave back: always an
observation, never an exception), `AgentTurn` (one model call: the exact context ids the model saw,
the completion it sampled with its behaviour logprobs and policy version, the calls, the observation
ids appended after it), `EpisodeStatus`, `PhaseTimes` and `Episode` with `to_trajectory()` (the
learner's `types.Trajectory`: a turn whose context is not an append-only extension of the previous
one starts a new segment, by `Trajectory.segments`) and `to_dict()` / `from_dict()` (the run store's
JSON, without token ids unless asked).
Does not cover: producing episodes (`runtime.py`), storing them (`store/run_store.py`).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from posttrain.types import (
    Completion,
    FinishReason,
    RolloutStatus,
    Task,
    ToolCall,
    Trajectory,
    Turn,
    Verdict,
    VerdictStatus,
)


@dataclass(slots=True)
class ToolResult:
    """What one call gave back. `ok` False: the call failed (bad arguments, timeout, a crash); the
    `output` says why, and the model reads it like any other observation."""

    call: ToolCall
    output: str
    ok: bool = True
    seconds: float = 0.0
    elided_chars: int = 0  # cut from the middle of the output by the tool's cap
    ends_episode: bool = False  # `submit`
    env_error: bool = False  # the sandbox itself failed: the episode's environment is not trustworthy
    images: list[bytes] = field(default_factory=list)  # PNGs beside the output (`render`): image parts for a chat endpoint
    unknown_tool: bool = False  # the call named no tool the episode has (its name is the model's text, unbounded)


class EpisodeStatus(str, enum.Enum):
    """How an episode ended. SOLVED/FAILED: it ran to its end and was judged; the others say what cut it."""

    SOLVED = "solved"
    FAILED = "failed"
    MAX_STEPS = "max_steps"
    TIMEOUT = "timeout"
    CONTEXT_EXHAUSTED = "context_exhausted"
    FORMAT_ERRORS = "format_errors"  # too many malformed calls in a row
    ENV_ERROR = "env_error"  # the sandbox or the endpoint failed: masked in training, never scored 0


@dataclass(slots=True)
class AgentTurn:
    """One model call of an episode.

    `context_ids + completion.token_ids + observation_ids` is the next turn's context unless the
    context policy rewrote history before it (`rewrote` on that next turn). Remote chat endpoints
    give no ids: their turns hold text only (`context_ids` empty) and do not train.
    """

    # ids stay out of repr: asyncio formats a finished task's result into a message when `asyncio.run` restores
    # its signal handler, and a long episode's ids would take seconds to print
    context_ids: list[int] = field(repr=False)  # [T_context] exactly what the engine saw
    completion: Completion = field(repr=False)  # sampled ids, behaviour logprobs, policy version
    observation_ids: list[int] = field(default_factory=list, repr=False)  # [T_observation] appended after the completion
    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    observation: str = ""  # the observation's text (what observation_ids encode)
    kind: str = "act"  # "act", "summary" (a compaction turn: the model summarised its own history) or "given" (a
    # first attempt the task supplied, `AgentTask.opening`: never sampled, so part of the next turn's context, never trained)
    format_error: str = ""  # why the completion held no valid call
    rewrote: bool = False  # the context policy rewrote history before this turn (a new training segment)
    context_tokens: int = 0  # len(context_ids), or the endpoint's prompt tokens
    trains: bool = True  # False: context only for the learner (a given turn, or a sampled opening with `Opening.trains` off)


@dataclass(slots=True)
class PhaseTimes:
    """Wall seconds by phase; `overhead_s` is the runtime's own share (rendering, parsing, bookkeeping)."""

    model_s: float = 0.0
    tools_s: float = 0.0
    verification_s: float = 0.0
    setup_s: float = 0.0  # session and task files ready
    total_s: float = 0.0

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.total_s - self.model_s - self.tools_s - self.verification_s - self.setup_s)


_ROLLOUT = {
    EpisodeStatus.SOLVED: RolloutStatus.OK,
    EpisodeStatus.FAILED: RolloutStatus.OK,
    EpisodeStatus.MAX_STEPS: RolloutStatus.TRUNCATED,
    EpisodeStatus.TIMEOUT: RolloutStatus.TRUNCATED,
    EpisodeStatus.CONTEXT_EXHAUSTED: RolloutStatus.TRUNCATED,
    EpisodeStatus.FORMAT_ERRORS: RolloutStatus.TRUNCATED,
    EpisodeStatus.ENV_ERROR: RolloutStatus.ENV_ERROR,
}


@dataclass(slots=True)
class Episode:
    """One attempt at an agent task, with everything training, evaluation and replay need."""

    task_id: str
    turns: list[AgentTurn] = field(repr=False)  # see AgentTurn: a repr must stay small
    status: EpisodeStatus
    verdict: Verdict | None = None
    tokens_in: int = 0  # context tokens sent over all model calls
    tokens_out: int = 0  # sampled tokens
    cost_usd: float = 0.0
    times: PhaseTimes = field(default_factory=PhaseTimes)
    format_errors: int = 0  # malformed calls over the whole episode
    error: str = ""  # what failed, for ENV_ERROR (and the reason of other early ends)
    submitted: str | None = None  # the argument of `submit`, when the model called it
    instruction: str = ""

    @property
    def steps(self) -> int:
        """Acting model calls (summary turns of compaction excluded)."""
        return sum(1 for t in self.turns if t.kind == "act")

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.ok and self.verdict.passed

    @property
    def reward(self) -> float | None:
        return self.verdict.score if self.verdict is not None and self.verdict.ok else None

    def to_trajectory(self, task: Task | None = None) -> Trajectory:
        """The learner's view: one `Turn` per sampled model call, ids exactly as sampled and seen (never
        re-tokenised; a "given" turn is context of the next); rewritten history starts a new segment
        (`Trajectory.segments`)."""
        if any(not t.context_ids for t in self.turns):
            raise ValueError(f"episode {self.task_id!r} holds turns without token ids (a remote chat endpoint): "
                             "it can be evaluated and replayed, not trained on")
        turns = [Turn(list(t.context_ids), t.completion, list(t.observation_ids), t.trains)
                 for t in self.turns if t.kind != "given"]
        verdict = self.verdict
        if verdict is None:
            verdict = Verdict(0.0, False, VerdictStatus.ERROR, details=self.error or "not verified")
        return Trajectory(task or Task(self.task_id, self.instruction), turns, verdict, _ROLLOUT[self.status])

    def to_dict(self, ids: bool = False) -> dict[str, Any]:
        """JSON-ready; token ids only with `ids=True` (a transcript for people does not need them)."""
        turns = []
        for t in self.turns:
            d: dict[str, Any] = {
                "kind": t.kind, "text": t.completion.text, "finish": t.completion.finish_reason.value,
                "policy_version": t.completion.policy_version, "calls": [asdict(c) for c in t.calls],
                "results": [{"name": r.call.name, "ok": r.ok, "seconds": r.seconds, "elided_chars": r.elided_chars,
                             "env_error": r.env_error, "unknown_tool": r.unknown_tool} for r in t.results],
                "observation": t.observation, "format_error": t.format_error, "rewrote": t.rewrote, "trains": t.trains,
                "context_tokens": t.context_tokens, "sampled_tokens": len(t.completion.token_ids),
            }
            if ids:
                d.update(context_ids=t.context_ids, token_ids=t.completion.token_ids, logprobs=t.completion.logprobs,
                         observation_ids=t.observation_ids)
            turns.append(d)
        v = self.verdict
        return {
            "task_id": self.task_id, "status": self.status.value, "passed": self.passed, "reward": self.reward,
            "steps": self.steps, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out, "cost_usd": self.cost_usd,
            "format_errors": self.format_errors, "error": self.error, "submitted": self.submitted,
            "instruction": self.instruction,
            "times": {"model_s": self.times.model_s, "tools_s": self.times.tools_s,
                      "verification_s": self.times.verification_s, "setup_s": self.times.setup_s,
                      "total_s": self.times.total_s},
            "verdict": None if v is None else {"score": v.score, "passed": v.passed, "status": v.status.value,
                                               "verifier": v.verifier, "details": v.details, "info": v.info},
            "turns": turns,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Episode":
        """An episode read back from `to_dict` (ids empty when they were not stored)."""
        turns = []
        for t in d["turns"]:
            comp = Completion(list(t.get("token_ids", [])), t["text"], list(t.get("logprobs", [])),
                              FinishReason(t["finish"]), t["policy_version"])
            calls = [ToolCall(c["name"], c["arguments"], c.get("id", "")) for c in t["calls"]]
            by_name = iter(calls)
            results = [ToolResult(next(by_name, ToolCall(r["name"], {})), "", r["ok"], r["seconds"], r["elided_chars"],
                                  env_error=r["env_error"], unknown_tool=r.get("unknown_tool", False))
                       for r in t["results"]]
            turns.append(AgentTurn(list(t.get("context_ids", [])), comp, list(t.get("observation_ids", [])), calls,
                                   results, t["observation"], t["kind"], t["format_error"], t["rewrote"],
                                   t["context_tokens"], t.get("trains", True)))
        v = d.get("verdict")
        verdict = None if v is None else Verdict(v["score"], v["passed"], VerdictStatus(v["status"]), v["verifier"],
                                                 v["details"], info=v.get("info", {}))
        return cls(d["task_id"], turns, EpisodeStatus(d["status"]), verdict, d["tokens_in"], d["tokens_out"],
                   d["cost_usd"], PhaseTimes(**d["times"]), d["format_errors"], d["error"], d.get("submitted"),
                   d.get("instruction", ""))
