"""`docs:reports` as agent episodes: the report in workspace files, BM25 search that names file and lines, a
calculator that runs no code, and the oracle's calls solving every question kind through the real runtime,
under the existing context policies too; an empty or a flag-everything submission fails."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.agent import EpisodeStatus, run_agent_task
from posttrain.agent.context import ContextPolicy
from posttrain.agent.episode import ToolCall
from posttrain.agent.recall import Memory
from posttrain.agent.reports import SPEC, agent_task_of, calc, chunks, evaluate, oracle_calls, search
from posttrain.agent.scripted import ScriptedAgent, call
from posttrain.agent.tools import ToolContext
from posttrain.tasks.domains import load_domain
from posttrain.tasks.jsonl import TaskFileError
from posttrain.tasks.report_questions import KINDS
from posttrain.types import Task


def run(agent, task, sandbox, policy=None):
    return asyncio.run(run_agent_task(agent, agent_task_of(task), None, SPEC.max_steps, policy, sandbox=sandbox,
                                      system=SPEC.system))


def one_of_each(length=20000):
    tasks = load_domain("docs:reports", form="agent", length=length, distractors=3, limit=40).suite().tasks
    by_kind = {}
    for t in tasks:
        by_kind.setdefault(t.meta["kind"], t)
    assert set(by_kind) == set(KINDS)
    return by_kind


def test_the_oracle_solves_every_kind_and_empty_or_flagging_answers_fail(sandbox):
    for kind, task in one_of_each().items():
        ep = run(ScriptedAgent(oracle_calls(task)), task, sandbox)
        assert ep.status is EpisodeStatus.SOLVED and ep.submitted == task.answer, (kind, ep.verdict)
        reads = [r for turn in ep.turns for r in turn.results if r.call.name == "read_file"]
        for r, ev in zip(reads, task.meta["evidence"]):  # each read shows the figure the answer uses
            assert r.ok and f"{ev['value']:,}" in r.output
        ep = run(ScriptedAgent([call("submit", answer="")]), task, sandbox)
        assert ep.status is EpisodeStatus.FAILED and ep.verdict.ok and not ep.passed
        if kind in ("none", "inconsistency"):
            flag = "P2" if task.answer != "P2" else "T3"
            assert not run(ScriptedAgent([call("submit", answer=flag)]), task, sandbox).passed


def test_context_policies_apply_unchanged(sandbox):
    task = one_of_each()["computed"]
    for policy in (ContextPolicy(mask_keep=1, mask_every=1), ContextPolicy(max_observation_chars=200)):
        ep = run(ScriptedAgent(oracle_calls(task)), task, sandbox, policy)
        assert ep.passed
    # summarising compaction under a small budget: the history is rewritten (new training segments) mid-episode
    compact = ContextPolicy(budget_tokens=6000, compact_at=0.6, summarizer="extractive")
    ep = run(ScriptedAgent(oracle_calls(task)), task, sandbox, compact)
    assert ep.passed and len(ep.to_trajectory().segments()) > 1


def test_search_names_file_and_lines_and_calc_runs_no_code():
    task = one_of_each(4000)["lookup"]
    memory = Memory()
    for name, text in chunks(task.meta["files"]).items():
        memory.add(f"document {name}", text)
    memory.add("step 1: read_file", "Borrowings 999999 in history, not the report")
    ctx = ToolContext(None, memory=memory)
    out = asyncio.run(search.run(ctx, ToolCall("search", {"query": "Borrowings", "k": 3})))
    assert out.ok and out.output.startswith("- 0") and " lines " in out.output and "999999" not in out.output
    assert asyncio.run(search.run(ToolContext(None), ToolCall("search", {"query": "x"}))).ok is False
    assert evaluate("100 * (1,234 - 1,100) / 1,100") == pytest.approx(100 * 134 / 1100)
    for bad in ("__import__('os').system('true')", "a + 1", "2 ** 1000", "1 +"):
        with pytest.raises(ValueError):
            evaluate(bad)
    assert asyncio.run(calc.run(ToolContext(None), ToolCall("calc", {"expression": "1/0"}))).ok is False
    assert asyncio.run(calc.run(ToolContext(None), ToolCall("calc", {"expression": "7 / 2"}))).output == "3.5"
    memory.close()


def test_the_agent_form_is_an_agent_domain():
    d = load_domain("docs:reports", form="agent", max_steps=10, limit=5)
    assert d.rollouter == "agent" and d.agent.load is agent_task_of and d.agent.max_steps == 10
    assert load_domain("docs:reports").rollouter == "single_turn"
    with pytest.raises(TaskFileError, match="agent form"):
        agent_task_of(Task("x", "no files"))
