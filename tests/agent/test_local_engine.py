"""Agents on the local engine: concurrent episodes share its batch through `agenerate`, and every turn's ids
and behaviour logprobs are exactly what the engine saw and sampled (token in, token out)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from posttrain.agent import EpisodeStatus, run_agent_task
from posttrain.agent.env import FunctionEnv
from posttrain.agent.tools import BUILTIN
from posttrain.engine.local.engine import LocalEngine
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.types import SamplingParams


def env(i):
    return FunctionEnv(f"t{i}", f"Task {i}: submit 7.", [BUILTIN["bash"], BUILTIN["submit"]], lambda a: a == "7")


@pytest.mark.slow
def test_concurrent_episodes_on_the_local_engine(engine):
    params = SamplingParams(temperature=1.0, max_tokens=12)

    async def many():
        return await asyncio.gather(*(run_agent_task(engine, env(i), None, 5, params=params, max_format_errors=None,
                                                     system="Act.\n") for i in range(4)))

    eps = asyncio.run(many())
    for ep in eps:
        assert ep.status is EpisodeStatus.MAX_STEPS and ep.steps == 5  # a random model writes no valid call
        assert ep.format_errors == 5 and ep.verdict.ok and not ep.passed
        for a, b in zip(ep.turns, ep.turns[1:]):
            assert b.context_ids == a.context_ids + a.completion.token_ids + a.observation_ids
        for t in ep.turns:
            assert len(t.completion.logprobs) == len(t.completion.token_ids) > 0
            assert all(lp <= 0 for lp in t.completion.logprobs)
        view = ep.to_trajectory().token_view()
        sampled = [lp for t in ep.turns for lp in t.completion.logprobs]
        assert [lp for lp, m in zip(view.logprobs, view.mask) if m] == sampled
    assert engine.metrics()["prefix_hit_rate"] > 0.5  # later turns find their earlier context cached


def test_a_full_model_window_is_context_exhausted():
    tok = char_tokenizer()
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(0))
    small = LocalEngine(model, tok, seed=0)
    try:
        ep = asyncio.run(run_agent_task(small, env(0), None, 50, params=SamplingParams(max_tokens=8),
                                        max_format_errors=None, system="Act.\n"))
    finally:
        small.close()
    assert ep.status is EpisodeStatus.CONTEXT_EXHAUSTED and "context holds 256" in ep.error
