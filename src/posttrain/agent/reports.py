"""The `docs:reports` domain: questions over long generated company reports, single-turn or as agent episodes.

Covers: the registry entry `docs:reports` (options: `length` in characters, `hops`, `distractors`, `kinds`,
`form` = `prompt` (the whole report in the prompt, the answer in `<answer>` tags) or `agent` (the report as
workspace files, one per section, and tools), `held_out_fraction`, `limit`, `seed`, `max_steps`); the agent
form's tools: `search` (BM25 over the report's line chunks in the episode's SQLite FTS5 memory,
`recall.Memory`: the chunk names give file and lines), the built-in `read_file` (a line range), `calc`
(arithmetic, evaluated over a parsed expression: no code runs) and the built-in `submit`; `agent_task_of`
(the `AgentTask`: files, chunked documents, the gold answer judged by the task's own verifier spec) and
`oracle_calls` (search, read the line of each figure, compute, submit: the proof that the agent form is
solvable with its tools). Both forms judge with the same verifier kinds; the context policies
(truncation, masking, compaction, recall) apply to the agent form unchanged (`AgentSpec.policy`).
Does not cover: generating reports or questions (`tasks/reports.py`, `tasks/report_questions.py`).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from posttrain.agent.env import AgentTask
from posttrain.agent.episode import ToolCall
from posttrain.agent.spec import AgentSpec
from posttrain.agent.tools import ToolContext, ToolOutput, read_file, submit, tool
from posttrain.tasks.domains import Domain, SamplingDefaults, register_domain, reject_unknown
from posttrain.tasks.jsonl import TaskFileError
from posttrain.tasks.report_questions import KINDS, ReportSource
from posttrain.types import Task

CHUNK_LINES = 20  # lines per searchable chunk: a table, or a few paragraphs
SYSTEM = ("You answer questions about a long company report kept in files. Search it, read the lines you need, "
          "compute with calc, and submit the final answer. Tools:\n")

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate(expression: str) -> float:
    """An arithmetic expression's value: numbers (thousands separators allowed), + - * / **, parentheses.
    Anything else is a ValueError (names, calls and attributes never run)."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            if isinstance(node.op, ast.Pow) and abs(ev(node.right)) > 64:
                raise ValueError("exponent too large")
            return _BINARY[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")

    cleaned = expression.replace(",", "").replace("%", "")
    try:
        tree = ast.parse(cleaned, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot parse {expression!r}: {exc.msg}") from None
    return ev(tree.body)


@tool
async def search(ctx: ToolContext, query: str, k: int = 5) -> ToolOutput:
    """Search the report (BM25 over chunks of lines); each hit names its file and line range.

    Args:
        query: words to look for (a label such as T4 or P7, a line item, a segment, a year such as FY2024)
        k: how many hits to return
    """
    if ctx.memory is None:
        return ToolOutput("search is not available in this episode", ok=False)
    hits = [h for h in ctx.memory.search(query, 4 * max(1, min(k, 20)), width=32) if h.source.startswith("document ")]
    if not hits:
        return ToolOutput(f"no matches for {query!r}")
    return ToolOutput("\n".join(f"- {h.source.removeprefix('document ')}: {h.snippet}" for h in hits[: max(1, k)]))


@tool
async def calc(expression: str) -> ToolOutput:
    """Evaluate arithmetic (numbers, + - * / ** and parentheses).

    Args:
        expression: for example 100 * (1234 - 1100) / 1100
    """
    try:
        value = evaluate(expression)
    except (ValueError, ZeroDivisionError, OverflowError) as exc:
        return ToolOutput(f"calc failed: {exc}", ok=False)
    return ToolOutput(f"{value:.6g}" if abs(value) >= 1e6 else f"{value:.6f}".rstrip("0").rstrip("."))


TOOLS = (search, read_file, calc, submit)


def chunks(files: dict[str, str], lines: int = CHUNK_LINES) -> dict[str, str]:
    """The report as searchable documents: `name lines a-b` -> those lines."""
    out = {}
    for name, text in files.items():
        rows = text.splitlines()
        for lo in range(0, len(rows), lines):
            out[f"{name} lines {lo + 1}-{min(lo + lines, len(rows))}"] = "\n".join(rows[lo: lo + lines])
    return out


def agent_task_of(task: Task) -> AgentTask:
    """The episode a `docs:reports` task (agent form) stands for: the report's files, its chunks for `search`,
    the gold answer judged by the task's verifier spec."""
    from posttrain.rewards.registry import make_verifier

    files = task.meta.get("files")
    if not isinstance(files, dict) or task.answer is None or "verifier" not in task.meta:
        raise TaskFileError(f"task {task.id!r} is not a docs:reports task of the agent form (no files or answer)")
    return AgentTask(task.id, task.prompt, files=dict(files), documents=chunks(files), answer=task.answer,
                     answer_verifier=make_verifier(task.meta["verifier"]), tools=TOOLS, timeout_s=600.0,
                     meta={k: task.meta[k] for k in ("kind", "hops", "length") if k in task.meta})


def oracle_calls(task: Task) -> list[ToolCall]:
    """Calls that solve `task` with the agent form's tools: per figure, a search and a read of its line; then
    the arithmetic, then the answer. An audit question reads the planted label (or the contents, for none)."""
    calls: list[ToolCall] = []
    for ev in task.meta.get("evidence", []):
        *words, year = ev["key"].replace("_", " ").split(":")
        words = " ".join(words + [f"FY{year}"])
        calls.append(ToolCall("search", {"query": words, "k": 3}))
        calls.append(ToolCall("read_file", {"path": ev["file"], "start_line": ev["line"], "max_lines": 1}))
    if task.meta.get("planted"):
        calls.append(ToolCall("search", {"query": task.meta["planted"], "k": 1}))
    elif task.meta.get("kind") == "none":
        calls.append(ToolCall("read_file", {"path": "00_contents.md"}))
    if task.meta.get("expression"):
        calls.append(ToolCall("calc", {"expression": task.meta["expression"]}))
    calls.append(ToolCall("submit", {"answer": task.answer}))
    return calls


SPEC = AgentSpec(load=agent_task_of, tools=TOOLS, system=SYSTEM, max_steps=24, max_format_errors=3, max_tokens=512)
_OPTIONS = ("length", "hops", "distractors", "kinds", "form", "held_out_fraction", "limit", "seed", "max_steps")


@register_domain("docs:", "long company reports (reports): lookups, cross-table checks, computed figures, audits")
def _docs_domain(name: str, **options: Any) -> Domain:
    from dataclasses import replace

    from posttrain.rewards.registry import PerTask

    spec_name = f"docs:{name}"
    if name != "reports":
        raise TaskFileError(f"unknown docs domain {spec_name}: the built-in one is docs:reports")
    reject_unknown(spec_name, options, _OPTIONS)
    kinds = options.get("kinds", KINDS)
    if isinstance(kinds, str):
        kinds = tuple(k.strip() for k in kinds.split(",") if k.strip())
    hops = options.get("hops", 3)
    if "kinds" not in options:  # the default: every kind the hops allow
        kinds = KINDS if hops >= 2 else ("lookup",)
    try:
        source = ReportSource(length=options.get("length", 6000), hops=hops, distractors=options.get("distractors", 2),
                              kinds=tuple(kinds), form=options.get("form", "prompt"),
                              held_out_fraction=options.get("held_out_fraction", 0.15))
    except (TypeError, ValueError) as exc:
        raise TaskFileError(f"{spec_name}: {exc}") from None
    limit, seed = options.get("limit", 100), options.get("seed", 0)
    agent = source.form == "agent"
    spec = replace(SPEC, max_steps=int(options.get("max_steps", SPEC.max_steps))) if agent else None
    return Domain(
        spec_name, source, PerTask(),
        evaluation=lambda n, s: source.take(100 if n is None else n, "held_out", seed=s),
        sampling=SamplingDefaults(max_tokens=SPEC.max_tokens if agent else 1024),
        rollouter="agent" if agent else "single_turn", agent=spec,
        description=(f"held-out questions over ~{source.length}-character reports ({', '.join(source.kinds)}; "
                     f"hops <= {source.hops}, distractors {source.distractors}; {source.form} form)"),
        meta={"length": source.length, "hops": source.hops, "distractors": source.distractors,
              "kinds": list(source.kinds), "form": source.form, "limit": limit, "seed": seed, "null_response": ""},
        eval_limit=limit, eval_seed=seed,
    )
