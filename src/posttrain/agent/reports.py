"""The `docs:reports` domain: questions over long generated company reports, single-turn or as agent episodes.

Covers: the registry entry `docs:reports` (options: `length` in characters, `hops`, `distractors`, `kinds`,
`form` = `prompt` (the whole report in the prompt, the answer in `<answer>` tags) or `agent` (the report as
workspace files, one per section, and tools), `compact` (agent form: see below), `held_out_fraction`, `limit`,
`seed`, `max_steps`); the agent
form's tools: `search` (BM25 over the report's line chunks in the episode's SQLite FTS5 memory,
`recall.Memory`: the chunk names give file and lines), the built-in `read_file` (a line range), `calc`
(arithmetic, evaluated over a parsed expression: no code runs) and the built-in `submit`; `agent_task_of`
(the `AgentTask`: files, chunked documents, the gold answer judged by the task's own verifier spec) and
`oracle_calls` (search, read the line of each figure, compute, submit: the proof that the agent form is
solvable with its tools). The compact agent form (`compact = true`, for a small model's context: an easy episode
is ~500 characters whatever the report's length) lists three short tools by signature (`LINE_TOOLS`: `search`,
`calc`, `submit`), opens with the question alone, and its `search` returns the best-matching line whole as
`file:line: text` (`line_documents`: one document per line, a table row with its table's title and each figure
with its column's year), so no `read` is needed; `oracle_steps` gives its oracle's calls with the tools' answers,
what the `docs:reports` base is pre-trained on. Both forms judge with the same verifier kinds; the context policies
(truncation, masking, compaction, recall) apply to the agent form unchanged (`AgentSpec.policy`).
Does not cover: generating reports or questions (`tasks/reports.py`, `tasks/report_questions.py`).
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from typing import Any

from posttrain.agent.env import AgentTask
from posttrain.agent.episode import ToolCall
from posttrain.agent.spec import AgentSpec
from posttrain.agent.tools import ToolContext, ToolOutput, read_file, submit, submit_short, tool
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
    return calc_output(expression)


def calc_output(expression: str) -> ToolOutput:
    """What `calc` answers (both forms' tools)."""
    try:
        value = evaluate(expression)
    except (ValueError, ZeroDivisionError, OverflowError) as exc:
        return ToolOutput(f"calc failed: {exc}", ok=False)
    return ToolOutput(f"{value:.6g}" if abs(value) >= 1e6 else f"{value:.6f}".rstrip("0").rstrip("."))


TOOLS = (search, read_file, calc, submit)

LINE_SYSTEM = "Answer from the report. Tools:\n"  # the compact form's system text (its listing: signatures)
LINE_HITS = 1  # lines the compact form's search returns: the best match, whole
_STOP = frozenset({"what", "was", "were", "the", "of", "in", "usd", "millions", "s", "a"})


def line_documents(files: dict[str, str]) -> dict[str, str]:
    """The report as one searchable document per non-blank line, `file:line` -> its text. A table row is written
    with its table's label and title and each figure with its column's year (`T7 Consolidated income statement:
    Revenue | FY2026 4,950 | FY2027 5,533`), so one line answers a question without the header above it; a table's
    header and rule lines are not documents."""
    out = {}
    for name, text in files.items():
        title, years = "", []
        for i, row in enumerate(text.splitlines(), 1):
            if row.startswith("Table T"):
                title = row.removeprefix("Table ").split(" (USD")[0].replace(". ", " ", 1)
            cells = [c.strip() for c in row.strip().strip("|").split("|")] if row.startswith("|") else []
            if cells and cells[0] == "Line item":
                years = cells[1:]
                continue
            if cells and set(cells[0]) <= set("-"):
                continue
            if cells and len(cells) == len(years) + 1:
                row = f"{title}: {cells[0]} | " + " | ".join(f"{y} {v}" for y, v in zip(years, cells[1:]))
            if row.strip():
                out[f"{name}:{i}"] = row
    return out


@tool(name="search")
async def search_lines(ctx: ToolContext, query: str) -> ToolOutput:
    """Find the report's best matching line."""
    if ctx.memory is None:
        return ToolOutput("search is not available in this episode", ok=False)
    return ToolOutput(best_lines(ctx.memory, query))


def best_lines(memory: Any, query: str) -> str:
    """The compact search's answer: the `LINE_HITS` best lines (BM25) as `file:line: text`, or that none matched.
    Lines holding every word of the query come first (in a long report the words a question shares with the padding,
    `revenue`, a year, weigh next to nothing in BM25, and a shorter line with one rare word would outrank the row)."""
    hits = [h for h in memory.search(query, 4 * LINE_HITS, whole=True, every=True) if h.source.startswith("document ")]
    if len(hits) < LINE_HITS:
        seen = {h.source for h in hits}
        hits += [h for h in memory.search(query, 4 * LINE_HITS, whole=True)
                 if h.source.startswith("document ") and h.source not in seen]
    if not hits:
        return f"no matches for {query!r}"
    return "\n".join(f"{h.source.removeprefix('document ')}: {h.snippet}" for h in hits[:LINE_HITS])


@tool(name="calc")
async def calc_short(expression: str) -> ToolOutput:
    """Arithmetic."""
    return calc_output(expression)


LINE_TOOLS = (search_lines, calc_short, submit_short)  # the compact form: short schemas, whole lines as hits


def line_query(task: Task) -> str:
    """The compact oracle's search for a one-figure question: the question's own words without the company's name
    and the filler (`consolidated operating income FY2015`)."""
    text = task.meta["question"].replace(task.meta.get("company", "\0") + "'s", " ")
    return " ".join(w for w in re.findall(r"[A-Za-z0-9']+", text) if w.lower() not in _STOP)


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
    compact = bool(task.meta.get("compact"))
    return AgentTask(task.id, task.prompt, files=dict(files), documents=line_documents(files) if compact else chunks(files),
                     answer=task.answer, answer_verifier=make_verifier(task.meta["verifier"]),
                     tools=LINE_TOOLS if compact else TOOLS, timeout_s=600.0,
                     meta={k: task.meta[k] for k in ("kind", "hops", "length") if k in task.meta})


def oracle_calls(task: Task) -> list[ToolCall]:
    """Calls that solve `task` with the agent form's tools: per figure, a search and a read of its line; then
    the arithmetic, then the answer. An audit question reads the planted label (or the contents, for none). In the
    compact form (`meta["compact"]`) a search's hit is the figure's whole line, so there is no read: a one-figure
    question is searched with its own words (`line_query`) and answered with the year it asks about and the figure
    as printed (`FY2024 4,087`: the numeric verifier reads the last number, and a table row prints each figure after
    its year, so naming the year first is how a reader, or a small model, finds the column)."""
    if task.meta.get("compact"):
        return _line_oracle_calls(task)
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


def _line_oracle_calls(task: Task) -> list[ToolCall]:
    evidence = task.meta.get("evidence", [])
    if len(evidence) == 1 and not task.meta.get("expression"):
        value, year = evidence[0]["value"], evidence[0]["key"].rsplit(":", 1)[-1]
        answer = f"FY{year} {value:,}" if isinstance(value, int) and str(value) == task.answer else task.answer
        return [ToolCall("search", {"query": line_query(task)}), ToolCall("submit", {"answer": answer})]
    calls = [ToolCall("search", {"query": " ".join(ev["key"].replace("_", " ").split(":")[:-1]
                                                   + [f"FY{ev['key'].split(':')[-1]}"])}) for ev in evidence]
    if task.meta.get("planted"):
        calls.append(ToolCall("search", {"query": task.meta["planted"]}))
    if task.meta.get("expression"):
        calls.append(ToolCall("calc", {"expression": task.meta["expression"]}))
    return [*calls, ToolCall("submit", {"answer": task.answer})]


def oracle_steps(task: Task) -> list[tuple[ToolCall, str]]:
    """The compact form's oracle calls, each with what its tool answers (computed as the tools do, without a
    sandbox): what a base is pre-trained on (`agent/traces.py`)."""
    from posttrain.agent.recall import Memory

    memory = Memory()
    try:
        for name, text in line_documents(task.meta["files"]).items():
            memory.add(f"document {name}", text)
        out = []
        for c in oracle_calls(task):
            if c.name == "search":
                out.append((c, best_lines(memory, c.arguments["query"])))
            elif c.name == "calc":
                out.append((c, calc_output(c.arguments["expression"]).text))
            else:
                out.append((c, "submitted"))
        return out
    finally:
        memory.close()


SPEC = AgentSpec(load=agent_task_of, tools=TOOLS, system=SYSTEM, max_steps=24, max_format_errors=3, max_tokens=512)
LINE_MAX_TOKENS = 128  # one compact call: a search of a question's words is ~110 characters with its JSON
LINE_SPEC = AgentSpec(load=agent_task_of, tools=LINE_TOOLS, system=LINE_SYSTEM, max_steps=6, max_format_errors=2,
                      max_tokens=LINE_MAX_TOKENS, tool_listing="signature")
_OPTIONS = ("length", "hops", "distractors", "kinds", "form", "held_out_fraction", "limit", "seed", "max_steps",
            "compact")


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
                              held_out_fraction=options.get("held_out_fraction", 0.15),
                              compact=bool(options.get("compact", False)))
    except (TypeError, ValueError) as exc:
        raise TaskFileError(f"{spec_name}: {exc}") from None
    limit, seed = options.get("limit", 100), options.get("seed", 0)
    agent = source.form == "agent"
    base = LINE_SPEC if source.compact else SPEC
    spec = replace(base, max_steps=int(options.get("max_steps", base.max_steps))) if agent else None
    return Domain(
        spec_name, source, PerTask(),
        evaluation=lambda n, s: source.take(100 if n is None else n, "held_out", seed=s),
        sampling=SamplingDefaults(max_tokens=base.max_tokens if agent else 1024,
                                  stop=("</tool_call>",) if source.compact else ()),
        rollouter="agent" if agent else "single_turn", agent=spec,
        description=(f"held-out questions over ~{source.length}-character reports ({', '.join(source.kinds)}; "
                     f"hops <= {source.hops}, distractors {source.distractors}; {source.form} form)"),
        meta={"length": source.length, "hops": source.hops, "distractors": source.distractors,
              "kinds": list(source.kinds), "form": source.form, "compact": source.compact, "limit": limit, "seed": seed,
              "null_response": ""},
        eval_limit=limit, eval_seed=seed,
    )
