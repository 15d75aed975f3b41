"""The single-turn rollouter: what the engine saw is what the trajectory holds; each domain's verifier judges its tasks."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.engine.build import build_engine
from posttrain.models import load_model
from posttrain.rewards import ExactMatch, SyncVerifier
from posttrain.rl.rollout import Rollouter, SingleTurnRollouter
from posttrain.types import DOMAIN_KEY, SamplingParams, Task, Verdict


class Always(SyncVerifier):
    def __init__(self, score):
        self.score, self.name = score, f"always{score}"

    def verify(self, task, response):
        return Verdict(self.score, self.score > 0)


def test_groups_hold_the_engine_context_and_verdicts(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    engine = build_engine(None, model, tok)
    rollouter = SingleTurnRollouter(engine, SamplingParams(max_tokens=3, seed=1), ExactMatch())
    assert isinstance(rollouter, Rollouter)
    tasks = [Task("a", "1+1=", "2"), Task("b", "2+2=", "4")]
    groups = asyncio.run(rollouter.run(tasks, n=3))
    assert [g.task.id for g in groups] == ["a", "b"] and all(len(g.trajectories) == 3 for g in groups)
    for g in groups:
        for t in g.trajectories:
            assert t.prompt_ids == tok.encode(g.task.prompt)  # exactly the ids the engine was given
            assert t.verdict is not None and t.verdict.verifier.startswith("exact@")
            assert len(t.completion.logprobs) == len(t.completion.token_ids) <= 3


def test_tasks_of_several_domains_use_their_own_verifier(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    engine = build_engine(None, model, tok)
    rollouter = SingleTurnRollouter(engine, SamplingParams(max_tokens=2, seed=0), Always(0.0),
                                    verifiers={"good": Always(1.0)})
    tasks = [Task("a", "1=", "1", meta={DOMAIN_KEY: "good"}), Task("b", "2=", "2", meta={DOMAIN_KEY: "other"})]
    groups = asyncio.run(rollouter.run(tasks, n=2))
    assert groups[0].rewards == [1.0, 1.0] and groups[1].rewards == [0.0, 0.0]


@pytest.mark.slow
def test_inline_and_worker_sampling_give_the_same_groups(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    tasks = [Task("a", "1+1=", "2"), Task("b", "2+2=", "4")]
    params = SamplingParams(max_tokens=4, seed=7)
    out = []
    for inline in (True, False):
        engine = build_engine(None, model, tok)
        groups = asyncio.run(SingleTurnRollouter(engine, params, ExactMatch(), inline=inline).run(tasks, n=3))
        out.append([[t.completion.token_ids for t in g.trajectories] for g in groups])
        engine.close()
    assert out[0] == out[1]


def test_a_prompt_longer_than_the_context_is_a_recorded_failure_not_a_crashed_batch(tiny_model_dir):
    from posttrain.scheduler.failures import FailureCategory, categorise
    from posttrain.types import RolloutStatus

    model, tok = load_model(tiny_model_dir)
    engine = build_engine(None, model, tok)
    assert engine.max_context is not None
    long = Task("long", "1+" * engine.max_context + "1=", "0")
    tasks = [Task("a", "1+1=", "2"), long, Task("b", "2+2=", "4")]
    groups = asyncio.run(SingleTurnRollouter(engine, SamplingParams(max_tokens=3, seed=1), ExactMatch()).run(tasks, n=2))
    assert [g.task.id for g in groups] == ["a", "long", "b"]
    over = groups[1]
    assert all(t.status is RolloutStatus.OVERLONG and not t.trainable and t.completion.token_ids == [] for t in over.trajectories)
    assert over.valid == [False, False] and "context holds" in over.trajectories[0].verdict.details
    assert categorise(over.trajectories[0]) is FailureCategory.TRUNCATED
    assert all(t.status is RolloutStatus.OK and t.completion.token_ids for g in (groups[0], groups[2]) for t in g.trajectories)
    engine.close()
