"""Tiny random models saved in HF format, built locally (never downloaded).

A plain module (not conftest) so tests can import it by a unique name: every
conftest.py is imported as `conftest`, so `from conftest import ...` picks
whichever one pytest loaded last.
"""

from __future__ import annotations

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
