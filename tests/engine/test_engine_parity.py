"""Trainer parity: for the same tokens, the engine's logprobs equal the learner's (fp32, CPU)."""

import pytest
import torch

from posttrain.engine import LocalEngine, SpecConfig
from posttrain.engine.parity import engine_learner_mismatch
from posttrain.models import load_model
from posttrain.models.logprobs import logprob_mismatch
from posttrain.types import SamplingParams


def test_logprob_mismatch_by_hand():
    a = torch.tensor([[0.0, -1.0, -2.0]])
    b = torch.tensor([[0.0, -1.5, -9.0]])
    assert logprob_mismatch(a, b, torch.tensor([[True, True, False]])) == (0.25, 0.5)
    assert logprob_mismatch(a, b, torch.zeros(1, 3, dtype=torch.bool)) == (0.0, 0.0)


@pytest.mark.slow
def test_engine_logprobs_equal_learner_logprobs_in_every_mode(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    prompts = [tok.encode(p) for p in ("3+4=", "10+20=", "a longer prompt that shares nothing")]
    params = SamplingParams(n=4, max_tokens=12, temperature=0.8, seed=3, ignore_eos=True)
    engines = {
        "plain": LocalEngine(model, tok),
        "chunked": LocalEngine(model, tok, prefill_chunk=4, max_prefill_tokens=8),
        "ngram": LocalEngine(model, tok, speculative=SpecConfig("ngram", k=3)),
        "draft": LocalEngine(model, tok, speculative=SpecConfig("draft", k=3, draft_model=model)),
    }
    for name, eng in engines.items():
        groups = eng.generate(prompts, params)
        flat_prompts = [p for p, g in zip(prompts, groups) for _ in g]
        flat = [c for g in groups for c in g]
        m = engine_learner_mismatch(model, flat_prompts, flat, temperature=0.8)
        assert m["mismatch_max"] < 1e-5, (name, m)
