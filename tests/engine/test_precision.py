"""The high-speed mode: bf16 / int8 weight-only serving (engine/local/precision.py) on every decode path.

Tolerances, and why. Quantisation error is relative to the weights' scale: int8 with a per-row absmax
scale rounds each weight by at most scale / 2 = absmax / 254 (about 0.6% of a Gaussian row's standard
deviation, RMS), bf16 by at most 2^-9 relative. After two layers and the head, on a random model whose
logits are nearly flat, that measured (4 seeds) max |dlogit| / max |logit| <= 0.07 (int8) and <= 0.02
(bf16), and top-1 agreement >= 95% (int8) and >= 98% (bf16) over 384 positions; the bounds below leave
about 2x room. The quality cost on a trained model (held-out accuracy, perplexity) is measured by
benchmarks/fast.py, not asserted here. The kernel against the PyTorch reference on the same rounded
weights is a pure float-rounding comparison: 1e-5 relative to the logit scale.
"""

import pytest
import torch

from posttrain.config import ConfigError, EngineConfig, build_config
from posttrain.engine import LocalEngine
from posttrain.engine.build import build_engine
from posttrain.engine.local import native_decode
from posttrain.engine.local.fused import FusedDecoder
from posttrain.engine.local.kv import SlotCache
from posttrain.engine.local.precision import PrecisionError, ServingCopy, dequantize, quantize, serving_copy
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.types import SamplingParams

KERNEL = native_decode.load_kernel()
NO_KERNEL = "the native decode kernel did not build: the test setup installs a C compiler (scripts/system-deps.sh)"
QUANTISED = ("int8", "bf16")
BOUNDS = {"int8": (0.12, 0.90), "bf16": (0.04, 0.96)}  # (max |dlogit| / max |logit|, top-1 agreement)


def _model(seed=0, hidden=128, heads=4, kv_heads=2, layers=2, bias=False, std=0.08, inter=None, tied=True):
    cfg = ModelConfig(
        vocab_size=char_tokenizer().vocab_size, hidden_size=hidden, intermediate_size=inter or 3 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads, attention_bias=bias,
        max_position_embeddings=512, tie_word_embeddings=tied,
    )  # fmt: skip
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed), std=std)
    with torch.no_grad():  # non-trivial norm weights and biases: the quantised kernel applies them itself
        g = torch.Generator().manual_seed(seed + 1)
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5, generator=g)
            elif name.endswith(".bias"):
                p.uniform_(-0.5, 0.5, generator=g)
    return m.eval()


@pytest.mark.parametrize("precision", QUANTISED)
def test_quantize_bounds_the_error_and_is_idempotent(precision):
    w = torch.randn(48, 40, generator=torch.Generator().manual_seed(0))
    w[3] = 0.0  # an all-zero row
    q, s = quantize(w, precision)
    back = dequantize(q, s)
    if precision == "int8":
        assert q.dtype == torch.int8 and int(q.abs().max()) <= 127
        assert bool(((back - w).abs() <= s[:, None] / 2 + 1e-7).all())
    else:
        assert q.dtype == torch.bfloat16
        assert bool(((back - w).abs() <= w.abs() * 2**-8).all())
    assert torch.equal(back[3], torch.zeros(40))
    q2, s2 = quantize(back, precision)  # the kernel packs from the copy's rounded weights: it must get q back
    assert torch.equal(q2, q)
    torch.testing.assert_close(s2, s, rtol=1e-6, atol=0)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("precision", QUANTISED)
@pytest.mark.slow
def test_rounded_logits_stay_close_to_fp32(precision, seed):
    model = _model(seed=seed)
    ids = torch.randint(3, 90, (16, 24), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ref = model(ids)
        out = ServingCopy(model, precision).module(ids)
    rel = float(((out - ref).abs().amax(-1) / ref.abs().amax(-1)).max())
    top1 = float((out.argmax(-1) == ref.argmax(-1)).float().mean())
    max_rel, min_top1 = BOUNDS[precision]
    assert 0 < rel <= max_rel, rel  # > 0: the copy really is rounded
    assert top1 >= min_top1, top1


def _prefilled(model, prompts):
    caches = [SlotCache(model.config, len(prompts) + 1, 64) for _ in range(2)]
    with torch.inference_mode():
        for r, p in enumerate(prompts):
            for c in caches:
                model(torch.tensor([p]), cache=c.bind(torch.tensor([r]), [0], None, len(p)))
    return caches


@pytest.mark.parametrize("precision", QUANTISED)
@pytest.mark.parametrize(
    "heads,kv_heads,bias,hidden,inter,tied",
    [(4, 2, False, 128, None, True), (4, 1, True, 32, None, True), (2, 2, False, 64, None, False), (4, 2, True, 40, 37, True)],
)  # head_dim 32 (the 32-wide output tiles), 8, 32 (an untied lm_head: the embedding stays fp32) and 10 with an odd MLP
@pytest.mark.slow
def test_the_kernel_on_quantised_panels_equals_the_pytorch_reference(precision, heads, kv_heads, bias, hidden, inter, tied):
    """Several tokens per ragged row, then one-token steps: logits and cached keys/values of the rounded copy's
    PyTorch forward, from int8 / bf16 panels dequantised in registers."""
    assert KERNEL is not None, NO_KERNEL
    model = _model(heads=heads, kv_heads=kv_heads, bias=bias, hidden=hidden, inter=inter, tied=tied)
    copy = ServingCopy(model, precision).module
    embed_rounded = not torch.equal(copy.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert embed_rounded == tied  # a tied embedding is the lm_head's one tensor, rounded with it
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 90, (n,), generator=g).tolist() for n in (5, 11, 8)]
    ref_cache, cache = _prefilled(copy, prompts)
    fused = FusedDecoder(copy, precision=precision)
    lens = [len(p) for p in prompts]
    with torch.inference_mode():
        ids = torch.randint(3, 90, (3, 4), generator=g)
        ref = copy(ids, cache=ref_cache.bind(slice(0, 3), lens, None, 4))
        out = fused.forward_tokens(ids, lens, None, cache)
        scale = float(ref.abs().max())
        torch.testing.assert_close(out, ref, atol=1e-5 * scale, rtol=0)
        lens = [n + 4 for n in lens]
        for _ in range(3):
            ids = torch.randint(3, 90, (3,), generator=g)
            ref = copy(ids[:, None], cache=ref_cache.bind(slice(0, 3), lens, None, 1))[:, 0]
            torch.testing.assert_close(fused.step(ids, lens, cache), ref, atol=1e-5 * scale, rtol=0)
            lens = [n + 1 for n in lens]
    for a, b in zip(ref_cache.k + ref_cache.v, cache.k + cache.v, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("precision", ["fp32", *QUANTISED])
@pytest.mark.parametrize("spec", [False, True])
@pytest.mark.slow
def test_greedy_generation_is_identical_on_the_kernel_and_the_fallback(precision, spec):
    """The same precision on the C kernel, on the PyTorch step (dequantised weights) and on the model's forward."""
    assert KERNEL is not None, NO_KERNEL
    from posttrain.engine import SpecConfig

    model, tok = _model(hidden=64, layers=3), char_tokenizer()
    params = SamplingParams(temperature=0, max_tokens=24)
    prompts = ["12+30=", "abcabcabcabc", "a longer prompt here"]
    sc = SpecConfig(k=4) if spec else None
    kernel = LocalEngine(model, tok, precision=precision, speculative=sc).generate(prompts, params)
    fallback = LocalEngine(model, tok, precision=precision, speculative=sc, fused_decode=False).generate(prompts, params)
    torch_step = LocalEngine(model, tok, precision=precision)
    torch_step.fused.kernel = None  # the packed PyTorch step on the same decoder
    stepped = torch_step.generate(prompts, params)
    for a, b, c in zip(kernel, fallback, stepped, strict=True):
        assert a[0].token_ids == b[0].token_ids == c[0].token_ids
        torch.testing.assert_close(torch.tensor(a[0].logprobs), torch.tensor(b[0].logprobs), atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_only_fp32_samples_with_the_learner_module():
    model, tok = _model(), char_tokenizer()
    fp32 = LocalEngine(model, tok)
    assert fp32.samples_with_learner_module and fp32.policy_model is model
    for precision in QUANTISED:
        engine = LocalEngine(model, tok, precision=precision)
        assert not engine.samples_with_learner_module and engine.policy_model is not model
        out = engine.generate(["12+30="], SamplingParams(temperature=0, max_tokens=8))
        assert out[0][0].token_ids  # it samples


@pytest.mark.parametrize("precision", QUANTISED)
@pytest.mark.slow
def test_the_rounded_copy_follows_in_place_updates_and_load_weights(precision):
    """An optimizer-style in-place update, then `load_weights` of a new state: the engine samples what a fresh
    engine over the updated model samples, on the kernel and the fallback path."""
    model, tok = _model(hidden=64), char_tokenizer()
    params = SamplingParams(temperature=0, max_tokens=16)
    engines = [LocalEngine(model, tok, precision=precision, fused_decode=f) for f in (True, False)]
    before = [e.generate(["12+30="], params)[0][0].token_ids for e in engines]

    def fresh():  # over a separate model object: no shared copy or pack
        other = _model(hidden=64)
        other.load_state_dict(model.state_dict())
        return LocalEngine(other, tok, precision=precision).generate(["12+30="], params)[0][0].token_ids

    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(-3.0)
        model.lm_head.weight.add_(torch.randn(model.lm_head.weight.shape, generator=torch.Generator().manual_seed(5)))
    want = fresh()
    assert want != before[0]  # the update matters
    assert [e.generate(["12+30="], params)[0][0].token_ids for e in engines] == [want, want]
    state = {k: v.clone() for k, v in _model(seed=7, hidden=64).state_dict().items()}
    for e in engines:
        e.load_weights(state, version=3)
    want = fresh()
    assert [e.generate(["12+30="], params)[0][0].token_ids for e in engines] == [want, want]
    assert serving_copy(model, precision).module is engines[0].policy_model  # one copy per (model, precision)


def test_precision_errors_are_one_line():
    model, tok = _model(), char_tokenizer()
    with pytest.raises(PrecisionError) as exc:
        LocalEngine(model, tok, precision="fp16")
    assert "\n" not in str(exc.value) and "fp32, bf16, int8" in str(exc.value)
    with pytest.raises(PrecisionError) as exc:
        LocalEngine(model.double(), tok, precision="int8")
    assert "\n" not in str(exc.value) and "float64" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        build_config({"engine": {"precision": "fp16"}})
    assert "\n" not in str(exc.value) and "precision" in str(exc.value)


def test_the_config_section_builds_the_precision():
    model, tok = _model(), char_tokenizer()
    engine = build_engine(EngineConfig(precision="int8"), model, tok)
    assert isinstance(engine, LocalEngine) and engine.precision == "int8" and not engine.samples_with_learner_module


@pytest.mark.slow
def test_serve_fast_is_int8_with_prompt_lookup(tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli import app
    from posttrain.models import save_model
    from posttrain.resolve import load_served_model

    save_model(_model(), char_tokenizer(), tmp_path / "ckpt")
    fast = load_served_model(str(tmp_path / "ckpt"), fast=True).engine
    assert isinstance(fast, LocalEngine) and fast.precision == "int8" and fast.spec is not None and fast.spec.method == "ngram"
    plain = load_served_model(str(tmp_path / "ckpt")).engine
    assert isinstance(plain, LocalEngine) and plain.precision == "fp32" and plain.spec is None
    out = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert "--fast" in out and "int8" in out
