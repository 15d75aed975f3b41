"""Context policies: the budget holds, the prefix stays byte-identical, masking and compaction rewrite history
only in batches (each rewrite is a new training segment), the compaction trigger is drawn per group."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.agent import ContextPolicy, EpisodeStatus, ScriptedAgent, call, run_agent_task, tool
from posttrain.agent.env import FunctionEnv
from posttrain.agent.tools import BUILTIN
from posttrain.models.tokenizer import char_tokenizer

TOK = char_tokenizer()


@tool
def emit(n: int, tag: str = "x") -> str:
    """Print n numbered lines.

    Args:
        n: how many lines
        tag: a word on each line
    """
    return "".join(f"{tag} line {i}\n" for i in range(n))


def env(task_id="t", instruction="Make output, then submit 7."):
    return FunctionEnv(task_id, instruction, [emit, BUILTIN["recall"], BUILTIN["submit"]], lambda a: a == "7")


def episode(policy, steps=40, lines=20, **kw):
    agent = ScriptedAgent([call("emit", n=lines, tag=f"s{i}") for i in range(steps)] + [call("submit", answer="7")])
    return asyncio.run(run_agent_task(agent, env(), None, steps + 5, policy, max_format_errors=None, **kw))


def room(policy, turn):
    return 512 if turn.kind == "act" else policy.summary_max_tokens


def test_linear_is_append_only():
    ep = episode(ContextPolicy(), steps=10)
    assert ep.status is EpisodeStatus.SOLVED and not any(t.rewrote for t in ep.turns)
    assert len(ep.to_trajectory().segments()) == 1


@pytest.mark.parametrize("summarizer", ["model", "extractive"])
@pytest.mark.slow
def test_compaction_keeps_the_budget(summarizer):
    policy = ContextPolicy(budget_tokens=4096, compact_at=0.75, summarizer=summarizer, keep_turns=2)
    ep = episode(policy, steps=60)
    assert ep.status is EpisodeStatus.SOLVED
    assert max(len(t.context_ids) + room(policy, t) for t in ep.turns) <= 4096
    kinds = [t.kind for t in ep.turns]
    assert ("summary" in kinds) == (summarizer == "model")
    rewrites = sum(t.rewrote for t in ep.turns)
    assert rewrites >= 2 and len(ep.to_trajectory().segments()) == rewrites + 1
    first = ep.turns[0].context_ids
    prefix = first[: 1 + TOK.decode(first).index("<task>")]  # BOS + one id per character up to the task
    assert len(prefix) > 500 and TOK.decode(prefix).endswith("</system>\n")
    assert all(t.context_ids[: len(prefix)] == prefix for t in ep.turns)  # the prefix survives every rewrite


def test_compaction_summary_reuses_the_sampled_ids():
    policy = ContextPolicy(budget_tokens=4096, compact_at=0.75)
    ep = episode(policy, steps=40)
    i = next(i for i, t in enumerate(ep.turns) if t.kind == "summary")
    summary_ids = ep.turns[i].completion.token_ids
    nxt = ep.turns[i + 1].context_ids
    assert any(nxt[j: j + len(summary_ids)] == summary_ids for j in range(len(nxt)))


def test_masking_rewrites_in_batches_and_keeps_the_last_observations():
    policy = ContextPolicy(mask_keep=3, mask_every=5)
    ep = episode(policy, steps=24)
    rewrites = [i for i, t in enumerate(ep.turns) if t.rewrote]
    assert len(rewrites) == 4 and all(b - a == 5 for a, b in zip(rewrites, rewrites[1:]))
    last = TOK.decode(ep.turns[-1].context_ids)
    assert last.count("elided; recall can search it") >= 18 and "s23 line 19" in last and "s0 line 3" not in last


def test_recall_finds_what_masking_hid():
    agent = ScriptedAgent([call("emit", n=5, tag=f"word{i}") for i in range(12)] + [call("recall", query="word0"),
                                                                                       call("submit", answer="7")])
    ep = asyncio.run(run_agent_task(agent, env(), None, 20, ContextPolicy(mask_keep=2, mask_every=4)))
    assert "word0 line 0" not in TOK.decode(ep.turns[-2].context_ids)
    assert "word0" in ep.turns[-2].observation and "step 1: emit" in ep.turns[-2].observation


def test_truncation_of_long_observations():
    ep = episode(ContextPolicy(max_observation_chars=300), steps=2, lines=200)
    obs = ep.turns[0].observation
    assert "characters elided" in obs and len(obs) < 600
    assert ep.turns[0].results[0].elided_chars == 0  # the tool's own cap (8000) was not reached: the policy cut it


def test_a_budget_without_compaction_ends_as_context_exhausted():
    ep = episode(ContextPolicy(budget_tokens=4096), steps=80)
    assert ep.status is EpisodeStatus.CONTEXT_EXHAUSTED and "exceed the budget" in ep.error
    assert max(len(t.context_ids) for t in ep.turns) + 512 <= 4096


def test_the_trigger_is_drawn_per_group():
    p = ContextPolicy(budget_tokens=8192, compact_at=0.8, compact_jitter=0.3)
    draws = {p.for_group(seed).compact_at for seed in range(20)}
    assert len(draws) == 20 and all(0.5 <= d <= 0.8 for d in draws)
    assert p.for_group(3) == p.for_group(3) and p.for_group(3).compact_jitter == 0
    assert ContextPolicy().for_group(1) == ContextPolicy()


def test_presets_and_validation():
    assert ContextPolicy.preset("mask").mask_keep == 4
    assert ContextPolicy.preset("compact", 4096).trigger() == 3072
    with pytest.raises(ValueError, match="unknown context policy"):
        ContextPolicy.preset("magic")
    with pytest.raises(ValueError, match="needs budget_tokens"):
        ContextPolicy(compact_at=0.5)


def test_same_prefix_ids_across_tasks():
    from posttrain.agent.models import EngineModel

    model = EngineModel(ScriptedAgent([]))
    a, b = model.prefix(env().tools, "sys\n"), model.prefix(env("u", "other").tools, "sys\n")
    assert a.ids == b.ids and a.ids is not b.ids and a.ids[0] == TOK.bos_id
