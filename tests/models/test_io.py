import json

import pytest
import torch

from posttrain.models import CheckpointError, UnsupportedModelError, char_tokenizer, load_model, save_model
from posttrain.models.config import ModelConfig


def test_roundtrip_is_exact(tiny_model_dir, tmp_path):
    model, tok = load_model(tiny_model_dir)
    save_model(model, tok, tmp_path / "copy")
    again, tok2 = load_model(tmp_path / "copy")
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k
    assert tok2.encode("1+2=") == tok.encode("1+2=")
    assert (tok2.bos_id, tok2.eos_id, tok2.pad_id) == (tok.bos_id, tok.eos_id, tok.pad_id)


def test_tied_checkpoint_has_no_duplicate_head(tiny_model_dir):
    from safetensors.torch import load_file

    assert "lm_head.weight" not in load_file(str(tiny_model_dir / "model.safetensors"))


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="config.json not found"):
        load_model(tmp_path / "nope")


def test_missing_weights_is_a_clear_error(tiny_model_dir, tmp_path):
    (tmp_path / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_model(tmp_path)


def test_weights_that_do_not_fit_are_named(tiny_model_dir, tmp_path):
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    cfg["num_hidden_layers"] += 1
    for f in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / f).write_bytes((tiny_model_dir / f).read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="missing .*layers.2"):
        load_model(tmp_path)


def test_unsupported_features_are_refused():
    with pytest.raises(UnsupportedModelError, match="model_type"):
        ModelConfig(vocab_size=10, model_type="gpt2")
    base = dict(vocab_size=10, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2)
    with pytest.raises(UnsupportedModelError, match="RoPE scaling"):
        ModelConfig.from_hf({**base, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
    with pytest.raises(UnsupportedModelError, match="hidden_act"):
        ModelConfig.from_hf({**base, "hidden_act": "gelu"})


def test_char_tokenizer_roundtrip():
    tok = char_tokenizer()
    text = "Compute 12 + 30 = ?\n(answer: 42)"
    ids = tok.encode(text)
    assert ids[0] == tok.bos_id
    assert len(ids) == len(text) + 1
    assert tok.decode(ids + [tok.eos_id]) == text
