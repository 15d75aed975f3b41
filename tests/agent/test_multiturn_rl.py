"""Multi-turn RL's contract: token in, token out; masks on sampled tokens only; compaction segments that share
their episode's advantage; infrastructure failures masked per group and counted; one workspace per group."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch

from _harness.tito import Call, RecordingEngine, tito_mismatch
from posttrain.agent import ContextPolicy, EpisodeStatus, run_agent_task
from posttrain.agent import format as fmt
from posttrain.agent.env import AgentTask, SessionEnv, ToolEnv
from posttrain.agent.lookup import SPEC, LookupSource, oracle_calls
from posttrain.agent.rollouter import AgentRollouter, masked_groups
from posttrain.agent.scripted import call
from posttrain.engine.mock import MockEngine
from posttrain.models import char_tokenizer
from posttrain.models.tokenizer import merging_tokenizer
from posttrain.rl.advantages import group_relative_advantages
from posttrain.rl.train_batch import pack_groups
from posttrain.types import Completion, FinishReason, RolloutStatus, SamplingParams


class CharSampler(MockEngine):
    """Samples the script's text one character per token: valid ids, but never the tokenizer's own encoding."""

    def _completion(self, prompt, params: SamplingParams) -> Completion:
        text = self._text(prompt)
        ids = [self.tokenizer.backend.token_to_id(ch) for ch in text]
        cut = text.find(fmt.CALL_CLOSE)
        if cut >= 0:  # the stop string ends it, its tokens kept
            ids, text = ids[: cut + len(fmt.CALL_CLOSE)], text[:cut]
        return Completion(ids, text, [-0.5] * len(ids), FinishReason.STOP, self.policy_version)


def test_no_turn_is_ever_retokenised(sandbox):
    tok = merging_tokenizer()
    task = LookupSource(hops=2).take(1, "train", seed=0)[0]
    script = iter([fmt.render_call(c) for c, _ in oracle_calls(task)])
    engine = CharSampler(lambda prompt: next(script), tokenizer=tok, max_concurrency=1)
    recorded = RecordingEngine(engine)
    from posttrain.agent.lookup import agent_task_of

    ep = asyncio.run(run_agent_task(recorded, agent_task_of(task), None, 8, sandbox=sandbox, system=SPEC.system,
                                    tool_listing=SPEC.tool_listing))
    assert ep.passed and len(ep.turns) == 3
    for a, b in zip(ep.turns, ep.turns[1:]):
        sampled = a.completion.token_ids
        assert sampled != tok.encode(tok.decode(sampled), add_bos=False)  # the canonical encoding merges them
        assert b.context_ids == a.context_ids + sampled + a.observation_ids  # ...but the context kept them as sampled
    assert tito_mismatch(ep, recorded.calls) is None


def test_a_silent_retokenisation_is_caught(sandbox):
    """Planted: turn 1's context re-encodes turn 0's sampled text canonically (merged ids), as a runtime that
    rebuilt contexts from text would, and the engine really was given those ids; no rewrite is announced."""
    tok = merging_tokenizer()
    task = LookupSource(hops=2).take(1, "train", seed=0)[0]
    script = iter([fmt.render_call(c) for c, _ in oracle_calls(task)])
    recorded = RecordingEngine(CharSampler(lambda prompt: next(script), tokenizer=tok, max_concurrency=1))
    from posttrain.agent.lookup import agent_task_of

    ep = asyncio.run(run_agent_task(recorded, agent_task_of(task), None, 8, sandbox=sandbox, system=SPEC.system,
                                    tool_listing=SPEC.tool_listing))
    assert tito_mismatch(ep, recorded.calls) is None and tito_mismatch(ep, recorded.calls, rewrites=False) is None
    t0, t1, t2 = ep.turns
    merged = tok.encode(tok.decode(t0.completion.token_ids), add_bos=False)
    assert len(merged) < len(t0.completion.token_ids)  # the plant really merges ids
    t1.context_ids = t0.context_ids + merged + t0.observation_ids
    t2.context_ids = t1.context_ids + t1.completion.token_ids + t1.observation_ids
    for t in (t1, t2):  # the engine's own record agrees: it was given the re-tokenised contexts
        old = recorded.calls[id(t.completion)]
        recorded.calls[id(t.completion)] = Call(tuple(t.context_ids), old.sampled, old.logprobs)
    why = tito_mismatch(ep, recorded.calls)
    assert why is not None and "turn 1" in why and "no rewrite was announced" in why
    t1.rewrote = True  # the same break, announced (compaction would), is a legitimate new segment
    assert tito_mismatch(ep, recorded.calls) is None
    # ...but not where the context policy never rewrites (the benchmark's linear policy): one segment expected
    assert "never rewrites" in tito_mismatch(ep, recorded.calls, rewrites=False)
    assert not SPEC.policy.rewrites_history and ContextPolicy.preset("compact").rewrites_history


def lookup_rollouter(model, sandbox, policy: ContextPolicy, n_steps=6, **kw) -> AgentRollouter:
    spec = dataclasses.replace(SPEC, policy=policy, max_steps=n_steps, max_format_errors=None)
    return AgentRollouter(model, sandbox, spec, SamplingParams(temperature=1.0, max_tokens=24), **kw)


@pytest.mark.slow
def test_the_learner_sees_exactly_what_the_local_engine_saw_and_sampled(engine, sandbox):
    recorded = RecordingEngine(engine)
    # a small budget with compaction forces rewritten histories: several segments per episode
    policy = ContextPolicy(budget_tokens=900, compact_at=0.6, compact_jitter=0.1, summarizer="extractive",
                           summary_max_chars=200)
    r = lookup_rollouter(recorded, sandbox, policy)
    tasks = LookupSource(hops=3).take(3, "train", seed=2)
    groups = asyncio.run(r.run(tasks, n=4))
    episodes = [ep for g in groups for ep in g.episodes]
    assert len(episodes) == 12 and all(ep.status is EpisodeStatus.MAX_STEPS for ep in episodes)
    assert all(tito_mismatch(ep, recorded.calls) is None for ep in episodes)
    assert any(len(t.segments()) > 1 for g in groups for t in g.trajectories)
    for g in groups:
        for t in g.trajectories:
            for view in t.segments():
                sampled = [i for i, m in zip(view.ids, view.mask) if m]
                assert len(sampled) == sum(m for m in view.mask) and not view.mask[0]
                assert all(v >= 0 for v, m in zip(view.versions, view.mask) if m)
    # a mismatch is caught: a context the engine never saw
    ep = episodes[0]
    ep.turns[1].context_ids[5] += 1
    assert "context differs" in tito_mismatch(ep, recorded.calls)


@pytest.mark.slow
def test_segments_of_an_episode_share_its_advantage_and_mask_only_samples(engine, sandbox):
    policy = ContextPolicy(budget_tokens=900, compact_at=0.6, summarizer="extractive", summary_max_chars=200)
    r = lookup_rollouter(engine, sandbox, policy)
    groups = asyncio.run(r.run(LookupSource(hops=3).take(2, "train", seed=4), n=3))
    for g in groups:  # give the groups reward variance so advantages are non-zero
        for j, t in enumerate(g.trajectories):
            t.verdict = dataclasses.replace(t.verdict, score=float(j), passed=j == 2)
    rewards = torch.tensor([g.rewards for g in groups])
    valid = torch.tensor([g.valid for g in groups])
    adv = group_relative_advantages(rewards, valid, "grpo")
    batch = pack_groups(groups, adv, valid, pad_id=0)
    rows = [(i, k) for i, t in enumerate(t for g in groups for t in g.trajectories) for k in range(len(t.segments()))]
    assert batch.input_ids.shape[0] == len(rows) > len(groups) * 3  # compaction split episodes
    flat = adv.reshape(-1)
    for row, (i, _) in enumerate(rows):
        assert batch.advantages[row] == flat[i]
    for row, (i, k) in enumerate(rows):
        t = [t for g in groups for t in g.trajectories][i]
        view = t.segments()[k]
        assert batch.mask[row, : len(view) - 1].tolist() == [float(m) for m in view.mask[1:]]
        assert batch.mask[row, len(view) - 1:].sum() == 0


class FailingReset(ToolEnv):
    async def reset(self, memory):
        raise OSError("the sandbox could not start")


def test_a_group_with_an_infrastructure_failure_is_masked_and_counted(sandbox):
    tasks = LookupSource(hops=1).take(2, "train", seed=5)
    calls = {"n": 0}

    def load(task):
        from posttrain.agent.lookup import agent_task_of

        at = agent_task_of(task)
        calls["n"] += 1
        return FailingReset(sandbox, at) if task.id == tasks[0].id and calls["n"] == 3 else at

    spec = dataclasses.replace(SPEC, load=load)
    oracle = MockEngine(lambda p: fmt.render_call(call("submit", answer="1")), tokenizer=char_tokenizer())
    r = AgentRollouter(oracle, sandbox, spec, SamplingParams(temperature=0.0, max_tokens=80), share_workspace=False)
    groups = asyncio.run(r.run(tasks, n=3))
    statuses = [t.status for t in groups[0].trajectories]
    assert statuses.count(RolloutStatus.ENV_ERROR) == 1 and statuses.count(RolloutStatus.ABORTED) == 2
    assert groups[0].valid == [False] * 3 and groups[1].valid == [True] * 3
    assert all(s == 0.0 for s in groups[1].rewards)  # wrong answers: scored, valid
    assert masked_groups(groups) == 1
    assert [ep.status for ep in groups[0].episodes].count(EpisodeStatus.ENV_ERROR) == 1


def test_a_groups_episodes_start_from_one_workspace(sandbox, monkeypatch):
    opened, parents = [], []
    original_open, original_bind = ToolEnv.open_template, SessionEnv.bind

    async def counting_open(self):
        s = await original_open(self)
        opened.append(s.id)
        return s

    def recording_bind(self, session, memory):
        parents.append(session.parent_id)
        return original_bind(self, session, memory)

    monkeypatch.setattr(ToolEnv, "open_template", counting_open)
    monkeypatch.setattr(SessionEnv, "bind", recording_bind)
    tasks = LookupSource(hops=2).take(2, "train", seed=6)
    answers = {t.prompt: t for t in tasks}

    def oracle(prompt):  # reads the chain, then submits: correct only if the workspace holds the files
        text = char_tokenizer().decode(prompt)
        task = next(t for p, t in answers.items() if p in text)
        done = text.count("<tool_response")
        return fmt.render_call(oracle_calls(task)[done][0])

    engine = MockEngine(oracle, tokenizer=char_tokenizer())
    r = AgentRollouter(engine, sandbox, SPEC, SamplingParams(temperature=0.0, max_tokens=80))
    groups = asyncio.run(r.run(tasks, n=4))
    assert all(g.rewards == [1.0] * 4 for g in groups)  # every fork saw the task's files
    assert len(opened) == 2 and sorted(set(parents)) == sorted(opened) and len(parents) == 8
    assert sorted(parents.count(p) for p in opened) == [4, 4]


def test_an_answer_task_never_submitted_scores_zero(sandbox):
    task = AgentTask("q", "What is 2+2?", answer="4")
    engine = MockEngine(lambda p: "I think it is 4.", tokenizer=char_tokenizer())
    ep = asyncio.run(run_agent_task(engine, task, None, 2, sandbox=sandbox, max_format_errors=None))
    assert ep.status is EpisodeStatus.MAX_STEPS and ep.verdict.ok and ep.reward == 0.0
    assert "never submitted" in ep.verdict.details


def test_a_process_score_blends_into_the_reward_not_the_verdict(sandbox):
    from posttrain.agent.spec import well_formed

    task = LookupSource(hops=1).take(1, "train", seed=8)[0]
    replies = iter(["no call here", fmt.render_call(call("submit", answer=task.answer))])
    engine = MockEngine(lambda p: next(replies), tokenizer=char_tokenizer(), max_concurrency=1)
    spec = dataclasses.replace(SPEC, process=well_formed, process_weight=0.2)
    r = AgentRollouter(engine, sandbox, spec, SamplingParams(temperature=0.0, max_tokens=80), share_workspace=False)
    (group,) = asyncio.run(r.run([task], n=1))
    v = group.trajectories[0].verdict
    assert v.passed and v.outcome == 1.0 and v.score == pytest.approx(0.9)
    assert v.info["blend"] == {"outcome": 1.0, "process": 0.5, "weight": 0.2} and v.breakdown == {}
    with pytest.raises(ValueError, match="process score function"):
        dataclasses.replace(SPEC, process=None, process_weight=0.5)


def test_a_process_score_alone_never_makes_a_group_informative(sandbox):
    from posttrain.rl.advantages import has_signal

    # every episode fails; one reads start, the others submit at once: the blended rewards differ, the outcomes do not
    task = LookupSource(hops=2, min_hops=2).take(1, "train", seed=4)[0]
    wrong = "a" if task.answer != "a" else "b"
    replies = iter([fmt.render_call(call("read", path="start"))] + [fmt.render_call(call("submit", answer=wrong))] * 4)
    engine = MockEngine(lambda p: next(replies), tokenizer=char_tokenizer(), max_concurrency=1)
    spec = dataclasses.replace(SPEC, process_weight=0.25)
    r = AgentRollouter(engine, sandbox, spec, SamplingParams(temperature=0.0, max_tokens=80), share_workspace=False,
                       max_concurrency=1)
    (group,) = asyncio.run(r.run([task], n=3))
    assert group.outcomes == [0.0, 0.0, 0.0] and len(set(group.rewards)) == 2
    valid = torch.tensor([group.valid])
    assert not has_signal(torch.tensor([group.outcomes]), valid).any() and has_signal(torch.tensor([group.rewards]), valid).all()
