"""Cascade attention for decode steps whose rows share prompts (engine/local/kv.py `SlotCache.attend`): the C
path (`pt_cascade_attend`) against the PyTorch path and against the model's own forward over the whole text."""

import pytest
import torch

from posttrain.engine import LocalEngine
from posttrain.engine.local import kv as kv_mod
from posttrain.engine.local import native_decode
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.models.logprobs import token_logprobs
from posttrain.types import SamplingParams

NO_KERNEL = "the native decode kernel did not build: the test setup installs a C compiler (scripts/system-deps.sh)"
PROMPTS = ["12+30=", "a much longer prompt, of 41 characters..", "7*8="]


def _model(hidden: int, heads: int, kv_heads: int) -> CausalLM:
    cfg = ModelConfig(vocab_size=char_tokenizer().vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      max_position_embeddings=256)
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(3), std=0.2)
    return m.eval()


def _spy_kernel(seen: list):
    """The real kernel, with each `pt_cascade_attend` call's row range (r0, r1) appended to `seen`."""
    real = native_decode.load_kernel()
    assert real is not None, NO_KERNEL

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def pt_cascade_attend(self, r0, r1, *rest):
            seen.append((r0, r1))
            return real.pt_cascade_attend(r0, r1, *rest)

    return Spy()


def _generate(model, native: bool, monkeypatch, calls: list):
    spy = _spy_kernel(calls)
    monkeypatch.setattr(kv_mod, "load_kernel", (lambda: spy) if native else (lambda: None))
    # fused_decode off: the plain model forward, the one every shared-prompt decode step runs
    engine = LocalEngine(model, char_tokenizer(), fused_decode=False)
    params = SamplingParams(n=4, max_tokens=24, temperature=1.0, seed=11, ignore_eos=True)
    return engine.generate(PROMPTS, params)


@pytest.mark.parametrize(("hidden", "heads", "kv_heads"), [(128, 4, 2), (64, 4, 4), (40, 4, 1)],
                         ids=["gqa-d32", "mha-d16", "mqa-d10"])
@pytest.mark.slow
def test_native_cascade_decode_equals_the_pytorch_path_and_the_learner(monkeypatch, one_thread, hidden, heads,
                                                                       kv_heads):
    model = _model(hidden, heads, kv_heads)
    calls: list = []
    fast = _generate(model, True, monkeypatch, calls)
    assert calls and max(r1 - r0 for r0, r1 in calls) == 12  # every decode step's 3 prompts x 4 samples in one call
    slow = _generate(model, False, monkeypatch, [])
    tok = char_tokenizer()
    for prompt, gf, gs in zip(PROMPTS, fast, slow):
        for cf, cs in zip(gf, gs):
            assert cf.token_ids == cs.token_ids
            torch.testing.assert_close(torch.tensor(cf.logprobs), torch.tensor(cs.logprobs), atol=2e-5, rtol=1e-5)
            ids = torch.tensor([tok.encode(prompt) + cf.token_ids])
            with torch.no_grad():  # the learner: one forward over the whole text, no cache
                lp = token_logprobs(model(ids)[:, :-1], ids[:, 1:])[0, len(tok.encode(prompt)) - 1 :]
            torch.testing.assert_close(lp, torch.tensor(cf.logprobs), atol=2e-5, rtol=1e-5)
    assert len({c.text for g in fast for c in g}) > 6  # sampled at T=1: the samples differ


@pytest.mark.slow
def test_a_wide_step_is_split_across_threads_with_the_same_result(monkeypatch):
    """With 2 intra-op threads a step of 48 rows runs as two C calls of 24 rows, one on a pool thread."""
    model = _model(256, 8, 4)  # hidden 256: wide enough for the C path on 2 threads (kv.native_attention_pays)
    before = torch.get_num_threads()
    seen: list = []
    spy = _spy_kernel(seen)
    monkeypatch.setattr(kv_mod, "load_kernel", lambda: spy)
    params = SamplingParams(n=16, max_tokens=6, temperature=1.0, seed=2, ignore_eos=True)
    outs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            seen.clear()
            outs.append(LocalEngine(model, char_tokenizer()).generate(PROMPTS, params))
            parts = sorted({p for p in seen})
            assert parts == ([(0, 48)] if threads == 1 else [(0, 24), (24, 48)])
    finally:
        torch.set_num_threads(before)
    for g1, g2 in zip(*outs):  # each row's attention is computed alone: the split changes nothing (the matmuls
        assert [c.token_ids for c in g1] == [c.token_ids for c in g2]  # around it may round by thread count)
        torch.testing.assert_close(torch.tensor([c.logprobs for c in g1]), torch.tensor([c.logprobs for c in g2]),
                                   atol=1e-5, rtol=1e-5)


def test_a_forked_child_gets_its_own_attention_threads():
    """The pool's threads are not inherited by fork, yet a copied executor would believe they are and queue work
    forever: the child forgets the pool and starts its own. (The child runs no torch op: an OpenMP runtime that
    ran threads before a fork is not usable in the child, with or without this pool.)"""
    import os

    assert kv_mod._attend_pool(1).submit(lambda: 7).result(timeout=10) == 7  # the parent's pool has run work
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            fresh = kv_mod._POOL is None
            got = kv_mod._attend_pool(1).submit(lambda: 7).result(timeout=10)
            os.write(w, b"ok" if fresh and got == 7 else b"bad")
        except BaseException:
            os.write(w, b"bad")
        finally:
            os._exit(0)
    os.close(w)
    status = os.waitpid(pid, 0)[1]
    assert os.read(r, 16) == b"ok" and status == 0


def test_the_c_path_is_taken_where_it_was_measured_faster():
    assert kv_mod.native_attention_pays(1, 128) and kv_mod.native_attention_pays(1, 640)
    assert kv_mod.native_attention_pays(2, 384) and kv_mod.native_attention_pays(4, 256)
    assert not kv_mod.native_attention_pays(2, 128)  # two threads, a small model: PyTorch's matmuls win
