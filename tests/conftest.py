"""Shared fixtures: tiny random models saved in HF format, built locally (never downloaded)."""

from __future__ import annotations

import pytest
import torch

from posttrain.models import CausalLM, ModelConfig, char_tokenizer, save_model


def make_tiny_model(path, seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2):
    tok = char_tokenizer()
    cfg = ModelConfig(
        vocab_size=tok.vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
    )
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    save_model(model, tok, path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def tiny_config(tiny_model_dir, tmp_path):
    """A RunConfig that trains the tiny random model for a handful of fast steps."""
    from posttrain.config import load_config

    return load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"run_dir='{tmp_path / 'runs'}'",
            "name='smoke'",
            "tasks.digits=1",
            "sampling.n=4",
            "sampling.max_tokens=4",
            "train.steps=5",
            "train.prompts_per_step=4",
            "train.eval_size=20",
            "train.checkpoint_every=0",
            "tensorboard=false",
        ],
    )
