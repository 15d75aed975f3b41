"""The native model against transformers' reference implementations, on locally built random weights."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posttrain.models import KVCache, char_tokenizer, load_model, save_model, sequence_logprobs  # noqa: E402

CASES = [
    ("llama", True, 2),
    ("llama", False, 4),  # untied, no GQA
    ("qwen2", True, 2),
    ("qwen2", False, 1),  # multi-query attention
    ("qwen3", True, 2),  # per-head q/k RMSNorm
    ("qwen3", False, 4),
]
HF_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
}


def _hf_model(kind: str, tie: bool, kv: int):
    cls_cfg, cls_model = (getattr(transformers, name) for name in HF_CLASSES[kind])
    extra = {"head_dim": 24} if kind == "qwen3" else {}  # Qwen3 sets head_dim apart from hidden / heads
    cfg = cls_cfg(
        **extra,
        vocab_size=char_tokenizer().vocab_size,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv,
        tie_word_embeddings=tie,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = cls_model(cfg).eval()
    if kind == "qwen2":  # HF inits biases to zero; make them matter
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.bias.normal_()
                layer.self_attn.k_proj.bias.normal_()
    if kind == "qwen3":  # HF inits the q/k norms to ones; make them matter
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
                layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    return model


@pytest.fixture(params=CASES, ids=[f"{k}-tie{t}-kv{v}" for k, t, v in CASES])
def pair(request, tmp_path):
    hf = _hf_model(*request.param)
    hf.save_pretrained(tmp_path)
    char_tokenizer().save(tmp_path)
    native, _ = load_model(tmp_path)
    return hf, native


@pytest.mark.slow
def test_logits_match_transformers(pair):
    hf, native = pair
    ids = torch.randint(0, hf.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
        got = native(ids)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_cached_decoding_matches_full_forward(pair):
    hf, native = pair
    ids = torch.randint(0, hf.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = hf(ids).logits
        cache = KVCache.allocate(native.config, 2, 16)
        steps = [native(ids[:, :5], cache=cache)] + [native(ids[:, i : i + 1], cache=cache) for i in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_left_padded_batch_matches_unpadded_rows(pair):
    _, native = pair
    short, long = [5, 6, 7], [8, 9, 10, 11, 12]
    ids = torch.tensor([[0, 0] + short, long])
    mask = torch.tensor([[False, False, True, True, True], [True] * 5])
    with torch.no_grad():
        cache = KVCache.allocate(native.config, 2, 8)
        batched = native(ids, cache=cache, attention_mask=mask)
        alone = native(torch.tensor([short]))
    torch.testing.assert_close(batched[0, 2:], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_save_roundtrip_loads_in_transformers(tmp_path, pair):
    _, native = pair
    tok = char_tokenizer()
    save_model(native, tok, tmp_path / "out")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.tensor([tok.encode("12+34=")])
    with torch.no_grad():
        torch.testing.assert_close(native(ids), again(ids).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_sequence_logprobs_match_transformers(pair):
    hf, native = pair
    ids = torch.randint(0, hf.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = torch.log_softmax(hf(ids).logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        got = sequence_logprobs(native, ids)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
