"""LoRA adapters through peft: only adapters train, peft's format round-trips, merging is exact, engines agree."""

import pytest
import torch

from posttrain.config import LoRAConfig, RLConfig
from posttrain.models import load_model
from posttrain.models.lora import (
    adapter_state_dict,
    apply_lora,
    has_lora,
    load_adapter,
    merged_state_dict,
    save_adapter,
)
from posttrain.rl.learner import Learner
from posttrain.rl.train_batch import TrainBatch

# Every test here builds peft adapters (importing peft costs ~3 s of CPU): the whole suite runs them, the fast
# subset does not (`tests/test_extras.py` keeps a fast test of models/lora.py's missing-extra error).
pytestmark = pytest.mark.slow


def _randomise_adapters(model, seed=3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def _ids(vocab, seed=1):
    return torch.randint(0, vocab, (3, 15), generator=torch.Generator().manual_seed(seed))


def test_only_adapters_are_trainable_and_start_as_the_base(tiny_model_dir):
    base, _ = load_model(tiny_model_dir)
    model, _ = load_model(tiny_model_dir)
    apply_lora(model, r=4, alpha=8)
    assert has_lora(model) and not has_lora(base)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)
    ids = _ids(model.config.vocab_size)
    with torch.no_grad():
        assert torch.equal(model(ids), base(ids))  # B = 0
    names = set(adapter_state_dict(model))
    assert "model.layers.0.self_attn.q_proj.lora_A.weight" in names and len(names) == 2 * 7 * model.config.num_hidden_layers


@pytest.mark.slow
def test_peft_format_round_trip(tiny_model_dir, tmp_path):
    import peft

    model, _ = load_model(tiny_model_dir)
    apply_lora(model, r=4, alpha=8, targets=["q_proj", "v_proj", "down_proj"])
    _randomise_adapters(model)
    save_adapter(model, tmp_path / "adapter")
    ids = _ids(model.config.vocab_size)
    with torch.no_grad():
        want = model(ids)
        # peft itself loads our files onto a fresh base
        fresh, _ = load_model(tiny_model_dir)
        via_peft = peft.PeftModel.from_pretrained(fresh, str(tmp_path / "adapter")).eval()
        torch.testing.assert_close(via_peft(ids), want, atol=1e-6, rtol=1e-6)
        # and ours
        again, _ = load_model(tiny_model_dir)
        load_adapter(again, tmp_path / "adapter")
        torch.testing.assert_close(again(ids), want, atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_merged_weights_are_the_adapted_model(tiny_model_dir, tmp_path):
    from posttrain.models import save_model

    model, tok = load_model(tiny_model_dir)
    apply_lora(model, r=4, alpha=8)
    _randomise_adapters(model)
    plain, _ = load_model(tiny_model_dir)
    plain.load_state_dict(merged_state_dict(model))
    save_model(model, tok, tmp_path / "merged")  # a LoRA model saves merged, plain HF weights
    reloaded, _ = load_model(tmp_path / "merged")
    ids = _ids(model.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(plain(ids), model(ids), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(reloaded(ids), model(ids), atol=1e-5, rtol=1e-5)


def test_learner_moves_only_adapter_weights(tiny_model_dir):
    model, _ = load_model(tiny_model_dir)
    apply_lora(model, r=4, alpha=8)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    learner = Learner(model, RLConfig(lr=1e-2, lora=LoRAConfig(r=4)), max_tokens=6)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (4, 10), generator=g)
    mask = torch.ones(4, 9)
    batch = TrainBatch(ids, mask, -torch.ones(4, 9), torch.tensor([1.0, -1.0, 0.5, -0.5]), torch.full((4,), 10))
    learner.update(batch)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all(".lora_" in n for n in moved)
    assert any(".lora_B." in n for n in moved)


@pytest.mark.slow
def test_local_engine_samples_with_the_adapters(tiny_model_dir):
    from posttrain.engine.build import build_engine
    from posttrain.types import SamplingParams

    model, tok = load_model(tiny_model_dir)
    apply_lora(model, r=4, alpha=8)
    _randomise_adapters(model)
    merged, _ = load_model(tiny_model_dir)
    merged.load_state_dict(merged_state_dict(model))
    params = SamplingParams(n=1, temperature=0.0, max_tokens=6)
    with torch.no_grad():
        got = build_engine(None, model, tok).generate(["12+3="], params)[0][0]
        want = build_engine(None, merged, tok).generate(["12+3="], params)[0][0]
    assert got.token_ids == want.token_ids
    assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


def test_rl_lora_config_trains_adapters_through_build(tiny_config):
    from posttrain.rl.build import build

    cfg = tiny_config.model_copy(update={"rl": RLConfig(lora=LoRAConfig(r=2, alpha=4, targets=["q_proj", "v_proj"]))})
    parts = build(cfg, store=False)
    assert has_lora(parts.model)
    assert all(".lora_" in n for n, p in parts.model.named_parameters() if p.requires_grad)
    assert len(parts.learner.params) == 2 * 2 * parts.model.config.num_hidden_layers


def test_adapter_weights_from_a_full_state_dict_match_peft(tiny_model_dir):
    from posttrain.models.lora import adapter_weights

    model, _ = load_model(tiny_model_dir)
    apply_lora(model, r=4, alpha=8)
    got, want = adapter_weights(model.state_dict()), adapter_state_dict(model)
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.slow
def test_merged_weights_load_back_into_a_lora_model(tiny_model_dir):
    from posttrain.models.lora import load_merged

    model, _ = load_model(tiny_model_dir)
    apply_lora(model, r=4, alpha=8)
    _randomise_adapters(model)
    merged = merged_state_dict(model)
    again, _ = load_model(tiny_model_dir)
    apply_lora(again, r=4, alpha=8)
    load_merged(again, merged)  # what resuming a LoRA run from its (merged) checkpoint needs
    ids = _ids(model.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(again(ids), model(ids), atol=1e-5, rtol=1e-5)
