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


def copier_model(tok, lag: int, gap: float = 6.5, seed: int = 0, noise: float = 0.7) -> CausalLM:
    """A one-layer Llama that mostly copies the token `lag` places back, with a random rest.

    The copying half is `benchmarks/engine.py`'s hand-set copier (two heads attend by position only
    and carry the token `lag` places back, which the output head raises by about `gap` nats): after
    `<bos> TEXT |` with lag = len(TEXT) the model writes TEXT again, so prompt lookup and a draft
    model are accepted most of the time, as in the benchmark. Unlike the benchmark's, the rest is
    random (seeded): a per-token logit bias and two content-attention heads over the whole history,
    read by the output head, so every conditional distribution differs from the next and depends on
    the KV of the tokens emitted so far (a stale or misplaced cache entry changes the probabilities).
    At the defaults the copied token has probability 0.4-0.9 per position (the benchmark's: 0.92).
    """
    v = tok.vocab_size
    hidden, head_dim = 256, 64
    cfg = ModelConfig(vocab_size=v, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=4, max_position_embeddings=512, tie_word_embeddings=False)  # fmt: skip
    model = CausalLM(cfg)
    g = torch.Generator().manual_seed(seed)
    const, free = 2 * v, 2 * v + 1  # residual dims: [0, v) current token, [v, 2v) copied token, 2v constant, the rest free
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.norm.weight.fill_(1.0)
        layer = model.model.layers[0]
        layer.input_layernorm.weight.fill_(1.0)
        layer.post_attention_layernorm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        emb[:, :v] = torch.eye(v)
        emb[:, const] = 1.0
        scale = (hidden / 2) ** 0.5  # what RMSNorm multiplies an embedding (two unit entries) by
        half = head_dim // 2
        theta = 1.0 / (cfg.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        amp = (8.0 * 10.0) ** 0.5 / scale
        att = layer.self_attn
        for h, lo in ((0, 0), (1, head_dim)):  # the copy: head 0 carries tokens [0, 64), head 1 the rest
            r0 = h * head_dim
            att.q_proj.weight[r0 : r0 + half, const] = amp
            att.k_proj.weight[r0 : r0 + half, const] = amp * torch.cos(lag * theta)
            att.k_proj.weight[r0 + half : r0 + head_dim, const] = amp * torch.sin(lag * theta)
            n = min(head_dim, v - lo)
            att.v_proj.weight[r0 : r0 + n, lo : lo + n] = torch.eye(n)
            att.o_proj.weight[v + lo : v + lo + n, r0 : r0 + n] = torch.eye(n) / scale
        model.lm_head.weight[:, v : 2 * v] = torch.eye(v) * gap / (hidden / 3) ** 0.5
        # the random rest: content attention (heads 2 and 3, keyed on the current token) into the free dims, kept
        # small beside the three unit entries above so the final RMSNorm leaves the copy's margin about `gap`
        rows, width = slice(2 * head_dim, 4 * head_dim), hidden - free
        for w in (att.q_proj.weight, att.k_proj.weight, att.v_proj.weight):
            w[rows, :v] = torch.randn(2 * head_dim, v, generator=g) / scale
        att.o_proj.weight[free:, rows] = 0.1 * torch.randn(width, 2 * head_dim, generator=g) / head_dim**0.5
        # read by the output head (the factor 20 undoes o_proj's 0.1, doubled): at noise 1 the history moves logits ~1 nat
        model.lm_head.weight[:, free:] = noise * 20 * torch.randn(v, width, generator=g) / ((hidden / 3) ** 0.5 * width**0.5)
        model.lm_head.weight[:, const] = noise * torch.randn(v, generator=g) / (hidden / 3) ** 0.5  # a per-token bias
    return model.eval()


def agent_model(positions: int = 1024, layers: int = 2, seed: int = 0) -> CausalLM:
    """A tiny random model with room for agent episodes (the built-in char tokenizer's vocabulary)."""
    tok = char_tokenizer()
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions)
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    return model
