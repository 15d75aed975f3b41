"""A lone greedy sequence's decode in runs inside the C kernel (`ModelRunner.greedy_run`,
`FusedDecoder.decode_greedy`): the same tokens and logprobs as one step at a time, and only when it may run."""

import pytest
import torch

from posttrain.engine import LocalEngine
from posttrain.engine.local import native_decode
from posttrain.engine.local import runner as runner_mod
from posttrain.engine.local.fused import FusedDecoder
from posttrain.engine.local.sequence import RequestStatus
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.models.logprobs import token_logprobs
from posttrain.types import FinishReason, SamplingParams

NO_KERNEL = "the native decode kernel did not build: the test setup installs a C compiler (scripts/system-deps.sh)"
PROMPT = "12+30= and a few more words"


@pytest.fixture(scope="module")
def model():
    assert native_decode.load_kernel() is not None, NO_KERNEL
    cfg = ModelConfig(vocab_size=char_tokenizer().vocab_size, hidden_size=64, intermediate_size=160,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(5), std=0.2)  # wide logits: varied, non-repeating greedy text
    return m.eval()


@pytest.fixture
def runs(monkeypatch):
    """Counts the greedy runs the engine makes (and the tokens they return)."""
    seen = []
    real = FusedDecoder.decode_greedy

    def spy(self, *a, **k):
        out = real(self, *a, **k)
        seen.append(0 if out is None else len(out[0]))
        return out

    monkeypatch.setattr(FusedDecoder, "decode_greedy", spy)
    return seen


def _generate(model, params, run: int, monkeypatch, precision="fp32", prompt=PROMPT):
    monkeypatch.setattr(runner_mod, "GREEDY_RUN", run)  # 1 turns the runs off: one Python step per token
    return LocalEngine(model, char_tokenizer(), precision=precision).generate([prompt], params)[0][0]


def _model_argmax(model, ids, n):
    """n greedy tokens from the model's own full forward, no cache: the reference the runs must equal."""
    ids = list(ids)
    out = []
    with torch.no_grad():
        for _ in range(n):
            t = int(model(torch.tensor([ids]))[0, -1].argmax())
            ids.append(t)
            out.append(t)
    return out


@pytest.mark.parametrize("precision", ["fp32", "int8", "bf16"])
@pytest.mark.parametrize("max_tokens", [3, 17, 40])
@pytest.mark.slow
def test_a_greedy_run_equals_decoding_one_step_at_a_time(model, monkeypatch, runs, precision, max_tokens):
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    slow = _generate(model, params, 1, monkeypatch, precision)
    assert runs == []
    fast = _generate(model, params, 16, monkeypatch, precision)
    assert sum(runs) == max_tokens - 1  # every token after the prompt's first came from a run
    assert fast.token_ids == slow.token_ids and len(set(fast.token_ids)) >= min(max_tokens, 4)
    torch.testing.assert_close(torch.tensor(fast.logprobs), torch.tensor(slow.logprobs), atol=1e-5, rtol=1e-5)
    assert fast.finish_reason == slow.finish_reason == FinishReason.LENGTH


@pytest.mark.slow
def test_greedy_run_logprobs_are_the_learners(model, monkeypatch, runs):
    """Trainer parity: the run's logprobs are log_softmax of the model's own forward at each position."""
    tok = char_tokenizer()
    out = _generate(model, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True), 16, monkeypatch)
    assert sum(runs) == 29
    ids = torch.tensor([tok.encode(PROMPT) + out.token_ids])
    with torch.no_grad():
        lp = token_logprobs(model(ids)[:, :-1], ids[:, 1:])[0, len(tok.encode(PROMPT)) - 1 :]
    torch.testing.assert_close(lp, torch.tensor(out.logprobs), atol=1e-5, rtol=1e-5)
    assert out.token_ids == _model_argmax(model, tok.encode(PROMPT), 30)


@pytest.mark.slow
def test_a_run_stops_at_a_stop_token_inside_it(model, monkeypatch, runs):
    free = _generate(model, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True), 1, monkeypatch)
    stop = free.token_ids[9]  # a token first produced mid-run
    first = free.token_ids.index(stop)
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, stop_token_ids=(stop,))
    fast = _generate(model, params, 16, monkeypatch)
    assert fast.token_ids == free.token_ids[: first + 1]
    assert fast.finish_reason == FinishReason.STOP
    assert runs and runs[-1] < 16  # the kernel stopped, not the Python loop after it


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0, max_tokens=20, stop=("zz",)),  # stop strings: checked per token in Python
        SamplingParams(temperature=0, max_tokens=20, top_k=5),  # filtered: logprobs of the filtered distribution
        SamplingParams(temperature=0.7, max_tokens=20, seed=3),  # sampled
    ],
    ids=["stop-string", "top-k", "sampled"],
)
@pytest.mark.slow
def test_no_run_where_it_would_change_what_is_returned(model, monkeypatch, runs, params):
    slow = _generate(model, params, 1, monkeypatch)
    fast = _generate(model, params, 16, monkeypatch)
    assert runs == []
    assert fast.token_ids == slow.token_ids
    assert fast.logprobs == slow.logprobs


@pytest.mark.slow
def test_a_request_submitted_mid_decode_is_admitted_and_both_match_their_solo_outputs(model, monkeypatch, runs):
    tok = char_tokenizer()
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    solo = [_generate(model, params, 1, monkeypatch, prompt=p).token_ids for p in (PROMPT, "another prompt")]
    monkeypatch.setattr(runner_mod, "GREEDY_RUN", 16)
    eng = LocalEngine(model, tok)
    a = eng.submit(tok.encode(PROMPT), params)
    eng.step()  # prefill and the first token, then a run
    eng.step()  # a second run
    assert runs == [16, 16] and len(a.samples[0].out) == 33
    b = eng.submit(tok.encode("another prompt"), params)
    eng.step()  # b is admitted and prefilled: A decodes one plain step beside it
    assert runs == [16, 16] and len(a.samples[0].out) == 34
    while a.status is not RequestStatus.FINISHED:
        eng.step()
    assert runs == [16, 16]  # two rows: the batched step
    while eng.has_unfinished():  # b alone again: runs
        eng.step()
    assert sum(runs) > 32
    assert [a.completions[0].token_ids, b.completions[0].token_ids] == solo


@pytest.mark.slow
def test_without_the_kernel_the_engine_decodes_step_by_step(model, monkeypatch, runs):
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    slow = _generate(model, params, 1, monkeypatch)
    monkeypatch.setattr(runner_mod, "GREEDY_RUN", 16)
    eng = LocalEngine(model, char_tokenizer())
    eng.fused.kernel = None
    out = eng.generate([PROMPT], params)[0][0]
    assert runs == [0] * 18 and out.token_ids == slow.token_ids


@pytest.mark.parametrize("precision", ["fp32", "int8", "bf16"])
@pytest.mark.slow
def test_non_temporal_prefetches_change_nothing_but_speed(model, monkeypatch, runs, precision):
    """The loader picks prefetchnta per CPU (native_decode.stream_prefetch_default): both choices decode the
    same tokens with bitwise-equal logprobs, through the runs (batch 1) and the plain kernel step alike."""
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    before = native_decode.stream_prefetch_default()
    outs = []
    try:
        for on in (True, False):
            native_decode.set_stream_prefetch(on)
            outs.append(_generate(model, params, 16, monkeypatch, precision))
            outs.append(_generate(model, params, 1, monkeypatch, precision))
    finally:
        native_decode.set_stream_prefetch(before)
    assert sum(runs) == 2 * 23
    for on, off in ((outs[0], outs[2]), (outs[1], outs[3])):  # runs with runs, steps with steps
        assert on.token_ids == off.token_ids == outs[0].token_ids and on.logprobs == off.logprobs
