"""Token in, token out, checked: a record of what an engine was given and sampled, and the episode check against it.

Covers: `RecordingEngine`, a wrapper over any `Engine` that keeps, per `agenerate`/`generate` call,
the exact prompt ids it passed on and the ids and logprobs that came back (independently of the
agent runtime's own bookkeeping), and `tito_mismatch(episode, log)`: None when the learner's
view of the episode (`Episode.to_trajectory().segments()`: ids, sampled-token mask, behaviour
logprobs) is exactly the engine's record (every turn's context is the ids the engine saw; every
sampled token is masked in and every other token masked out; each segment is the last context of its
turns plus the last sampled ids) and every segment break sits on a turn that announced a rewrite
(`AgentTurn.rewrote`: compaction, observation masking), else a one-line reason. The last rule is
what catches silent re-tokenisation: a context that re-encodes earlier sampled text breaks the
append-only chain without announcing it. `benchmarks/agent_rl.py` counts mismatches
over training episodes and the tests use it on every episode they run.
Does not cover: producing episodes; remote chat endpoints (they return no ids: nothing to check).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from posttrain.agent.episode import Episode
from posttrain.engine.base import CompletionDelta, Engine, Prompt
from posttrain.types import Completion, SamplingParams


@dataclass(frozen=True, slots=True)
class Call:
    """One prompt the engine was given and one completion it returned for it."""

    prompt: tuple[int, ...]
    sampled: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass
class RecordingEngine:
    """`engine`, with every (prompt ids, sampled ids, logprobs) it produced kept in `calls` (keyed by the
    completion's identity, so concurrent episodes can look their own turns up)."""

    engine: Engine
    calls: dict[int, Call] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:  # policy_version, tokenizer, usage, max_context, ...
        return getattr(self.engine, name)

    def _keep(self, prompts: list[Prompt], out: list[list[Completion]]) -> list[list[Completion]]:
        for p, group in zip(prompts, out):
            if isinstance(p, list):
                for c in group:
                    self.calls[id(c)] = Call(tuple(p), tuple(c.token_ids), tuple(c.logprobs))
        return out

    def encode(self, prompts: list[str]) -> list[list[int]] | None:
        return self.engine.encode(prompts)

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        return self._keep(prompts, self.engine.generate(prompts, params))

    async def agenerate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        return self._keep(prompts, await self.engine.agenerate(prompts, params))

    def stream(self, prompts: list[Prompt], params: SamplingParams) -> Iterator[CompletionDelta]:
        return self.engine.stream(prompts, params)

    def load_weights(self, state: Mapping[str, Any], version: int) -> None:
        self.engine.load_weights(state, version)


def tito_mismatch(episode: Episode, calls: Mapping[int, Call], rewrites: bool = True) -> str | None:
    """Why the learner's view of `episode` differs from what the engine saw and sampled (None: it does not).

    `rewrites=False` (a context policy that never rewrites history): the episode must be one segment."""
    turns = episode.turns
    if not turns:
        return None
    if not rewrites and any(t.rewrote for t in turns):
        return "a turn announced a history rewrite under a context policy that never rewrites"
    for i, turn in enumerate(turns):
        rec = calls.get(id(turn.completion))
        if rec is None:
            return f"turn {i}: the engine has no record of this completion"
        if tuple(turn.context_ids) != rec.prompt:
            return f"turn {i}: the context differs from the ids the engine was given"
        if tuple(turn.completion.token_ids) != rec.sampled or tuple(turn.completion.logprobs) != rec.logprobs:
            return f"turn {i}: the sampled ids or logprobs differ from what the engine returned"
    for i in range(1, len(turns)):
        prev, rec = calls[id(turns[i - 1].completion)], calls[id(turns[i].completion)]
        before = prev.prompt + prev.sampled
        if not turns[i].rewrote and rec.prompt[: len(before)] != before:
            return (f"turn {i}: the context does not extend turn {i - 1}'s context and sampled ids, "
                    "and no rewrite was announced (re-tokenised history?)")
    views = episode.to_trajectory().segments()
    # rebuild each segment from the engine's record alone: a new segment where a prompt does not extend the last
    expected: list[tuple[list[int], list[bool], list[float]]] = []
    ids: list[int] = []
    mask: list[bool] = []
    logp: list[float] = []
    for turn in turns:
        rec = calls[id(turn.completion)]
        prompt = list(rec.prompt)
        if ids and prompt[: len(ids)] != ids:
            expected.append((ids, mask, logp))
            ids, mask, logp = [], [], []
        grow = len(prompt) - len(ids)
        ids = prompt + list(rec.sampled)
        mask = mask + [False] * grow + [True] * len(rec.sampled)
        logp = logp + [0.0] * grow + list(rec.logprobs)
    expected.append((ids, mask, logp))
    if not rewrites and len(views) != 1:
        return f"{len(views)} training segments under a context policy that never rewrites (one expected)"
    if len(views) != len(expected):
        return f"{len(views)} training segments where the engine's record has {len(expected)}"
    for k, (view, (e_ids, e_mask, e_logp)) in enumerate(zip(views, expected)):
        if view.ids != e_ids[: len(view.ids)] or len(view.ids) != len(e_ids):
            return f"segment {k}: the learner's ids differ from the engine's contexts and samples"
        if view.mask != e_mask:
            return f"segment {k}: the loss mask covers other tokens than the sampled ones"
        if [lp for lp, m in zip(view.logprobs, view.mask) if m] != [lp for lp, m in zip(e_logp, e_mask) if m]:
            return f"segment {k}: the behaviour logprobs differ from the engine's"
    return None
