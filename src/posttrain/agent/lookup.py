"""The `agent:lookup` domain: multi-hop lookups across workspace files, the built-in multi-turn task.

A task asks for the value of a key (`Find the value of qx. Start in the file start.`). The workspace
holds a chain of small files: each has `lines` lines, one per key, either a pointer (`qx -> k`: look
in file k) or a value (`qx = 7`); the task's key points `hops - 1` times before it reaches its
value, the other lines are distractors for other keys. File names and values are single characters
(a letter or a digit: the built-in character-level model copies one token per decision, which it
learns in minutes; a longer copy takes it far longer). The value exists only in the workspace, so a
single-turn answer is right one time in 36; an agent must read the files in order (`read`), follow
its own key and `submit` the value. `hops` is the difficulty knob; `lines` (3 by default) puts other
keys' pointers and values beside the task's own line in every file, so following the chain means reading it.

Covers: `LookupSource` (the generator; the split and the canonical problem are the task's chain of
files and its value, `twin_key`: two tasks that differ only in the key's name or the distractors ask
for the same reads and the same answer, so no held-out task has such a twin in training), the domain's
two compact tools (`read`, `submit`: short schemas keep the stable prefix small
and the compact signature listing keep the stable prefix near 120 characters for the built-in
character-level model), `agent_task_of` (the `AgentTask` a `Task` carries: files and
gold answer, judged on the submitted answer by exact match), `oracle_calls` (the calls that solve a
task, what the built-in base is pre-trained on; `oracle_trace` their tokens and `instruction_span` where the
trace's instruction lies), and the registry entry `agent:lookup` with its
`AgentSpec`, whose process score (`chain_progress`: the share of the chain read in order;
blended into the training reward with the domain option `process_weight`, 0 by default) gives the
failed episodes of a group partial credit. Its single-response view (`posttrain eval --suite agent:lookup`
on a plain model) judges the response as the answer: the chance baseline.
Does not cover: pre-training on the oracle's traces (`recipes/builtin.py`), running episodes (`runtime.py`).
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from dataclasses import dataclass
from typing import Any

from posttrain.agent.env import AgentTask
from posttrain.agent.episode import ToolCall
from posttrain.agent.spec import AgentSpec
from posttrain.agent.tools import ToolContext, submit_short, tool
from posttrain.tasks.base import GeneratedSource, Split, split_of
from posttrain.tasks.domains import Domain, SamplingDefaults, register_domain, reject_unknown
from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import Task

SYSTEM = "Find the answer in the files. Tools:\n"
START = "start"
SYMBOLS = string.ascii_lowercase + string.digits  # file names and values: one character each
MAX_TOKENS = 80  # one call: `<tool_call>{"name": "submit", "arguments": {"answer": "7"}}</tool_call>` is 71
# characters; the stop string ends a good reply, and one that has not closed its call by then is a format error


@tool
async def read(ctx: ToolContext, path: str) -> str:
    """Show a file."""
    return await ctx.read(path)


TOOLS = (read, submit_short)


@dataclass(frozen=True)
class LookupSource(GeneratedSource):
    """Lookup tasks of `min_hops`..`hops` hops, `lines` lines per file (one is the task's key, the others
    distractors)."""

    hops: int = 3
    min_hops: int = 1
    lines: int = 3
    held_out_fraction: float = 0.15

    def __post_init__(self) -> None:
        if not 1 <= self.min_hops <= self.hops <= 8:
            raise ValueError(f"need 1 <= min_hops <= hops <= 8, got min_hops={self.min_hops}, hops={self.hops}")
        if not 1 <= self.lines <= 8:
            raise ValueError(f"lines must be in 1..8, got {self.lines}")
        if self.hops * (self.lines + 1) > len(SYMBOLS):  # the file names a task draws, all distinct symbols
            raise ValueError(f"hops x (lines + 1) must be at most {len(SYMBOLS)} (one-character file names), "
                             f"got hops={self.hops}, lines={self.lines}")
        if not 0 < self.held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must be in (0, 1), got {self.held_out_fraction}")

    @property
    def name(self) -> str:
        return f"lookup-h{self.min_hops}to{self.hops}-l{self.lines}"

    def _draw(self, rng: random.Random) -> Task:
        hops = rng.randint(self.min_hops, self.hops)
        keys = rng.sample([a + b for a in string.ascii_lowercase for b in string.ascii_lowercase], self.lines)
        key = keys[0]
        names = rng.sample(SYMBOLS, hops + self.lines * hops)
        chain = [START] + names[: hops - 1]  # the files the task's key passes through
        spare = names[hops - 1:]
        value = rng.choice(SYMBOLS)
        files: dict[str, str] = {}
        for depth, name in enumerate(chain):
            last = depth == hops - 1
            rows = [f"{key} = {value}" if last else f"{key} -> {chain[depth + 1]}"]
            for other in keys[1:]:  # distractors: other keys' pointers (to files that may not exist) or values
                rows.append(f"{other} -> {spare.pop()}" if rng.random() < 0.5 else f"{other} = {rng.choice(SYMBOLS)}")
            rng.shuffle(rows)
            files[name] = "\n".join(rows)
        blob = json.dumps({"key": key, "files": files}, sort_keys=True)
        digest = hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()
        return Task(
            id=f"lookup:{digest}",
            prompt=instruction(key),
            answer=value,
            meta={"files": files, "key": key, "hops": hops, "chain": chain, "split_key": twin_key(chain, value),
                  "difficulty": hops, "rollouter": "agent"},
        )

    def split_of(self, task: Task) -> Split:
        return split_of(f"lookup:{task.meta['split_key']}", self.held_out_fraction)


def twin_key(chain: list[str], value: str) -> str:
    """The canonical problem of a lookup: the files it reads, in order, and the answer it submits. Tasks that share
    it (another key name, other distractors) are twins: the same actions solve them, so they share a split."""
    blob = json.dumps({"chain": list(chain), "value": value})
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


def instruction(key: str) -> str:
    return f"Find the value of {key}. Start in the file {START}."


def agent_task_of(task: Task) -> AgentTask:
    """The episode a lookup `Task` stands for: its files in the workspace, judged on the submitted answer."""
    files = task.meta.get("files")
    if not isinstance(files, dict) or task.answer is None:
        raise TaskFileError(f"task {task.id!r} is not a lookup task (no meta['files'] or no answer)")
    return AgentTask(task.id, task.prompt, files=dict(files), answer=task.answer, tools=TOOLS, timeout_s=120.0,
                     meta={k: task.meta[k] for k in ("hops", "key") if k in task.meta})


def chain_progress(episode: Any, task: Task) -> float:
    """The share of the task's chain the episode read in order: the longest prefix of `meta["chain"]` that
    its successful `read` calls contain as a subsequence (a wrong read in between costs nothing once the
    right file follows), over the chain's length. A reward shaping part, not a verdict: it tells apart the
    failed episodes of a group that lost the key at the first hop from those that lost it at the last."""
    chain = task.meta.get("chain") or []
    if not chain:
        return 0.0
    got = 0
    for turn in episode.turns:
        for result in turn.results:
            if got < len(chain) and result.ok and result.call.name == "read" \
                    and result.call.arguments.get("path") == chain[got]:
                got += 1
    return got / len(chain)


def oracle_calls(task: Task) -> list[tuple[ToolCall, str]]:
    """The calls that solve `task`, each with what the tool answers (the file's text; "submitted")."""
    files, chain = task.meta["files"], task.meta["chain"]
    out = [(ToolCall("read", {"path": name}), files[name]) for name in chain]
    out.append((ToolCall("submit", {"answer": task.answer}), "submitted"))
    return out


def oracle_quotes(task: Task) -> list[str]:
    """Per oracle call, the line of evidence a quoting oracle writes before it: nothing before the first `read`, then
    the key's line of the file just read (`kb -> 7`, `kb = 8`) and a newline. Writing the key first (a copy from the
    instruction or the previous quote) puts the line to find right behind the model, so the value is one more copy."""
    files, chain, key = task.meta["files"], task.meta["chain"], task.meta["key"]
    lines = [next(line for line in files[name].splitlines() if line.split(" ", 1)[0] == key) for name in chain]
    return ["", *(line + "\n" for line in lines)]


def instruction_span(task: Task, tokenizer: Any) -> tuple[int, int]:
    """Where the task's entry (the instruction: which key to follow) lies in `oracle_trace(task, tokenizer)`'s ids,
    as [start, end)."""
    from posttrain.agent import traces

    return traces.instruction_span(SPEC, task.prompt, tokenizer)


def oracle_trace(task: Task, tokenizer: Any, decisions: list[bool] | None = None,
                 quote: bool = False) -> tuple[list[int], list[bool]]:
    """The token sequence of the oracle's episode exactly as the runtime builds it, and which tokens the model
    samples (`traces.episode_trace`). The base model is pre-trained on these. When a list is given as `decisions`,
    it is filled with which tokens are a call's argument value (what the agent copies from what it read: the tokens
    that decide the episode). `quote`: the quoting oracle's episode (`oracle_quotes` before each call)."""
    from posttrain.agent import traces

    return traces.episode_trace(SPEC, task.prompt, oracle_calls(task), tokenizer, decisions,
                                oracle_quotes(task) if quote else None)


SPEC = AgentSpec(load=agent_task_of, tools=TOOLS, system=SYSTEM, max_steps=8, max_format_errors=2,
                 max_tokens=MAX_TOKENS, tool_listing="signature", process=chain_progress)
# The process score is the chain's progress alone. Averaged with `well_formed`, one run learned to read `start`
# and submit what it saw: two well-formed calls outscored a longer attempt with one malformed call, and the
# training pass rate fell to 0 on multi-hop tasks (benchmarks/RESULTS.md, "process score").
_OPTIONS = ("hops", "min_hops", "lines", "held_out_fraction", "limit", "seed", "max_steps", "process_weight")


@register_domain("agent:", "built-in agent tasks (lookup: follow notes across workspace files to a value)", knob="hops",
                 members=lambda leveled: ["lookup"])
def _agent_domain(name: str, **options: Any) -> Domain:
    from dataclasses import replace

    from posttrain.rewards.verifiers import ExactMatch

    if name != "lookup":
        raise TaskFileError(f"unknown agent domain agent:{name}: the built-in one is agent:lookup")
    reject_unknown(f"agent:{name}", options, _OPTIONS)
    try:
        source = LookupSource(hops=options.get("hops", 3), min_hops=options.get("min_hops", 1),
                              lines=options.get("lines", 3), held_out_fraction=options.get("held_out_fraction", 0.15))
    except ValueError as exc:
        raise TaskFileError(f"agent:lookup: {exc}") from None
    weight = options.get("process_weight", SPEC.process_weight)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0.0 <= weight <= 1.0:
        raise TaskFileError(f"agent:lookup: process_weight must be a number in [0, 1], got {weight!r}")
    spec = replace(SPEC, max_steps=int(options.get("max_steps", SPEC.max_steps)), process_weight=float(weight))
    limit, seed = options.get("limit", 200), options.get("seed", 0)
    return Domain(
        "agent:lookup", source, ExactMatch(extract="full"),
        evaluation=lambda n, s: source.take(200 if n is None else n, "held_out", seed=s),
        sampling=SamplingDefaults(max_tokens=MAX_TOKENS, stop=("</tool_call>",)),
        rollouter="agent", agent=spec,
        description=f"held-out {source.min_hops}-{source.hops}-hop lookups across workspace files",
        meta={"hops": source.hops, "min_hops": source.min_hops, "lines": source.lines, "limit": limit, "seed": seed,
              "process_weight": spec.process_weight},
        eval_limit=limit, eval_seed=seed,
    )
