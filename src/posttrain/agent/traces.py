"""Oracle episodes as token sequences: what the built-in agent bases (`recipes/builtin.py`) pre-train on.

Covers: `call_value_span` (a call's ids and where its value lies in them), `episode_trace` (the ids of an episode
exactly as the runtime builds them from the stable prefix, the task's instruction and (call, tool answer) pairs,
with which tokens the model samples and which of those are a call's argument value, the tokens that decide the
episode; with the spec's `Opening`, the prompt alone, the bare first answer and EOS, then its observation and the
listing, `opening_ids`) and `instruction_span` (where the instruction lies in it). A domain supplies its spec and its oracle's
steps (`agent/lookup.py`'s `oracle_calls`, `agent/reports.py`'s `oracle_steps`). Does not cover: running episodes
(`runtime.py`), drawing tasks.
"""

from __future__ import annotations

from typing import Any

from posttrain.agent.episode import ToolCall
from posttrain.agent.spec import AgentSpec


def _listing(spec: AgentSpec) -> str:
    """The system text and tool listing: the stable prefix's text, or, with an `Opening`, the `listing` entry's."""
    from posttrain.agent import format as fmt

    return fmt.render_prefix([t.schema() for t in spec.tools or ()], spec.system, spec.tool_listing)


def _head(spec: AgentSpec, instruction: str, codec: Any) -> tuple[list[int], list[int]]:
    """The ids an episode opens with: the stable prefix, then the task's entry (its instruction)."""
    return codec.entry("prefix", _listing(spec)).ids, codec.entry("task", instruction).ids


def call_value_span(call: ToolCall, tokenizer: Any, skip: int = 0) -> tuple[list[int], int, int]:
    """A call's sampled ids as the model writes it (`format.render_call`) and where its (last) argument's value lies
    in them, [start, end), after its first `skip` characters: the tokens that decide an episode."""
    from posttrain.agent import format as fmt

    text = fmt.render_call(call)
    if not call.arguments:  # a call with no argument (`submit()`): no value to copy
        ids = tokenizer.encode(text, add_bos=False)
        return ids, len(ids), len(ids)
    value = str(list(call.arguments.values())[-1])
    at = text.rindex(value)  # the argument's value is the last thing before the closing braces
    start = len(tokenizer.encode(text[: at + skip], add_bos=False))
    end = len(tokenizer.encode(text[: at + len(value)], add_bos=False))
    return tokenizer.encode(text, add_bos=False), start, end


def answer_ids(text: str, tokenizer: Any) -> list[int]:
    """A bare single-turn answer's ids: its text and EOS, as an answer that stops on its own is sampled (the local
    engine keeps the EOS it stopped on)."""
    return tokenizer.encode(text, add_bos=False) + [tokenizer.eos_id]


def opening_ids(spec: AgentSpec, call: ToolCall, tokenizer: Any) -> list[int]:
    """The sampled ids of an opening answer (`spec.Opening`): `answer_ids` of the argument's text."""
    assert spec.opening is not None and call.name == spec.opening.tool, (spec.opening, call.name)
    return answer_ids(str(call.arguments[spec.opening.argument]), tokenizer)


def instruction_span(spec: AgentSpec, instruction: str, tokenizer: Any) -> tuple[int, int]:
    """Where the task's entry lies in `episode_trace`'s ids, as [start, end)."""
    from posttrain.agent.models import TextCodec

    prefix, ids = _head(spec, instruction, TextCodec(tokenizer))
    return len(prefix), len(prefix) + len(ids)


def episode_trace(spec: AgentSpec, instruction: str, steps: list[tuple[ToolCall, str]], tokenizer: Any,
                  decisions: list[bool] | None = None, thoughts: list[str] | None = None) -> tuple[list[int], list[bool]]:
    """The token sequence of an episode that makes `steps`' calls and gets their answers, exactly as the runtime
    builds it (the stable prefix, the task, then per call the sampled call text and the encoded observation; the
    last observation is not included), and which tokens the model samples. When a list is given as `decisions`, it
    is filled with which tokens are a call's (last) argument value: what the agent copies from what it read.
    `thoughts` (one per step, "" for none): text the reply opens with before its call (a quoted line, say), sampled
    too and counted among the decisions (the runtime parses the reply's last call and keeps the reply's ids whole)."""
    from posttrain.agent.models import TextCodec

    codec = TextCodec(tokenizer)
    if spec.opening is None:
        prefix, instruction_ids = _head(spec, instruction, codec)
        ids = prefix + instruction_ids
    else:  # the prompt alone, as a single-turn answer sees it (`spec.Opening`)
        ids = codec.entry("prefix", instruction).ids
    mask = [False] * len(ids)
    if decisions is not None:
        decisions[:] = [False] * len(ids)
    for i, (call, output) in enumerate(steps):
        thought = tokenizer.encode(thoughts[i], add_bos=False) if thoughts and thoughts[i] else []
        if i == 0 and spec.opening is not None:
            sampled, start, end = opening_ids(spec, call, tokenizer), 0, 0
        else:
            sampled, start, end = call_value_span(call, tokenizer)
        sampled, start, end = thought + sampled, start + len(thought), end + len(thought)
        if decisions is not None:
            decisions += [j < len(thought) or start <= j < end for j in range(len(sampled))]
        ids += sampled
        mask += [True] * len(sampled)
        if i < len(steps) - 1:
            seen = codec.entry("observation", output, i + 1, call.name).ids
            if i == 0 and spec.opening is not None:  # the listing follows the opening call's observation
                seen = seen + codec.entry("listing", _listing(spec)).ids
            ids += seen
            mask += [False] * len(seen)
            if decisions is not None:
                decisions += [False] * len(seen)
    return ids, mask
