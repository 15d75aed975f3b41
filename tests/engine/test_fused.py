"""The packed decode step (engine/local/fused.py) and its C kernel (engine/local/native_decode.py) against the model's forward."""

import logging
import platform
import subprocess

import pytest
import torch

from posttrain.engine import LocalEngine
from posttrain.engine.local import native_decode
from posttrain.engine.local.fused import FusedDecoder, rotate_half_matrix
from posttrain.engine.local.kv import SlotCache
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.models.logprobs import token_logprobs
from posttrain.types import SamplingParams

KERNEL = native_decode.load_kernel()
NO_KERNEL = "the native decode kernel did not build: the test setup installs a C compiler (scripts/system-deps.sh)"


def _model(seed=0, heads=4, kv_heads=2, bias=False, hidden=32, layers=2, inter=None):
    cfg = ModelConfig(
        vocab_size=char_tokenizer().vocab_size,
        hidden_size=hidden,
        intermediate_size=inter or 3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        attention_bias=bias,
        max_position_embeddings=512,
    )
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed), std=0.2)
    with torch.no_grad():  # non-trivial norm weights and biases, so folding them is tested
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(seed + 1))
    return m.eval()


def _prefilled(model, prompts):
    """Two identical caches holding each prompt in its own row."""
    caches = [SlotCache(model.config, len(prompts) + 1, 64) for _ in range(2)]
    with torch.inference_mode():
        for r, p in enumerate(prompts):
            for c in caches:
                model(torch.tensor([p]), cache=c.bind(torch.tensor([r]), [0], None, len(p)))
    return caches


PATHS = [pytest.param(False, id="torch"), pytest.param(True, id="native")]


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize(
    "heads,kv_heads,bias,hidden,inter",
    [(4, 2, False, 32, None), (4, 4, False, 32, None), (4, 1, True, 32, None), (2, 2, False, 128, None),
     (4, 2, True, 40, 37)],  # head_dim 8, 8, 8, 64 (the 32-wide output tiles) and 10 with an odd MLP (every tail loop)
)
@pytest.mark.slow
def test_decode_step_equals_the_model_forward(native, heads, kv_heads, bias, hidden, inter):
    """Ragged rows (each at its own length) and a lone row: same logits and same cached keys/values."""
    model = _model(heads=heads, kv_heads=kv_heads, bias=bias, hidden=hidden, inter=inter)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 90, (n,), generator=g).tolist() for n in (5, 11, 8)]
    ref_cache, cache = _prefilled(model, prompts)
    fused = FusedDecoder(model, native=native)
    assert (fused.kernel is not None) == native, NO_KERNEL
    lens = [len(p) for p in prompts]
    with torch.inference_mode():
        for _ in range(4):
            ids = torch.randint(3, 90, (3,), generator=g)
            ref = model(ids[:, None], cache=ref_cache.bind(slice(0, 3), lens, None, 1))[:, 0]
            out = fused.step(ids, lens, cache)
            torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-5)
            lens = [n + 1 for n in lens]
        one = torch.tensor([7])
        ref = model(one[:, None], cache=ref_cache.bind(slice(0, 1), lens[:1], None, 1))[:, 0]
        torch.testing.assert_close(fused.step(one, lens[:1], cache), ref, atol=2e-5, rtol=1e-5)
    for a, b in zip(ref_cache.k + ref_cache.v, cache.k + cache.v):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.slow
def test_in_place_weight_updates_are_seen_without_being_told(native):
    """An optimizer step on the shared model bumps version counters: the packed copy is rebuilt."""
    model = _model()
    fused = FusedDecoder(model, native=native)
    assert (fused.kernel is not None) == native, NO_KERNEL
    ref_cache, cache = _prefilled(model, [[5, 6, 7]])
    with torch.inference_mode():
        fused.step(torch.tensor([9]), [3], cache)
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight.mul_(-2.0)
        model.model.norm.weight.add_(0.5)
    ref_cache, cache = _prefilled(model, [[5, 6, 7]])
    with torch.inference_mode():
        ref = model(torch.tensor([[9]]), cache=ref_cache.bind(slice(0, 1), [3], None, 1))[:, 0]
        torch.testing.assert_close(fused.step(torch.tensor([9]), [3], cache), ref, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("hidden", [32, 64])
@pytest.mark.slow
def test_wide_ragged_batches_through_the_kernel_in_chunks_equal_the_model_forward(hidden):
    """37 rows (three kernel calls of 16, 16 and 5 rows) at their own lengths: the rows after the first 16
    read and write their own cache rows, and the logits and cached keys/values equal the model's forward."""
    if KERNEL is None:
        pytest.fail(NO_KERNEL)
    model = _model(hidden=hidden, heads=hidden // 8 if hidden < 64 else 4, kv_heads=2)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 90, (n,), generator=g).tolist() for n in torch.randint(2, 40, (37,), generator=g).tolist()]
    ref_cache, cache = _prefilled(model, prompts)
    fused = FusedDecoder(model)
    calls = []
    real = fused.forward_tokens
    fused.forward_tokens = lambda *a, **k: calls.append(k.get("row0", 0)) or real(*a, **k)
    lens = [len(p) for p in prompts]
    with torch.inference_mode():
        for _ in range(3):
            ids = torch.randint(3, 90, (37,), generator=g)
            ref = model(ids[:, None], cache=ref_cache.bind(slice(0, 37), lens, None, 1))[:, 0]
            torch.testing.assert_close(fused.step(ids, lens, cache), ref, atol=2e-5, rtol=1e-5)
            lens = [n + 1 for n in lens]
    assert calls == [0, 16, 32] * 3  # the ragged batch went through the kernel, chunk by chunk
    for a, b in zip(ref_cache.k + ref_cache.v, cache.k + cache.v):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)


def test_which_path_a_wide_step_takes():
    """Small models and up to 32 rows: the kernel; wide batches of a larger model: PyTorch unless ragged."""
    from posttrain.engine.local.fused import native_is_faster

    assert native_is_faster(128, 300, [299] * 128, hidden=128)
    assert native_is_faster(32, 300, [299] * 32, hidden=640)
    assert not native_is_faster(128, 300, [299] * 128, hidden=640)
    assert native_is_faster(64, 900, [100] * 63 + [899], hidden=640)  # padding to the longest row: 7x the work


def test_cache_overflow_is_a_clear_error():
    model = _model()
    fused = FusedDecoder(model)
    cache = SlotCache(model.config, 1, 4)
    with torch.inference_mode(), pytest.raises(ValueError, match="overflow"):
        fused.step(torch.tensor([3]), [3], cache)


def test_rotate_half_matrix_is_rotate_half():
    x = torch.randn(5, 8)
    assert torch.equal(x @ rotate_half_matrix(8), torch.cat((-x[:, 4:], x[:, :4]), dim=1))


@pytest.mark.parametrize(
    "params", [SamplingParams(temperature=0, max_tokens=24), SamplingParams(temperature=0.8, max_tokens=24, seed=4)]
)
@pytest.mark.slow
def test_engine_with_and_without_the_fused_step_agree(params):
    """Same tokens, logprobs equal to 1e-5, and equal to the learner's (trainer parity) on the fast path."""
    model = _model(hidden=64, layers=3)
    tok = char_tokenizer()
    prompts = ["12+30=", "a longer prompt here"]
    fast = LocalEngine(model, tok, seed=1).generate(prompts, params)
    slow = LocalEngine(model, tok, seed=1, fused_decode=False).generate(prompts, params)
    for gf, gs, prompt in zip(fast, slow, prompts):
        assert gf[0].token_ids == gs[0].token_ids
        torch.testing.assert_close(torch.tensor(gf[0].logprobs), torch.tensor(gs[0].logprobs), atol=1e-5, rtol=1e-5)
        ids = torch.tensor([tok.encode(prompt) + gf[0].token_ids])
        with torch.no_grad():
            t = params.temperature or 1.0
            lp = token_logprobs(model(ids)[:, :-1], ids[:, 1:], temperature=t)[0, len(tok.encode(prompt)) - 1 :]
        if params.temperature:
            torch.testing.assert_close(lp, torch.tensor(gf[0].logprobs), atol=1e-5, rtol=1e-5)


def test_kernel_is_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("POSTTRAIN_NATIVE_KERNELS", "0")
    native_decode.load_kernel.cache_clear()
    try:
        assert native_decode.load_kernel() is None
    finally:
        native_decode.load_kernel.cache_clear()


@pytest.mark.parametrize(
    ("value", "vendor", "expected"),
    [("1", "GenuineIntel", True), ("0", "AuthenticAMD", False), ("auto", "AuthenticAMD", True),
     (None, "AuthenticAMD", True), (None, "GenuineIntel", False), (None, "", False), ("yes", "GenuineIntel", False)],
)
def test_non_temporal_prefetches_are_chosen_per_cpu_or_by_the_environment(monkeypatch, caplog, value, vendor, expected):
    if value is None:
        monkeypatch.delenv("POSTTRAIN_STREAM_PREFETCH", raising=False)
    else:
        monkeypatch.setenv("POSTTRAIN_STREAM_PREFETCH", value)
    monkeypatch.setattr(native_decode, "cpu_vendor", lambda: vendor)
    with caplog.at_level(logging.WARNING):
        assert native_decode.stream_prefetch_default() is expected
    assert ("is not 1, 0 or auto" in caplog.text) == (value == "yes")


def test_the_read_probe_sums_what_it_reads():
    """pt_stream_read (the benchmark's read-bandwidth probe) really reads every element, tail included."""
    assert KERNEL is not None, NO_KERNEL
    x = torch.arange(1, 1000 * 37 + 6, dtype=torch.float32) / 1000
    for nt in (0, 1):
        assert KERNEL.pt_stream_read(x.data_ptr(), x.numel(), nt) == pytest.approx(float(x.double().sum()), rel=1e-6)


# the instruction sets below `-march=native` the kernel must still build for: on x86, AVX without AVX2 and
# SSE only; elsewhere, the compiler's generic baseline for the machine
OLDER_ISAS = (
    [pytest.param(("-mavx", "-mno-avx2", "-mno-fma"), id="avx-no-avx2"), pytest.param(("-mno-avx",), id="sse-only")]
    if platform.machine() in ("x86_64", "AMD64")
    else [pytest.param((), id="generic")]
)


@pytest.mark.parametrize("isa", OLDER_ISAS)
@pytest.mark.slow
def test_the_kernel_builds_on_older_cpus(tmp_path, isa):
    """`-march=native` picks the code paths: a CPU without AVX2 (or without AVX) must still build the kernel,
    not fall back to PyTorch. Only the build is checked; this machine cannot run what a smaller ISA would."""
    cc = native_decode._compiler()
    assert cc is not None, NO_KERNEL
    src = tmp_path / "decode.c"
    src.write_text(native_decode.kernel_source())
    flags = [f for f in native_decode.CFLAGS if f != "-march=native"]
    proc = subprocess.run([cc, *flags, *isa, "-Wno-psabi", "-o", str(tmp_path / "k.so"), str(src), "-lm"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_no_compiler_falls_back_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(native_decode, "_compiler", lambda: None)
    native_decode.load_kernel.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            assert native_decode.load_kernel() is None
        assert "no C compiler" in caplog.text
        model = _model()
        assert FusedDecoder(model).kernel is None  # and the engine still decodes, with PyTorch kernels
        out = LocalEngine(model, char_tokenizer()).generate(["1+1="], SamplingParams(temperature=0, max_tokens=3))
        assert len(out[0][0].token_ids) == 3
    finally:
        native_decode.load_kernel.cache_clear()


@pytest.mark.slow
def test_a_failing_build_falls_back_with_the_compiler_message(monkeypatch, tmp_path, caplog):
    assert KERNEL is not None, NO_KERNEL
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path))
    broken = tmp_path / "decode_kernel.c"
    broken.write_text(native_decode.kernel_source() + "\nthis is not C;\n")
    monkeypatch.setattr(native_decode, "KERNEL_SOURCE", broken)
    native_decode.load_kernel.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            assert native_decode.load_kernel() is None
        assert "failed" in caplog.text
        assert not list((tmp_path / "kernels").glob("*.so"))  # nothing half-built left to load later
    finally:
        native_decode.load_kernel.cache_clear()


@pytest.mark.slow
def test_several_tokens_per_row_equal_the_model_forward():
    """Speculative verification: rows feed 1 + k tokens (some padded) causally in one kernel call."""
    assert KERNEL is not None, NO_KERNEL
    model = _model(heads=4, kv_heads=2, bias=True)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 90, (n,), generator=g).tolist() for n in (6, 9)]
    ref_cache, cache = _prefilled(model, prompts)
    fused = FusedDecoder(model)
    ids = torch.randint(3, 90, (2, 5), generator=g)
    lens, n_valid = [6, 9], [5, 3]
    with torch.inference_mode():
        ref = model(ids, cache=ref_cache.bind(slice(0, 2), lens, n_valid, 5))
        out = fused.forward_tokens(ids, lens, n_valid, cache)
    torch.testing.assert_close(out[0], ref[0], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(out[1, :3], ref[1, :3], atol=2e-5, rtol=1e-5)  # padding logits are junk in both
    for a, b in zip(ref_cache.k + ref_cache.v, cache.k + cache.v):  # real tokens stored, padding stored nowhere real
        torch.testing.assert_close(a[:, :, :-1], b[:, :, :-1], atol=2e-5, rtol=1e-5)
    with torch.inference_mode():
        assert (
            fused.forward_tokens(torch.zeros((4, 5), dtype=torch.long), [0] * 4, None, SlotCache(model.config, 4, 16)) is None
        )  # too wide


def test_engines_over_one_model_share_one_packed_copy_until_it_changes():
    model = _model()
    a, b = FusedDecoder(model), FusedDecoder(model)
    a.ensure("torch")
    b.ensure("torch")
    assert a.w_head is b.w_head  # packed once
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    b.ensure("torch")
    assert b.w_head is not a.w_head  # repacked from the new weights
    torch.testing.assert_close(b.w_head, (model.lm_head.weight * model.model.norm.weight[None, :]).t())


@pytest.mark.slow
def test_growing_the_rope_tables_on_the_wide_path_does_not_leave_the_kernel_stale_addresses():
    """A wide batch (PyTorch step) past position 512 grows the RoPE tables; the next narrow forward
    (C kernel, which caches the tables' addresses) must read the new ones."""
    assert KERNEL is not None, NO_KERNEL
    model = _model()
    rows, slots = 17, 700  # 17 rows: wider than the kernel path
    ref_cache, cache = (SlotCache(model.config, rows, slots) for _ in range(2))
    fused = FusedDecoder(model)
    g = torch.Generator().manual_seed(9)
    with torch.inference_mode():
        prompt = torch.randint(3, 90, (1, 600), generator=g).expand(rows, -1).contiguous()
        for c in (ref_cache, cache):  # every row holds 600 tokens
            model(prompt, cache=c.bind(slice(0, rows), [0] * rows, None, 600))
        one = torch.tensor([5])
        model(one[:, None], cache=ref_cache.bind(slice(0, 1), [600], None, 1))
        fused.forward_tokens(one[:, None], [600], None, cache)  # narrow: the kernel caches the 1024-long tables
        wide = torch.randint(3, 90, (rows,), generator=g)
        starts = [601] * rows
        ref = model(wide[:, None], cache=ref_cache.bind(slice(0, rows), starts, None, 1))[:, 0]
        torch.testing.assert_close(fused.step(wide, starts, cache), ref, atol=2e-5, rtol=1e-5)
        fused._rope_tables(2048)  # grown from outside the kernel's path
        ref = model(one[:, None], cache=ref_cache.bind(slice(0, 1), [602], None, 1))[:, 0]
        torch.testing.assert_close(fused.forward_tokens(one[:, None], [602], None, cache)[:, 0], ref, atol=2e-5, rtol=1e-5)


@pytest.mark.slow
def test_the_kernel_source_ships_as_package_data(tmp_path):
    """`decode_kernel.c` is found beside its module here, and a wheel built from this tree carries it."""
    import shutil
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    assert native_decode.KERNEL_SOURCE.is_file() and "pt_forward_tokens" in native_decode.kernel_source()
    root = Path(__file__).resolve().parents[2]
    shutil.copytree(root / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, tmp_path / name)
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-q",
        "-w",
        str(tmp_path / "dist"),
        str(tmp_path),
    ]
    proc = subprocess.run(build, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    shipped = zipfile.ZipFile(wheel).read("posttrain/engine/local/decode_kernel.c").decode()
    assert shipped == native_decode.kernel_source()
