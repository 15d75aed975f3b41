"""The OpenAI-compatible server, exercised with the official `openai` client against a tiny random model."""

from __future__ import annotations

import json
import threading

import httpx
import openai
import pytest
import torch

from posttrain.engine import LocalEngine
from posttrain.engine.chat import ChatTemplate
from posttrain.engine.detokenize import text_deltas
from posttrain.engine.extras import MissingExtraError
from posttrain.engine.serve.server import (
    ServeConfig,
    ServerThread,
    create_app,
    require_serve_extra,
)
from posttrain.models import load_model
from posttrain.models.logprobs import token_logprobs
from posttrain.types import Completion, FinishReason, SamplingParams

MODEL = "tiny"


class SpyEngine(LocalEngine):
    """A LocalEngine that records every request submitted to it (prompt ids, params)."""

    def __init__(self, model, tokenizer) -> None:
        super().__init__(model, tokenizer, seed=0)
        self.submitted = []

    def submit(self, prompt, params, *args, **kwargs):
        self.submitted.append((list(prompt), params))
        return super().submit(prompt, params, *args, **kwargs)


class GenerateOnly:
    """An engine with only `generate` (like OpenAIEngine or VLLMEngine): served by merged calls."""

    def __init__(self, engine: LocalEngine) -> None:
        self.inner, self.calls = engine, []
        self.model, self.tokenizer, self.policy_version = engine.model, engine.tokenizer, 0
        self.max_context = engine.max_context

    def generate(self, prompts, params):
        self.calls.append((prompts, params))
        return self.inner.generate(prompts, params)


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    engine = SpyEngine(model, tok)
    app = create_app(engine, ServeConfig(MODEL))
    with ServerThread(app) as server:
        yield server, engine, app


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0].url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    """An independent copy of the model and an engine of its own, to check the server against."""
    model, tok = load_model(tiny_model_dir)
    return model, tok, LocalEngine(model, tok)


def test_models_lists_and_retrieves_the_served_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("other")


def test_greedy_completion_matches_the_engine_and_counts_usage(client, reference):
    _, tok, engine = reference
    r = client.completions.create(
        model=MODEL, prompt="12+34=", max_tokens=6, temperature=0, extra_body={"return_token_ids": True}
    )
    want = engine.generate(["12+34="], SamplingParams(temperature=0, max_tokens=6))[0][0]
    choice = r.choices[0]
    assert choice.text == want.text
    assert choice.model_extra["token_ids"] == want.token_ids
    assert choice.model_extra["prompt_token_ids"] == tok.encode("12+34=")
    assert choice.finish_reason == want.finish_reason.value
    assert r.usage.prompt_tokens == len(tok.encode("12+34="))
    assert r.usage.completion_tokens == len(want.token_ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_n_samples_are_one_group_sharing_the_prompt(client, served):
    engine = served[1]
    engine.submitted.clear()
    r = client.completions.create(
        model=MODEL, prompt=["7+8=", "1+1="], n=3, max_tokens=4, seed=11, extra_body={"return_token_ids": True}
    )
    assert [c.index for c in r.choices] == list(range(6))
    assert [p.n for _, p in engine.submitted] == [3, 3]  # each prompt one engine request: a group of 3
    prompts = [ids for ids, _ in engine.submitted]
    assert [c.model_extra["prompt_token_ids"] for c in r.choices] == [prompts[0]] * 3 + [prompts[1]] * 3
    assert r.usage.completion_tokens == sum(len(c.model_extra["token_ids"]) for c in r.choices)
    assert r.usage.prompt_tokens == len(prompts[0]) + len(prompts[1])


def test_completion_logprobs_equal_the_learners_under_temperature(client, reference, tiny_model_dir):
    model, tok, _ = reference
    r = client.completions.create(
        model=MODEL, prompt="5+6=", max_tokens=6, temperature=0.7, logprobs=3, seed=3, extra_body={"return_token_ids": True}
    )
    choice = r.choices[0]
    ids = tok.encode("5+6=") + choice.model_extra["token_ids"]
    with torch.no_grad():
        expected = token_logprobs(model(torch.tensor([ids]))[0, :-1], torch.tensor(ids[1:]), 0.7)[len(tok.encode("5+6=")) - 1 :]
    got = choice.logprobs.token_logprobs
    assert got == pytest.approx(expected.tolist(), abs=1e-4)
    for sampled, top, lp in zip(choice.logprobs.tokens, choice.logprobs.top_logprobs, got):
        assert sampled in top and top[sampled] == pytest.approx(lp, abs=1e-4)
        assert 3 <= len(top) <= 4  # the best 3, plus the sampled token when it is not among them
        assert max(top.values()) >= lp - 1e-6
    assert choice.logprobs.text_offset == list(range(len(got)))  # one character per token


def test_chat_logprobs_and_top_logprobs(client):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "3+4="}], max_tokens=5, logprobs=True, top_logprobs=2, seed=5
    )
    choice = r.choices[0]
    content = choice.logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(t.token for t in content if t.token != "<eos>") == choice.message.content
    for t in content:
        assert len(t.top_logprobs) == 2
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        assert t.top_logprobs[0].logprob >= t.logprob - 1e-5
        assert t.bytes == list(t.token.encode())


def test_plain_chat_template_prompts_like_a_completion(client):
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "12+30="}], max_tokens=5, temperature=0
    )
    comp = client.completions.create(model=MODEL, prompt="12+30=", max_tokens=5, temperature=0)
    assert chat.choices[0].message.content == comp.choices[0].text
    assert chat.choices[0].message.role == "assistant"


def test_seed_reproduces_samples_even_among_other_traffic(client):
    kwargs = {"model": MODEL, "prompt": "9+9=", "n": 4, "max_tokens": 6, "temperature": 1.0, "seed": 1234}
    first = [c.text for c in client.completions.create(**kwargs).choices]
    results: list[list[str]] = []

    def seeded():
        results.append([c.text for c in client.completions.create(**kwargs).choices])

    def noise():
        client.completions.create(model=MODEL, prompt="1+2=", n=2, max_tokens=6)

    threads = [threading.Thread(target=f) for f in (noise, seeded, noise, seeded)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [first, first]
    other = [c.text for c in client.completions.create(**{**kwargs, "seed": 99}).choices]
    assert other != first


def test_streaming_completion_concatenates_to_the_plain_answer(client):
    plain = client.completions.create(model=MODEL, prompt="45+1=", max_tokens=8, temperature=0)
    chunks = list(client.completions.create(model=MODEL, prompt="45+1=", max_tokens=8, temperature=0, stream=True, logprobs=1))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == plain.choices[0].text
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    streamed_tokens = sum(len(c.choices[0].logprobs.tokens) for c in chunks if c.choices and c.choices[0].logprobs)
    assert streamed_tokens == plain.usage.completion_tokens


def test_streaming_chat_with_n_and_usage(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "2+2="}],
        n=2,
        max_tokens=5,
        seed=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, finish, usage = {0: "", 1: ""}, {}, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
    plain = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "2+2="}], n=2, max_tokens=5, seed=7)
    assert texts == {c.index: c.message.content for c in plain.choices}
    assert set(finish) == {0, 1}
    assert usage is not None and usage.total_tokens == plain.usage.total_tokens


def test_stream_ends_with_done_on_the_wire(served):
    body = {"model": MODEL, "prompt": "1+2=", "max_tokens": 3, "stream": True}
    with httpx.stream("POST", served[0].url + "/v1/completions", json=body, timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    json.loads(lines[0].removeprefix("data: "))


def test_stop_strings_cut_the_text(client):
    free = client.completions.create(model=MODEL, prompt="8+8=", max_tokens=10, temperature=0)
    text = free.choices[0].text
    stop = next((ch for ch in text[1:] if ch.strip()), None)
    assert stop is not None, f"greedy text {text!r} has no usable stop character"
    cut = client.completions.create(model=MODEL, prompt="8+8=", max_tokens=10, temperature=0, stop=[stop, "@@"])
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def _ask_concurrently(url: str, k: int) -> list[threading.Thread]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)

    def ask(i):
        assert client.completions.create(model=MODEL, prompt=f"{i}+1=", max_tokens=3 + i % 3).choices

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    return threads


def _wait_until(condition, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_concurrent_clients_run_in_one_continuous_batch(served):
    server, _, app = served
    batcher = app.state.service.batcher
    assert batcher.continuous
    batcher.stats.max_jobs_together = 0
    long_one = threading.Thread(
        target=lambda: httpx.post(
            server.url + "/v1/completions",
            json={"model": MODEL, "prompt": "0=", "max_tokens": 200, "ignore_eos": True},
            timeout=60,
        )
    )
    long_one.start()  # a long completion: the others join the batch while it runs
    _wait_until(lambda: batcher.stats.engine_calls > 0 and batcher.stats.max_jobs_together >= 1)
    for t in _ask_concurrently(server.url, 8):
        t.join()
    long_one.join()
    assert batcher.stats.max_jobs_together > 1  # requests were in the engine at the same step


class GatedGenerateOnly(GenerateOnly):
    """Its first generate call waits for the gate, so that the requests behind it pile up."""

    def __init__(self, engine: LocalEngine) -> None:
        super().__init__(engine)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def generate(self, prompts, params):
        if not self.calls and not self.entered.is_set():
            self.entered.set()
            self.gate.wait(30)
        return super().generate(prompts, params)


def test_engines_without_steps_get_merged_generate_calls(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    engine = GatedGenerateOnly(LocalEngine(model, tok))
    app = create_app(engine, ServeConfig(MODEL, batch_window_s=0))
    batcher = app.state.service.batcher
    with ServerThread(app) as server:
        threads = _ask_concurrently(server.url, 1)
        _wait_until(engine.entered.is_set)  # the first request is in the engine, held at the gate
        threads += _ask_concurrently(server.url, 7)
        _wait_until(lambda: batcher.waiting.qsize() == 7)  # the rest wait behind it
        engine.gate.set()
        for t in threads:
            t.join()
    assert len(engine.calls) == 2  # the waiting requests (equal parameters but max_tokens) shared one call
    assert batcher.stats.max_jobs_together > 1


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"temperature": 3.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"n": 0}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"logprobs": 50}, "logprobs"),
        ({"presence_penalty": 0.5}, None),
        ({"prompt": [10**9]}, "prompt"),
        ({"extra_body": {"stop_token_ids": [-1]}}, "stop_token_ids"),
    ],
)
def test_bad_completion_parameters_are_400s(client, kwargs, param):
    args = {"model": MODEL, "prompt": "1+1=", "max_tokens": 3, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(**args)
    err = info.value.body
    assert err["type"] == "invalid_request_error" and err["message"]
    if param is not None:
        assert err["param"] == param


def test_bad_chat_requests_are_400s(client):
    cases = [
        {"messages": []},
        {"messages": [{"role": "wizard", "content": "hi"}]},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a b"}}]},
        {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2},
    ]
    for case in cases:
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=MODEL, max_tokens=2, **case)


def test_max_tokens_past_the_context_are_clamped_not_refused(client):
    """Issue 11: a client's generic max_tokens (OpenAI's 16, a harness's 256) never fails on a short context."""
    r = client.completions.create(model=MODEL, prompt="1+1=", max_tokens=10_000, temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.total_tokens == 256  # the tiny model's max_position_embeddings


def test_a_128_token_model_answers_7_prompt_tokens_plus_256_requested(tmp_path):
    """What `posttrain eval --model http://... --suite arith:add` sends `posttrain serve builtin`."""
    from tiny_models import make_tiny_model

    model, tok = load_model(make_tiny_model(tmp_path / "m"))
    model.config.max_position_embeddings = 128  # the built-in model's context
    with ServerThread(create_app(LocalEngine(model, tok), ServeConfig(MODEL))) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        prompt = tok.encode("12+34=")
        assert len(prompt) == 7  # BOS and six characters
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=256, extra_body={"ignore_eos": True})
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 128 - 7
        chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "12+34="}], max_tokens=256)
        assert chat.usage.total_tokens <= 128


def test_context_overflow_names_the_code(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="1" * 300, max_tokens=2)
    assert info.value.body["code"] == "context_length_exceeded"


def test_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["code"] == "model_not_found"


def test_raw_http_errors_are_openai_json(served):
    url = served[0].url
    r = httpx.post(url + "/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(url + "/v1/completions", json={"prompt": "1"})
    assert r.status_code == 400 and "model" in r.json()["error"]["message"]
    r = httpx.get(url + "/v1/nothing-here")
    assert r.status_code == 404 and "error" in r.json()
    assert httpx.get(url + "/health").json()["status"] == "ok"


class BrokenEngine:
    policy_version = 0
    max_context = None

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.fail = tokenizer, True

    def generate(self, prompts, params):
        if self.fail:
            self.fail = False
            raise RuntimeError("CUDA fell over")
        return [[Completion([5], self.tokenizer.decode([5]), [-0.5], FinishReason.LENGTH)] * params.n for _ in prompts]


def test_engine_failure_is_a_500_without_traceback_and_the_server_lives(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    with ServerThread(create_app(BrokenEngine(tok), ServeConfig(MODEL, max_context=64))) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            client.completions.create(model=MODEL, prompt="1", max_tokens=1)
        assert "CUDA fell over" in info.value.body["message"] and "Traceback" not in info.value.body["message"]
        assert client.completions.create(model=MODEL, prompt="1", max_tokens=1).choices[0].text == tok.decode([5])


def test_full_queue_is_a_429(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    with ServerThread(create_app(BrokenEngine(tok), ServeConfig(MODEL, max_queue=0, max_context=64))) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.completions.create(model=MODEL, prompt="1", max_tokens=1)


def test_checkpoint_chat_template_is_used(tmp_path, tiny_model_dir):
    import shutil

    d = tmp_path / "templated"
    shutil.copytree(tiny_model_dir, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    model, tok = load_model(d)
    template = ChatTemplate.from_checkpoint(d)
    with ServerThread(create_app(LocalEngine(model, tok), ServeConfig(MODEL), template)) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert r.usage.prompt_tokens == len(tok.encode("<user>hi\n<assistant>", add_bos=False))


def test_missing_serve_extra_names_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "fastapi", None)  # makes `import fastapi` fail
    with pytest.raises(MissingExtraError, match=r"pip install 'posttrain\[serve\]'"):
        require_serve_extra()


def test_serve_cli_user_errors_are_one_line(tmp_path):
    import socket

    from typer.testing import CliRunner

    from posttrain.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["serve", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "not a checkpoint directory" in r.output and "Traceback" not in r.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = runner.invoke(app, ["serve", str(tmp_path), "--port", str(port)])
    assert r.exit_code == 2 and f"127.0.0.1:{port}" in r.output


def test_text_deltas_hold_back_incomplete_utf8():
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models

    # a byte-level toy vocabulary: "é" is two tokens (its two UTF-8 bytes)
    vocab = {"a": 0, "<0xC3>": 1, "<0xA9>": 2, "b": 3}
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
    backend.decoder = decoders.ByteFallback()

    def decode(ids):
        return backend.decode(ids)

    ids = [0, 1, 2, 3]
    assert decode(ids) == "aéb"
    assert text_deltas(decode, ids, "aéb") == ["a", "", "é", "b"]
    assert text_deltas(decode, ids, "a") == ["a", "", "", ""]  # text the engine cut (a stop string) never streams


def test_null_fields_mean_defaults(served):
    body = {"model": MODEL, "prompt": "1+1=", "max_tokens": 2, "n": None, "stream": None, "logprobs": None, "temperature": None}
    r = httpx.post(served[0].url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200 and len(r.json()["choices"]) == 1


def test_a_continuous_engine_streams_deltas_step_by_step(tiny_model_dir):
    from posttrain.engine.serve.batcher import RequestBatcher

    model, tok = load_model(tiny_model_dir)
    batcher = RequestBatcher(LocalEngine(model, tok))
    seen: list[tuple[int, int]] = []  # (engine steps so far, tokens in the delta) at each delta
    try:
        future = batcher.submit(
            [tok.encode("1+2=")],
            SamplingParams(max_tokens=8, ignore_eos=True),
            on_delta=lambda d: seen.append((batcher.stats.engine_calls, len(d.token_ids))),
        )
        (group,) = future.result(timeout=60)
    finally:
        batcher.close()
    assert batcher.streams_live
    assert len({step for step, _ in seen}) > 1  # deltas arrived over several engine steps, not at the end
    assert sum(k for _, k in seen) == len(group.completions[0].token_ids) == 8


def test_an_engine_failure_mid_stream_is_an_error_event(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    with ServerThread(create_app(BrokenEngine(tok), ServeConfig(MODEL, max_context=64))) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.APIError, match="CUDA fell over"):
            list(client.completions.create(model=MODEL, prompt="1", max_tokens=1, stream=True))
        r = httpx.post(
            server.url + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "1"}], "max_tokens": 1, "stream": True},
        )
        assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")


class GatedEngine(BrokenEngine):
    """Answers only once the test opens the gate; records the prompts it was asked for on entry."""

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer)
        self.fail, self.gate, self.prompts = False, threading.Event(), []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        self.gate.wait(30)
        return super().generate(prompts, params)


@pytest.mark.slow
def test_a_request_whose_client_left_never_reaches_the_engine(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    engine = GatedEngine(tok)
    app = create_app(engine, ServeConfig(MODEL, max_context=64, max_concurrency=1, batch_window_s=0))
    queued = app.state.service.batcher.waiting
    with ServerThread(app) as server:
        url = server.url + "/v1/completions"
        blocker = threading.Thread(
            target=lambda: httpx.post(url, json={"model": MODEL, "prompt": "A", "max_tokens": 1}, timeout=60)
        )
        blocker.start()  # occupies the engine until the gate opens
        _wait_until(lambda: engine.prompts)
        with pytest.raises(httpx.ReadTimeout):  # this client gives up while its request still waits
            httpx.post(url, json={"model": MODEL, "prompt": "B", "max_tokens": 1}, timeout=0.5)
        _wait_until(lambda: all(job.future.cancelled() for job in list(queued.queue)) and queued.qsize() == 1)
        engine.gate.set()
        blocker.join()
        r = httpx.post(url, json={"model": MODEL, "prompt": "C", "max_tokens": 1, "seed": 1}, timeout=30)
        assert r.status_code == 200
    assert [tok.decode(p) for p in engine.prompts] == ["A", "C"]
