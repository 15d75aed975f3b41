"""The `agent:lookup` domain: tasks whose answer exists only in the workspace, solved by following files,
judged on the submitted answer; the oracle trace the base model learns from is token for token the
episode the runtime builds."""

from __future__ import annotations

import asyncio
import random

import pytest

from posttrain.agent import EpisodeStatus, run_agent_task
from posttrain.agent import format as fmt
from posttrain.agent.lookup import (
    SPEC,
    LookupSource,
    agent_task_of,
    chain_progress,
    instruction,
    instruction_span,
    oracle_calls,
    oracle_quotes,
    oracle_trace,
)
from posttrain.agent.scripted import ScriptedAgent, call
from posttrain.agent.spec import well_formed
from posttrain.models.tokenizer import char_tokenizer
from posttrain.rewards.base import safe_verify
from posttrain.tasks.base import split_of
from posttrain.tasks.domains import load_domain
from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import Task


def run(agent, task, sandbox):
    return asyncio.run(run_agent_task(agent, agent_task_of(task), None, SPEC.max_steps, sandbox=sandbox,
                                      system=SPEC.system, tool_listing=SPEC.tool_listing))


def test_tasks_follow_a_chain_of_files_to_a_value():
    source = LookupSource(hops=3, lines=3)
    rng = random.Random(0)
    for _ in range(50):
        t = source.sample(rng)
        files, key, chain = t.meta["files"], t.meta["key"], t.meta["chain"]
        assert len(chain) == t.meta["hops"] and chain[0] == "start"
        for here, there in zip(chain, chain[1:]):
            assert f"{key} -> {there}" in files[here].splitlines()
        assert f"{key} = {t.answer}" in files[chain[-1]].splitlines()
        assert all(len(text.splitlines()) == 3 for text in files.values())
        assert t.answer is not None and len(t.answer) == 1 and f"= {t.answer}" not in t.prompt
    assert {source.sample(rng).meta["hops"] for _ in range(60)} == {1, 2, 3}


@pytest.mark.slow
def test_the_split_is_by_content_and_disjoint():
    source = LookupSource()
    held = source.take(100, "held_out", seed=0)
    train = source.take(300, "train", seed=0)
    assert len(held) == 100 and not {t.id for t in held} & {t.id for t in train}
    assert all(source.split_of(t) == "held_out" for t in held)
    assert [t.id for t in source.take(100, "held_out", seed=0)] == [t.id for t in held]


def twins(held: list[Task], train: list[Task]) -> int:
    """Held-out tasks with a training twin: the same chain of files and the same value (the same actions solve both)."""
    seen = {(tuple(t.meta["chain"]), t.answer) for t in train}
    return sum((tuple(t.meta["chain"]), t.answer) in seen for t in held)


def test_no_held_out_task_has_a_training_twin():
    source = LookupSource()
    assert source.lines == 3 and load_domain("agent:lookup").meta["lines"] == 3  # distractors by default
    rng = random.Random(1)
    train = [source.sample(rng) for _ in range(1000)]
    held = source.take(100, "held_out", seed=0)
    assert all(len(text.splitlines()) == 3 for t in held for text in t.meta["files"].values())
    assert twins(held, train) == 0

    class ByContent(LookupSource):  # the earlier split: a hash of the key and the files
        def split_of(self, task: Task):
            return split_of(task.id, self.held_out_fraction)

    planted = ByContent()
    rng = random.Random(1)
    assert twins(planted.take(100, "held_out", seed=0), [planted.sample(rng) for _ in range(1000)]) >= 10
    with pytest.raises(ValueError, match="hops x"):
        LookupSource(hops=8, lines=8)


def test_the_oracle_solves_and_a_guess_fails(sandbox):
    task = LookupSource(hops=2).take(1, "train", seed=3)[0]
    ep = run(ScriptedAgent([c for c, _ in oracle_calls(task)]), task, sandbox)
    assert ep.status is EpisodeStatus.SOLVED and ep.passed and ep.submitted == task.answer
    wrong = "a" if task.answer != "a" else "b"
    ep = run(ScriptedAgent([call("submit", answer=wrong)]), task, sandbox)
    assert ep.status is EpisodeStatus.FAILED and ep.verdict.ok and not ep.passed
    ep = run(ScriptedAgent([call("read", path="nowhere"), call("submit", answer=task.answer)]), task, sandbox)
    assert ep.passed and not ep.turns[0].results[0].ok  # a missing file is an observation, not a crash


def test_the_oracle_trace_is_the_runtime_episode_token_for_token(sandbox):
    tok = char_tokenizer()
    for task in LookupSource(hops=3).take(4, "train", seed=1):
        ep = run(ScriptedAgent([c for c, _ in oracle_calls(task)], tokenizer=tok), task, sandbox)
        assert ep.passed
        view = ep.to_trajectory().token_view()
        ids, mask = oracle_trace(task, tok)
        assert view.ids == ids and view.mask == mask


def test_the_quoting_oracle_trace_is_the_runtime_episode_token_for_token(sandbox):
    tok = char_tokenizer()
    for task in LookupSource(hops=3).take(4, "train", seed=1):
        quotes = oracle_quotes(task)
        assert quotes[0] == "" and all(q.startswith(task.meta["key"] + " ") for q in quotes[1:])
        assert quotes[-1] == f"{task.meta['key']} = {task.answer}\n"  # the last file's line holds the value
        replies = [q + fmt.render_call(c) for q, (c, _) in zip(quotes, oracle_calls(task))]
        ep = run(ScriptedAgent(replies, tokenizer=tok), task, sandbox)
        assert ep.passed  # the runtime parses the call after the quote
        view = ep.to_trajectory().token_view()
        decisions: list[bool] = []
        ids, mask = oracle_trace(task, tok, decisions, quote=True)
        assert view.ids == ids and view.mask == mask
        copied = "".join(tok.decode([i]) for i, d in zip(ids, decisions) if d)  # the quotes and the calls' values
        assert copied == "".join(q + str(list(c.arguments.values())[-1]) for q, (c, _) in zip(quotes, oracle_calls(task)))


def test_the_instruction_span_is_the_task_entry_of_the_oracle_trace():
    tok = char_tokenizer()
    task = LookupSource(hops=3, min_hops=3).take(1, "train", seed=1)[0]
    start, end = instruction_span(task, tok)
    text = tok.decode(oracle_trace(task, tok)[0][start:end])
    assert instruction(task.meta["key"]) in text and "<task>" in text and "tool_call" not in text


def test_the_domain_and_its_single_turn_view():
    d = load_domain("agent:lookup", hops=2, limit=20)
    assert d.rollouter == "agent" and d.agent.load is agent_task_of and d.agent.tool_listing == "signature"
    suite = d.suite()
    assert len(suite.tasks) == 20 and suite.agent is d.agent
    t = suite.tasks[0]
    assert safe_verify(d.verifier, t, t.answer).passed and not safe_verify(d.verifier, t, "0").passed
    with pytest.raises(TaskFileError, match="hops"):
        load_domain("agent:lookup", hops=0)
    with pytest.raises(TaskFileError, match="unknown option"):
        load_domain("agent:lookup", depth=2)
    with pytest.raises(TaskFileError, match="not a lookup task"):
        agent_task_of(Task("x", "no files"))


@pytest.mark.slow
def test_the_process_score_credits_the_chain_read_in_order(sandbox):
    task = next(t for t in LookupSource(hops=3, min_hops=3).take(20, "train", seed=2))
    chain = task.meta["chain"]
    wrong = next(s for s in "xyz0123" if s not in chain)
    cases = [  # calls -> (chain progress, well-formed share)
        ([c for c, _ in oracle_calls(task)], (1.0, 1.0)),
        ([call("read", path=chain[0]), call("submit", answer="q")], (1 / 3, 1.0)),
        # a wrong read in between costs nothing once the right file follows; reading out of order gains nothing
        ([call("read", path=chain[0]), call("read", path=wrong), call("read", path=chain[1])], (2 / 3, 1.0)),
        ([call("read", path=chain[1]), call("read", path=chain[0]), call("submit", answer="q")], (1 / 3, 1.0)),
        ([call("submit", answer="q")], (0.0, 1.0)),
    ]
    for calls, (progress, formed) in cases:
        ep = run(ScriptedAgent(calls), task, sandbox)
        assert chain_progress(ep, task) == pytest.approx(progress) and well_formed(ep, task) == pytest.approx(formed)
    bad = run(ScriptedAgent(["not a call", call("read", path=chain[0]), call("submit", answer="q")]), task, sandbox)
    assert chain_progress(bad, task) == pytest.approx(1 / 3) and well_formed(bad, task) == pytest.approx(2 / 3)
    assert chain_progress(bad, Task("x", "no chain")) == 0.0


def test_the_process_weight_option_shapes_training_not_evaluation(sandbox):
    from posttrain.eval.episodes import evaluate_agent

    d = load_domain("agent:lookup", hops=3, process_weight=0.25, limit=4)
    assert d.agent.process is chain_progress and d.agent.process_weight == 0.25
    assert load_domain("agent:lookup").agent.process_weight == 0.0
    for bad in (1.5, -0.1, "high", True):
        with pytest.raises(TaskFileError, match="process_weight must be a number in"):
            load_domain("agent:lookup", process_weight=bad)
    task = LookupSource(hops=3, min_hops=3).take(1, "held_out", seed=5)[0]
    first = task.meta["chain"][0]
    result = evaluate_agent(ScriptedAgent([call("read", path=first), call("submit", answer="?")]), [task], d.agent,
                            sandbox)
    (record,) = result.records
    assert not record.passed and record.score == 0.0  # the verifier's verdict, not 0.75 x 0 + 0.25 x process
