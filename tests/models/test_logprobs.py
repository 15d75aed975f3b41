"""Memory-bounded logprobs, bf16 autocast, activation checkpointing and packed rows against the plain paths."""

import pytest
import torch

from posttrain.models import CausalLM, ModelConfig, llama
from posttrain.models.llama import packed_causal_mask
from posttrain.models.logprobs import chunked_logprobs, token_logprobs


def _model(vocab=300, hidden=32, seed=0, model_type="llama"):
    cfg = ModelConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, model_type=model_type)
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed))
    return m


def _ids(b=5, t=41, vocab=300, seed=1):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def _unchunked(m, ids, temperature=1.0):
    return token_logprobs(m(ids)[:, :-1], ids[:, 1:], temperature)


@pytest.mark.parametrize("chunk", [64, 100, 150, 4096])
def test_chunked_logprobs_equal_unchunked_in_fp32_bit_for_bit(chunk):
    m, ids = _model(), _ids()
    with torch.no_grad():
        ref = _unchunked(m, ids, 0.7)
        got, _ = chunked_logprobs(m, ids, 0.7, chunk)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("chunk", [1, 7])
@pytest.mark.slow
def test_tiny_chunks_agree_to_rounding(chunk):
    # below ~64 rows the BLAS picks another GEMM kernel: the same sums, a different order (1 ulp)
    m, ids = _model(), _ids()
    with torch.no_grad():
        torch.testing.assert_close(chunked_logprobs(m, ids, 1.0, chunk)[0], _unchunked(m, ids), atol=2e-6, rtol=0)


def test_chunked_entropy_matches_the_full_distribution():
    m, ids = _model(), _ids()
    with torch.no_grad():
        logq = torch.log_softmax(m(ids)[:, :-1].float() / 0.7, -1)
        ref = -(logq.exp() * logq).sum(-1)
        _, ent = chunked_logprobs(m, ids, 0.7, 64, entropy=True)
    assert ent is not None
    torch.testing.assert_close(ent, ref, atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_chunked_gradients_match_unchunked():
    ids = _ids()
    a, b = _model(), _model()
    _unchunked(a, ids).sum().backward()
    chunked_logprobs(b, ids, 1.0, 64)[0].sum().backward()  # several checkpointed chunks
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pb.grad, pa.grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.slow
def test_bf16_autocast_logprobs_within_tolerance_of_fp32():
    m, ids = _model(), _ids()
    with torch.no_grad():
        ref, _ = chunked_logprobs(m, ids, 1.0, 64)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, _ = chunked_logprobs(m, ids, 1.0, 64)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            whole, _ = chunked_logprobs(m, ids, 1.0, 4096)
    assert got.dtype == torch.float32  # the log-softmax is taken in fp32
    assert float((got - ref).abs().max()) < 0.05
    torch.testing.assert_close(got, whole, atol=1e-2, rtol=0)  # chunked vs unchunked, both bf16


@pytest.mark.slow
def test_activation_checkpointing_gives_the_same_gradients():
    ids = _ids()
    a, b = _model(), _model()
    b.gradient_checkpointing = True
    b.train()
    chunked_logprobs(a, ids, 1.0, 4096)[0].sum().backward()
    chunked_logprobs(b, ids, 1.0, 4096)[0].sum().backward()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pb.grad, pa.grad, atol=1e-7, rtol=1e-6)


def _saved_shapes(m, ids):
    """The shapes autograd keeps for backward from one forward (a checkpoint keeps only its inputs)."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        out = chunked_logprobs(m, ids, 1.0, 4096)[0]
    return out, saved


def test_checkpointing_in_mlp_pieces_keeps_no_layer_activation(monkeypatch):
    monkeypatch.setattr(llama, "MLP_RECOMPUTE_CHUNK", 7)  # 41 positions: pieces of 7, and a last one of 6
    ids = _ids(2, 41)
    a, b = _model(), _model()
    b.gradient_checkpointing = True
    got, saved = _saved_shapes(b, ids)
    with torch.no_grad():
        torch.testing.assert_close(got, chunked_logprobs(a, ids, 1.0, 4096)[0], atol=1e-6, rtol=1e-5)
    assert not [s for s in saved if s[-1] == a.config.intermediate_size]
    assert (2, 6, a.config.hidden_size) in saved  # the last MLP piece's input: the pieces did run


def test_without_checkpointing_the_mlp_activations_are_kept():
    # the check above can fail: without checkpointing, the MLP's [B, T, intermediate] tensors are saved
    m, ids = _model(), _ids(2, 41)
    assert [s for s in _saved_shapes(m, ids)[1] if s[-1] == m.config.intermediate_size]


@pytest.mark.slow
@pytest.mark.parametrize("piece", [7, 41])  # the MLP recomputed in pieces of 7 positions, and whole
def test_checkpointing_in_halves_and_mlp_pieces_gives_the_same_gradients(monkeypatch, piece):
    monkeypatch.setattr(llama, "MLP_RECOMPUTE_CHUNK", piece)
    ids = _ids(2, 41)
    a, b = _model(), _model()
    b.gradient_checkpointing = True
    chunked_logprobs(a, ids, 1.0, 4096)[0].sum().backward()
    chunked_logprobs(b, ids, 1.0, 4096)[0].sum().backward()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pb.grad, pa.grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_packed_row_equals_each_sequence_alone(model_type):
    m = _model(model_type=model_type)
    seqs = [_ids(1, n, seed=n)[0] for n in (9, 5, 13)]
    ids = torch.cat(seqs)[None]
    pos = torch.cat([torch.arange(len(s)) for s in seqs])[None]
    seg = torch.cat([torch.full((len(s),), k) for k, s in enumerate(seqs)])[None]
    with torch.no_grad():
        packed = m(ids, position_ids=pos, segment_ids=seg)[0]
        at = 0
        for s in seqs:
            torch.testing.assert_close(packed[at : at + len(s)], m(s[None])[0], atol=1e-5, rtol=1e-5)
            at += len(s)


def test_packed_mask_is_block_causal():
    mask = packed_causal_mask(torch.tensor([[0, 0, 1, 1, 1]]))[0, 0]
    assert mask.tolist() == [
        [True, False, False, False, False],
        [True, True, False, False, False],
        [False, False, True, False, False],
        [False, False, True, True, False],
        [False, False, True, True, True],
    ]
