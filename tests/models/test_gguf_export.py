"""GGUF export (models/gguf_export.py): the file read back with `gguf.GGUFReader` computes posttrain's logits.

The reference forward below is llama.cpp's `llama` graph written in numpy from the file alone (its tensor
names, its metadata, its adjacent-pair rotary convention), so a wrong q/k row order, a missing tensor or a
wrong epsilon / RoPE base shows up as different logits. llama.cpp itself is not needed here; the benchmark
(benchmarks/llamacpp.py) checks the same files against it, greedy token for token.
"""

from __future__ import annotations

import sys

import gguf  # the dev extra installs it (posttrain[gguf]): these tests run, never skip
import numpy as np
import pytest
import torch

from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.models.gguf_export import GGUFExportError, GGUFMissingError, export_gguf, rope_pair_order
from posttrain.models.lora import apply_lora


def tiny(bias: bool = False, tied: bool = True, seed: int = 0) -> CausalLM:
    cfg = ModelConfig(vocab_size=char_tokenizer().vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=500.0,
                      tie_word_embeddings=tied, attention_bias=bias)  # fmt: skip
    model = CausalLM(cfg)
    gen = torch.Generator().manual_seed(seed)
    model.init_weights(gen, std=0.1)
    with torch.no_grad():  # init leaves norms at 1 and biases at 0: make both matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model.eval()


def read(path) -> tuple[dict[str, np.ndarray], dict]:
    reader = gguf.GGUFReader(str(path))
    weights = {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64) for t in reader.tensors}
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    return weights, meta


def reference_logits(w: dict[str, np.ndarray], meta: dict, ids: list[int]) -> np.ndarray:
    """llama.cpp's llama forward: RMSNorm, adjacent-pair RoPE, grouped-query causal attention, SwiGLU."""
    n_layers, n_head = meta["llama.block_count"], meta["llama.attention.head_count"]
    n_kv, d = meta["llama.attention.head_count_kv"], meta["llama.rope.dimension_count"]
    eps, base = meta["llama.attention.layer_norm_rms_epsilon"], meta["llama.rope.freq_base"]

    def norm(x, weight):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight

    def rope(x):  # x [T, heads, d]: dimensions (2i, 2i+1) rotate by pos * base^(-2i/d)
        angle = np.arange(len(ids))[:, None] * base ** (-np.arange(0, d, 2) / d)[None, :]
        cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out

    def lin(x, name, i):
        y = x @ w[f"blk.{i}.{name}.weight"].T
        return y + w[f"blk.{i}.{name}.bias"] if f"blk.{i}.{name}.bias" in w else y

    t = len(ids)
    x = w["token_embd.weight"][ids]
    causal = np.tril(np.ones((t, t), dtype=bool))
    for i in range(n_layers):
        h = norm(x, w[f"blk.{i}.attn_norm.weight"])
        q = rope(lin(h, "attn_q", i).reshape(t, n_head, d))
        k = rope(lin(h, "attn_k", i).reshape(t, n_kv, d))
        v = lin(h, "attn_v", i).reshape(t, n_kv, d)
        k, v = np.repeat(k, n_head // n_kv, axis=1), np.repeat(v, n_head // n_kv, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
        scores = np.where(causal[None], scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + lin(np.einsum("hqk,khd->qhd", p, v).reshape(t, n_head * d), "attn_output", i)
        h = norm(x, w[f"blk.{i}.ffn_norm.weight"])
        gate = lin(h, "ffn_gate", i)
        x = x + lin(gate / (1 + np.exp(-gate)) * lin(h, "ffn_up", i), "ffn_down", i)
    x = norm(x, w["output_norm.weight"])
    return x @ w.get("output.weight", w["token_embd.weight"]).T


IDS = [1, 40, 41, 5, 6, 70, 71, 72, 9, 12, 50, 33]


def native_logits(model: CausalLM, ids: list[int]) -> np.ndarray:
    with torch.inference_mode():
        return model(torch.tensor([ids]))[0].double().numpy()


@pytest.mark.parametrize("bias,tied", [(False, True), (True, False)])
def test_f32_file_computes_the_same_logits(tmp_path, bias, tied):
    model = tiny(bias=bias, tied=tied)
    weights, meta = read(export_gguf(model, char_tokenizer(), tmp_path / "m.gguf", "f32"))
    assert ("output.weight" in weights) == (not tied)
    assert ("blk.0.attn_q.bias" in weights) == bias
    ref = reference_logits(weights, meta, IDS)
    np.testing.assert_allclose(ref, native_logits(model, IDS), atol=2e-4, rtol=0)


def test_the_reference_sees_the_rotary_order(tmp_path):
    """Undo the q/k row reordering and the logits differ: the test above would catch a wrong order."""
    model = tiny()
    weights, meta = read(export_gguf(model, char_tokenizer(), tmp_path / "m.gguf", "f32"))
    d, inverse = meta["llama.rope.dimension_count"], {}
    for name in ("attn_q", "attn_k"):
        heads = weights[f"blk.0.{name}.weight"].shape[0] // d
        inverse[name] = np.argsort(rope_pair_order(heads, d))
    for i in range(meta["llama.block_count"]):
        for name in ("attn_q", "attn_k"):
            weights[f"blk.{i}.{name}.weight"] = weights[f"blk.{i}.{name}.weight"][inverse[name]]
    assert np.abs(reference_logits(weights, meta, IDS) - native_logits(model, IDS)).max() > 1e-2


def test_rope_pair_order_interleaves_each_heads_halves():
    assert rope_pair_order(2, 4).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_q8_0_file_is_blockwise_8_bit_and_close(tmp_path):
    model = tiny()
    path = export_gguf(model, char_tokenizer(), tmp_path / "m.gguf", "q8_0")
    reader = gguf.GGUFReader(str(path))
    kinds = {t.name: t.tensor_type for t in reader.tensors}
    Q8, F32 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.F32
    assert kinds["token_embd.weight"] == Q8 and kinds["blk.1.ffn_down.weight"] == Q8
    assert kinds["blk.0.attn_norm.weight"] == F32 and kinds["output_norm.weight"] == F32
    weights, meta = read(path)
    assert meta["general.file_type"] == int(gguf.LlamaFileType.MOSTLY_Q8_0)
    # one f16 scale d per 32 weights, absmax / 127, q = round(w / d): |q d16 - w| <= d / 2 + 127 |d16 - d|,
    # and an f16 rounds d by at most 2^-11 of itself
    emb = model.model.embed_tokens.weight.detach().double().numpy()
    step = np.abs(emb).reshape(emb.shape[0], -1, 32).max(-1, keepdims=True) / 127
    err = np.abs(weights["token_embd.weight"] - emb).reshape(emb.shape[0], -1, 32)
    assert (err <= step * (0.5 + 127 * 2**-11) + 1e-9).all()
    assert 0 < err.max()
    ref, native = reference_logits(weights, meta, IDS), native_logits(model, IDS)
    assert np.abs(ref - native).max() < 0.05 * np.abs(native).max()  # ~0.5% per weight, through every layer


def test_metadata_and_vocabulary(tmp_path):
    tok = char_tokenizer()
    model = tiny()
    _, meta = read(export_gguf(model, tok, tmp_path / "m.gguf"))
    cfg = model.config
    assert meta["general.architecture"] == "llama"
    assert (meta["llama.embedding_length"], meta["llama.block_count"], meta["llama.feed_forward_length"]) == (64, 2, 96)
    assert (meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]) == (4, 2)
    assert meta["llama.rope.freq_base"] == pytest.approx(cfg.rope_theta)
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(cfg.rms_norm_eps)
    tokens = meta["tokenizer.ggml.tokens"]
    assert len(tokens) == tok.vocab_size == meta["llama.vocab_size"]
    assert tokens[tok.encode("a", add_bos=False)[0]] == "a"
    assert tokens[tok.encode(" ", add_bos=False)[0]] == "\u2581"
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"]) == (tok.bos_id, tok.eos_id)
    assert meta["tokenizer.ggml.model"] == "llama" and meta["tokenizer.ggml.add_bos_token"] is True
    control = int(gguf.TokenType.CONTROL)
    assert [meta["tokenizer.ggml.token_type"][i] for i in (tok.bos_id, tok.eos_id)] == [control, control]


def test_what_it_cannot_write_is_refused(tmp_path, monkeypatch):
    tok = char_tokenizer()
    with pytest.raises(GGUFExportError, match="one of f32, q8_0"):
        export_gguf(tiny(), tok, tmp_path / "m.gguf", "q4_0")
    qwen = CausalLM(ModelConfig(vocab_size=tok.vocab_size, hidden_size=64, num_attention_heads=4, model_type="qwen2"))
    with pytest.raises(GGUFExportError, match="convert_hf_to_gguf"):
        export_gguf(qwen, tok, tmp_path / "m.gguf")
    monkeypatch.setitem(sys.modules, "gguf", None)  # an import of gguf now fails, as when it is not installed
    with pytest.raises(GGUFMissingError, match=r"posttrain\[gguf\]"):
        export_gguf(tiny(), tok, tmp_path / "m.gguf")


@pytest.mark.slow
def test_a_model_with_lora_adapters_is_refused(tmp_path):
    """Slow only because building adapters imports peft (~3 s of CPU); the other refusals stay in the fast subset."""
    with_adapters = apply_lora(tiny(), r=2, targets=("q_proj",))
    with pytest.raises(GGUFExportError, match="LoRA"):
        export_gguf(with_adapters, char_tokenizer(), tmp_path / "m.gguf")
