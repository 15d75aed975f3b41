"""Draft distillation: acceptance figures are exact where they can be, and distilling raises them."""

from __future__ import annotations

import pytest
import torch

from posttrain.engine import LocalEngine, SpecConfig
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.recipes.distill import DistillConfig, acceptance, distill_draft, sample_continuations
from posttrain.types import SamplingParams


def _model(hidden: int, layers: int, seed: int, vocab: int | None = None) -> CausalLM:
    tok = char_tokenizer()
    cfg = ModelConfig(vocab_size=vocab or tok.vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=64, tie_word_embeddings=True)
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed))
    return m.eval()


PROMPTS = [f"{a}+{b}=" for a in range(10) for b in range(6)]


@pytest.mark.slow
def test_a_model_against_itself_accepts_everything():
    tok = char_tokenizer()
    target = _model(32, 2, 0)
    data = sample_continuations(target, tok, PROMPTS[:8], temperature=1.0, max_new_tokens=6)
    a = acceptance(target, target, data)
    assert a.expected == pytest.approx(1.0, abs=1e-5) and a.greedy == 1.0 and abs(a.kl) < 1e-5
    assert a.positions == int(data.mask.sum()) > 0


@pytest.mark.slow
def test_expected_acceptance_is_the_overlap_of_the_two_distributions():
    """sum_x min(p, q) at one position, against a hand computation on the models' own softmax."""
    tok = char_tokenizer()
    target, draft = _model(32, 2, 0), _model(16, 1, 1)
    data = sample_continuations(target, tok, PROMPTS[:1], temperature=1.0, max_new_tokens=1)
    with torch.no_grad():
        p = torch.softmax(target(data.ids)[0, -2], -1)
        q = torch.softmax(draft(data.ids)[0, -2], -1)
    a = acceptance(target, draft, data)
    assert a.positions == 1
    assert a.expected == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-5)
    assert a.kl == pytest.approx(float((p * (p.log() - q.log())).sum()), abs=1e-4)


@pytest.mark.slow
def test_distilling_raises_acceptance_on_held_out_prompts_and_speculation_stays_exact():
    tok = char_tokenizer()
    torch.manual_seed(0)
    target, draft = _model(48, 2, 0), _model(16, 1, 1)
    with torch.no_grad():  # a peaked target, as a trained model is (a random one is near uniform: all accept)
        target.model.norm.weight.mul_(12.0)
    report = distill_draft(target, draft, tok, PROMPTS[:48], PROMPTS[48:],
                           DistillConfig(steps=80, batch_size=16, lr=3e-3, temperature=1.0, max_new_tokens=6))
    assert report.after.kl < report.before.kl * 0.7
    assert report.after.expected > report.before.expected + 0.05
    assert report.sequences == 48 and not draft.training and not target.training
    # the distilled draft drafts for the target: greedy output is the target's own, token for token
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    plain = LocalEngine(target, tok).generate(PROMPTS[48:52], params)
    spec = LocalEngine(target, tok, speculative=SpecConfig("draft", k=4, draft_model=draft)).generate(PROMPTS[48:52], params)
    assert [[c.token_ids for c in g] for g in spec] == [[c.token_ids for c in g] for g in plain]


def test_a_draft_with_another_vocabulary_is_refused():
    tok = char_tokenizer()
    with pytest.raises(ValueError, match="tokenizer"):
        distill_draft(_model(32, 1, 0), _model(16, 1, 1, vocab=tok.vocab_size + 3), tok, PROMPTS[:2], PROMPTS[2:3])


@pytest.mark.parametrize("bad", [dict(steps=0), dict(lr=0.0), dict(temperature=0.0)])
def test_bad_distill_settings_are_one_line_errors(bad):
    with pytest.raises(ValueError):
        DistillConfig(**bad)
