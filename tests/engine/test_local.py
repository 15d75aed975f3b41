import asyncio
import logging

import pytest
import torch

from posttrain.engine import ContextLengthError, Engine, LocalEngine, WindowSpec, process_logits
from posttrain.engine.local import WeightsMismatchError
from posttrain.models import load_model
from posttrain.models.logprobs import token_logprobs
from posttrain.types import FinishReason, SamplingParams


@pytest.fixture
def engine(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    return LocalEngine(model, tok, seed=0)


def _manual_greedy(model, ids, steps):
    seq = list(ids)
    out = []
    with torch.no_grad():
        for _ in range(steps):
            nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
            out.append(nxt)
            seq.append(nxt)
    return out


@pytest.mark.slow
def test_greedy_matches_uncached_argmax_decoding(engine):
    prompts = ["7+5=", "123+4=", "9="]  # different lengths: exercises left padding
    groups = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=6))
    for prompt, group in zip(prompts, groups):
        expected = _manual_greedy(engine.model, engine.tokenizer.encode(prompt), 6)
        got = group[0].token_ids
        assert got == expected[: len(got)]
        if group[0].finish_reason is FinishReason.STOP:
            assert got[-1] == engine.tokenizer.eos_id


def test_group_of_n_shares_one_prefill(engine):
    engine.stats.prefill_tokens = engine.stats.prompt_tokens_submitted = 0
    groups = engine.generate(["12+34=", "5+6="], SamplingParams(n=8, max_tokens=3))
    assert [len(g) for g in groups] == [8, 8]
    assert engine.stats.prefill_tokens * 8 == engine.stats.prompt_tokens_submitted


@pytest.mark.slow
def test_seeded_sampling_is_reproducible(engine):
    p = SamplingParams(n=4, max_tokens=5, seed=123)
    a = engine.generate(["1+1="], p)[0]
    b = engine.generate(["1+1="], p)[0]
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


@pytest.mark.slow
def test_engine_logprobs_equal_learner_logprobs(engine):
    """Trainer parity: for the same tokens, the sampler's logprobs equal a fresh forward's (fp32, CPU)."""
    prompts = ["3+4=", "10+20="]
    groups = engine.generate(prompts, SamplingParams(n=3, max_tokens=5, temperature=0.7, seed=1))
    for prompt, group in zip(prompts, groups):
        p_ids = engine.tokenizer.encode(prompt)
        for c in group:
            ids = torch.tensor([p_ids + c.token_ids])
            with torch.no_grad():
                lp = token_logprobs(engine.model(ids)[:, :-1], ids[:, 1:], temperature=0.7)[0, len(p_ids) - 1 :]
            torch.testing.assert_close(lp, torch.tensor(c.logprobs), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_max_tokens_bounds_length(engine):
    c = engine.generate(["1="], SamplingParams(n=2, max_tokens=3, stop_token_ids=()))[0]
    assert all(len(x.token_ids) <= 3 for x in c)
    assert all(x.finish_reason in (FinishReason.LENGTH, FinishReason.STOP) for x in c)


def test_empty_prompt_is_rejected(engine):
    with pytest.raises(ValueError, match="empty prompt"):
        engine.generate([[]], SamplingParams())


def test_top_k_and_top_p_filtering():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    k2 = process_logits(logits, 1.0, top_k=2)
    assert torch.isinf(k2[0, 2:]).all() and torch.isfinite(k2[0, :2]).all()
    p = process_logits(logits, 1.0, top_p=0.8)  # 0.5 + 0.3 reaches 0.8: keep two
    assert torch.isfinite(p[0, :2]).all() and torch.isinf(p[0, 2:]).all()
    p_all = process_logits(logits, 1.0, top_p=0.81)
    assert torch.isfinite(p_all[0, :3]).all()


def test_sampling_params_are_validated():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)


def _greedy(n_tokens=8, **kw):
    return SamplingParams(temperature=0, max_tokens=n_tokens, **kw)


@pytest.mark.slow
def test_local_engine_satisfies_the_engine_protocol(engine):
    assert isinstance(engine, Engine)
    # and behaves as the protocol says, not only by name
    assert engine.encode(["1+2="]) == [engine.tokenizer.encode("1+2=")]
    assert engine.tokenizer.decode(engine.tokenizer.encode("1+2=", add_bos=False)) == "1+2="
    assert engine.usage is None
    assert engine.max_context == engine.model.config.max_position_embeddings == 256
    assert engine.max_concurrency >= 1
    params = _greedy(5, ignore_eos=True)
    want = engine.generate(["7+7="], params)
    assert asyncio.run(engine.agenerate(["7+7="], params)) == want
    engine.close()
    streamed = [d for d in engine.stream(["7+7="], params)]
    assert streamed[-1].completion == want[0][0]
    engine.load_weights(engine.model.state_dict(), version=5)
    assert engine.policy_version == 5 and engine.generate(["7+7="], params)[0][0].policy_version == 5
    state = engine.sampler_state()
    unseeded = SamplingParams(n=3, max_tokens=6, temperature=1.0)
    first = engine.generate(["7+7="], unseeded)
    engine.load_sampler_state(state)
    assert engine.generate(["7+7="], unseeded) == first  # resumed to the same draws


@pytest.mark.slow
def test_concurrent_agenerate_calls_share_one_batch_and_equal_generate(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    prompts = [f"{i}+{2 * i}=" for i in range(8)]
    budgets = [3 + i % 4 for i in range(8)]
    want = [LocalEngine(model, tok).generate([p], _greedy(m, ignore_eos=True))[0] for p, m in zip(prompts, budgets)]
    engine = LocalEngine(model, tok)

    async def all_at_once():
        return await asyncio.gather(*(engine.agenerate([p], _greedy(m, ignore_eos=True)) for p, m in zip(prompts, budgets)))

    try:
        got = asyncio.run(all_at_once())
        worker = engine.start_worker()
        assert worker.stats.max_jobs_together > 1  # the coroutines' requests ran in the same engine steps
        assert worker.stats.engine_calls < sum(budgets)  # ... not one after another
        for g, w in zip(got, want):
            assert g[0][0].token_ids == w[0].token_ids
            torch.testing.assert_close(torch.tensor(g[0][0].logprobs), torch.tensor(w[0].logprobs), atol=1e-5, rtol=1e-5)
    finally:
        engine.close()


@pytest.mark.slow
def test_seeded_agenerate_equals_generate_among_other_traffic(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    seeded = SamplingParams(n=4, max_tokens=6, temperature=1.0, seed=321)
    want = LocalEngine(model, tok).generate(["9+9=", "abc"], seeded)
    engine = LocalEngine(model, tok)

    async def mixed():
        noise = [engine.agenerate(["1+2="], SamplingParams(n=2, max_tokens=6)) for _ in range(3)]
        return await asyncio.gather(*noise, engine.agenerate(["9+9=", "abc"], seeded))

    try:
        got = asyncio.run(mixed())[-1]
    finally:
        engine.close()
    assert [[c.token_ids for c in g] for g in got] == [[c.token_ids for c in g] for g in want]


def test_generate_and_stream_go_through_the_running_worker(tiny_model_dir):
    """Once the worker runs, the engine has one caller: direct submit/step from elsewhere is refused."""
    import threading

    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(model, tok)
    params = _greedy(6, ignore_eos=True)
    want = engine.generate(["5+5="], params)  # no worker yet: this thread drives the engine
    worker = engine.start_worker()
    worker.linger_s = 60.0  # its thread stays up through the test (by default it ends when idle 20 ms)
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(engine.generate(["5+5="], params))) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 3
        for r in results:  # batched together: logprobs agree to float rounding
            assert r[0][0].token_ids == want[0][0].token_ids and r[0][0].text == want[0][0].text
            assert r[0][0].logprobs == pytest.approx(want[0][0].logprobs, abs=1e-5)
        assert "".join(d.text for d in engine.stream(["5+5="], params)) == want[0][0].text
        assert worker.stats.jobs == 4
        with pytest.raises(RuntimeError, match="worker"):
            engine.step()
    finally:
        engine.close()
    assert engine.generate(["5+5="], params) == want  # closed: this thread drives it again
    assert asyncio.run(engine.agenerate(["5+5="], params)) == want  # and a new worker starts on demand
    engine.close()


def test_an_idle_worker_thread_ends_and_generate_then_runs_on_the_callers_thread(tiny_model_dir):
    """A worker thread left running keeps its own OpenMP team: torch work alternating between it and the
    caller's thread (a trainer's learner) ran 2x slower on 2 cores. Idle `linger_s`, the thread ends; the
    next `generate` runs on the calling thread, and the next `agenerate` starts a thread again."""
    import threading
    import time

    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(model, tok)
    params = _greedy(6, ignore_eos=True)
    want = engine.generate(["5+5="], params)
    worker = engine.start_worker()
    worker.linger_s = 0.01
    assert asyncio.run(engine.agenerate(["5+5="], params)) == want
    deadline = time.monotonic() + 10
    while worker.thread is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.dormant and not any(t.name == "posttrain-engine-worker" for t in threading.enumerate())
    jobs = worker.stats.jobs
    assert engine.generate(["5+5="], params) == want
    assert worker.stats.jobs == jobs  # ran here, not through the worker
    assert worker.thread is None
    assert asyncio.run(engine.agenerate(["5+5="], params)) == want  # a thread starts again on demand
    assert worker.stats.jobs == jobs + 1
    engine.close()


def test_jobs_submitted_while_the_worker_thread_ends_are_never_lost(tiny_model_dir):
    """A thread's idle exit and a new submit race; every job still finishes, and a direct `generate` on
    another thread at the same time gets its own exact result (the worker waits for the engine's lock)."""
    import threading

    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(model, tok)
    params = _greedy(4, ignore_eos=True)
    want = engine.generate(["1+2="], params)
    worker = engine.start_worker()
    worker.linger_s = 0.0  # end at every idle moment: the race window as wide as it gets
    direct: list = []

    def drive() -> None:
        for _ in range(20):
            direct.append(engine.generate(["1+2="], params))

    side = threading.Thread(target=drive)
    side.start()

    async def many() -> list:
        out = []
        for _ in range(20):
            out.append(await asyncio.wait_for(engine.agenerate(["1+2="], params), timeout=30))
        return out

    got = asyncio.run(many())
    side.join(60)
    ids = [[c.token_ids for c in g] for g in want]  # batched with another job, logprobs may differ in rounding
    assert [[[c.token_ids for c in g] for g in r] for r in got + direct] == [ids] * 40
    engine.close()


def test_an_engine_dropped_without_close_is_collected_and_its_worker_stops(tiny_model_dir):
    import gc
    import weakref

    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(model, tok)
    asyncio.run(engine.agenerate(["1+1="], _greedy(3)))
    thread, ref = engine.start_worker().thread, weakref.ref(engine)
    del engine
    gc.collect()
    assert ref() is None  # the worker thread does not keep the engine (and its KV caches) alive
    thread.join(10)
    assert not thread.is_alive()


def test_load_weights_copies_a_foreign_state_and_is_free_for_the_models_own(engine, monkeypatch):
    copies = []
    real_copy = torch.Tensor.copy_
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, src, *a, **k: copies.append(1) or real_copy(self, src, *a, **k))
    ptrs = [p.data_ptr() for p in engine.model.parameters()]
    engine.load_weights(engine.model.state_dict(), version=1)  # a learner sharing the module
    assert copies == [] and engine.policy_version == 1
    new = {k: v.detach().clone() + 0.01 for k, v in engine.model.state_dict().items()}
    engine.load_weights(new, version=2)
    assert len(copies) == len(new)
    assert [p.data_ptr() for p in engine.model.parameters()] == ptrs  # copied into the model's own tensors
    for k, v in engine.model.state_dict().items():
        assert torch.equal(v, new[k])


def test_load_weights_is_strict_and_names_the_keys(engine):
    state = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    before = {k: v.clone() for k, v in state.items()}
    broken = dict(state)
    del broken["model.norm.weight"]
    broken["model.extra.weight"] = torch.zeros(1)
    broken["lm_head.weight"] = broken["lm_head.weight"] + 1  # must not be applied: the call fails first
    with pytest.raises(WeightsMismatchError, match=r"missing: model\.norm\.weight.*unexpected: model\.extra\.weight"):
        engine.load_weights(broken, version=9)
    wrong = {**state, "model.norm.weight": torch.zeros(3)}
    with pytest.raises(WeightsMismatchError, match=r"wrong shape: model\.norm\.weight \(3,\)"):
        engine.load_weights(wrong, version=9)
    assert engine.policy_version == 0
    for k, v in engine.model.state_dict().items():
        assert torch.equal(v, before[k])


@pytest.mark.slow
def test_requests_past_the_context_are_clamped_with_one_note(tiny_model_dir, caplog):
    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(model, tok, max_context=32)
    prompt = tok.encode("12+34=")
    with caplog.at_level(logging.WARNING, logger="posttrain.engine.local.intake"):
        (c,) = engine.generate([prompt], _greedy(100, ignore_eos=True))[0]
        (d,) = engine.generate([prompt], _greedy(50, ignore_eos=True))[0]
    assert len(c.token_ids) == len(d.token_ids) == 32 - len(prompt)
    assert c.finish_reason is d.finish_reason is FinishReason.LENGTH
    assert c.token_ids == engine.generate([prompt], _greedy(32 - len(prompt), ignore_eos=True))[0][0].token_ids
    assert len([r for r in caplog.records if "context holds 32" in r.getMessage()]) == 1  # once per engine
    with pytest.raises(ContextLengthError, match="32"):
        engine.generate([[5] * 32], _greedy(1))
    assert isinstance(ContextLengthError("x"), ValueError)  # the server answers it as a 400
    assert LocalEngine(model, tok, sliding_window=WindowSpec(16)).max_context is None  # a window bounds memory, not length


@pytest.mark.slow
def test_greedy_matches_transformers_generate(engine, tiny_model_dir):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    for prompt in ["7+5=", "123+4=", "abc"]:
        ids = engine.tokenizer.encode(prompt)
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=10, eos_token_id=None, pad_token_id=0)
        expected = out[0, len(ids) :].tolist()
        got = engine.generate([ids], _greedy(10, ignore_eos=True))[0][0].token_ids
        assert got == expected


@pytest.mark.slow
def test_continuous_batching_equals_one_at_a_time(tiny_model_dir):
    """Requests joining mid-flight, with different lengths and budgets, decode as if alone."""
    model, tok = load_model(tiny_model_dir)
    prompts = ["1+2=", "a long prompt with many tokens in it", "x", "99*99=", "hello there"]
    budgets = [3, 12, 7, 1, 9]
    alone = [LocalEngine(model, tok).generate([p], _greedy(m, ignore_eos=True))[0][0] for p, m in zip(prompts, budgets)]
    eng = LocalEngine(model, tok, prefill_chunk=4, max_prefill_tokens=8)
    reqs = []
    for p, m in zip(prompts, budgets):
        reqs.append(eng.submit(p, _greedy(m, ignore_eos=True)))
        eng.step()  # the next request arrives while this one is running
    while eng.has_unfinished():
        eng.step()
    for r, a in zip(reqs, alone):
        c = r.completions[0]
        assert c.token_ids == a.token_ids
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_chunked_prefill_bounds_tokens_per_step(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    prompt = "0123456789" * 6
    ref = LocalEngine(model, tok).generate([prompt], _greedy(5, ignore_eos=True))[0][0]
    eng = LocalEngine(model, tok, prefill_chunk=8, max_prefill_tokens=8, prefix_cache_tokens=0)
    eng.submit(prompt, _greedy(5, ignore_eos=True))
    per_step = []
    while eng.has_unfinished():
        before = eng.stats.prefill_tokens
        eng.step()
        per_step.append(eng.stats.prefill_tokens - before)
    assert max(per_step) <= 8 and sum(per_step) == len(tok.encode(prompt))
    assert eng.metrics()["generated_tokens"] == 5
    eng2 = LocalEngine(model, tok, prefill_chunk=8, max_prefill_tokens=8)
    assert eng2.generate([prompt], _greedy(5, ignore_eos=True))[0][0].token_ids == ref.token_ids


@pytest.mark.slow
def test_stream_deltas_rebuild_the_completions(engine):
    params = SamplingParams(n=3, max_tokens=6, seed=7, temperature=1.0)
    expected = engine.generate(["4+4=", "abc"], params)
    tokens, texts, finals = {}, {}, {}
    for d in engine.stream(["4+4=", "abc"], params):
        key = (d.prompt_index, d.sample_index)
        tokens.setdefault(key, []).extend(d.token_ids)
        texts[key] = texts.get(key, "") + d.text
        if d.finish_reason is not None:
            finals[key] = d.completion
    for i, group in enumerate(expected):
        for j, c in enumerate(group):
            assert tokens[(i, j)] == c.token_ids == finals[(i, j)].token_ids
            assert texts[(i, j)] == c.text


def test_stop_strings_cut_text_and_end_generation(engine):
    free = engine.generate(["ab"], _greedy(12, ignore_eos=True))[0][0]
    assert len(free.text) >= 4
    stop = free.text[2:4]
    c = engine.generate(["ab"], _greedy(12, ignore_eos=True, stop=(stop,)))[0][0]
    assert c.finish_reason is FinishReason.STOP
    assert c.text == free.text[: free.text.find(stop)]
    assert stop not in c.text
    x = free.token_ids[1]
    t = engine.generate(["ab"], _greedy(12, ignore_eos=True, stop_token_ids=(x,)))[0][0]
    assert t.token_ids == free.token_ids[: free.token_ids.index(x) + 1] and t.finish_reason is FinishReason.STOP


@pytest.mark.slow
def test_prefix_cache_hits_give_cold_prefill_results(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    system = "You are a careful assistant. Answer briefly. " * 2
    turn1 = system + "Q: 2+2?"
    cold = LocalEngine(model, tok, prefix_cache_tokens=0)
    warm = LocalEngine(model, tok, prefix_block=4)
    first = warm.generate([turn1], _greedy(6, ignore_eos=True))[0][0]
    turn2 = turn1 + first.text + " Q: and 3+3?"  # an agent resends the history, plus its own last answer
    a = warm.generate([turn2], _greedy(6, ignore_eos=True))[0][0]
    b = cold.generate([turn2], _greedy(6, ignore_eos=True))[0][0]
    m = warm.metrics()
    assert m["prefix_cache_hit_tokens"] >= (len(tok.encode(turn1)) + 6 - 1) // 4 * 4
    assert a.token_ids == b.token_ids
    torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=1e-5)


def test_load_weights_invalidates_the_prefix_cache_and_tags_the_version(engine):
    engine.generate(["shared prefix of a prompt!"], _greedy(2))
    state = {k: v.clone() for k, v in engine.model.state_dict().items()}
    engine.load_weights(state, version=3)
    hits = engine.prefix.hit_tokens
    c = engine.generate(["shared prefix of a prompt!"], _greedy(2))[0][0]
    assert engine.prefix.hit_tokens == hits  # nothing served from KV of the old weights
    assert c.policy_version == 3


def test_min_p_drops_unlikely_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(process_logits(logits, 1.0, min_p=0.25))  # threshold 0.125
    assert kept.tolist() == [[True, True, True, False]]


@pytest.mark.slow
def test_sliding_window_keeps_kv_bounded(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    spec = WindowSpec(window=16, sinks=4)
    sizes = []
    for length in (40, 160):
        eng = LocalEngine(model, tok, sliding_window=spec, prefill_chunk=8, max_prefill_tokens=8)
        c = eng.generate([[5 + i % 50 for i in range(length)]], _greedy(4, ignore_eos=True))[0][0]
        assert len(c.token_ids) == 4
        sizes.append(eng.kv_bytes())
    assert sizes[0] == sizes[1]


def test_bad_requests_are_clear_errors(engine):
    with pytest.raises(ValueError, match="token ids"):
        engine.generate([[1, 10_000]], SamplingParams())
    with pytest.raises(ValueError, match="min_p"):
        SamplingParams(min_p=2.0)
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=("",))


@pytest.mark.slow
def test_sliding_window_attends_to_sinks_and_the_last_window(tmp_path):
    """One layer: a token's K/V depend on it and its position only, so attending to just the kept
    tokens (first `sinks` + last `window`, original positions) is an exact reference."""
    from tiny_models import make_tiny_model

    model, tok = load_model(make_tiny_model(tmp_path / "one", layers=1, seed=3))
    spec = WindowSpec(window=8, sinks=2)
    prompt = [5 + (7 * i) % 60 for i in range(37)]
    eng = LocalEngine(model, tok, sliding_window=spec, prefill_chunk=4, max_prefill_tokens=4)
    got = eng.generate([prompt], _greedy(6, ignore_eos=True))[0][0]
    seq, want, want_lp = list(prompt), [], []
    with torch.no_grad():
        for _ in range(6):
            t = len(seq) - 1
            kept = [p for p in range(len(seq)) if p < spec.sinks or p > t - spec.window]
            logits = model(torch.tensor([[seq[p] for p in kept]]), position_ids=torch.tensor([kept]))[0, -1]
            nxt = int(logits.argmax())
            want.append(nxt)
            want_lp.append(float(torch.log_softmax(logits, -1)[nxt]))
            seq.append(nxt)
    assert got.token_ids == want
    torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(want_lp), atol=1e-5, rtol=1e-5)


def test_a_closed_worker_takes_no_job_and_agenerate_moves_to_a_new_one(tiny_model_dir):
    from posttrain.engine.local.worker import WorkerClosed

    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(model, tok)
    params = _greedy(3, ignore_eos=True)
    old = engine.start_worker()
    old.close()
    with pytest.raises(WorkerClosed):
        old.submit(["1+1="], params)
    assert old.waiting.empty()  # nothing left behind that no thread would ever read
    want = engine.generate(["1+1="], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    assert engine.threads.worker is old  # closed behind the engine's back (another thread's close, say)
    assert asyncio.run(engine.agenerate(["1+1="], params)) == want
    assert engine.threads.worker is not old
    engine.close()
