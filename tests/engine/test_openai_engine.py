"""OpenAIEngine against `posttrain serve` (same answers as the in-process engine) and a fake server that fails on purpose."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from typing import Self

import httpx
import pytest

from posttrain.engine import LocalEngine
from posttrain.engine.remote.openai_engine import (
    EngineRequestError,
    OpenAIEngine,
    Price,
    backoff_delay,
)
from posttrain.engine.serve.server import ServeConfig, ServerThread, create_app
from posttrain.models import load_model
from posttrain.types import FinishReason, SamplingParams

MODEL = "tiny"


@pytest.fixture(scope="module")
def ours(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    with ServerThread(create_app(LocalEngine(model, tok), ServeConfig(MODEL))) as server:
        yield server, tok


@pytest.fixture(scope="module")
def local(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    return LocalEngine(model, tok)


@pytest.mark.slow
def test_greedy_over_http_equals_the_local_engine(ours, local):
    server, tok = ours
    engine = OpenAIEngine(server.url + "/v1", MODEL, price=Price(1.0, 2.0))
    prompts = ["12+34=", "7+5=", "100+1="]
    params = SamplingParams(temperature=0, max_tokens=6)
    remote, here = engine.generate(prompts, params), local.generate(prompts, params)
    for r, h in zip(remote, here):
        assert [c.token_ids for c in r] == [c.token_ids for c in h]
        assert [c.text for c in r] == [c.text for c in h]
        assert [c.finish_reason for c in r] == [c.finish_reason for c in h]
        assert r[0].logprobs == pytest.approx(h[0].logprobs, abs=1e-5)
    u = engine.usage.summary()
    assert u["requests"] == 3 and u["failures"] == 0 and u["retries"] == 0
    assert u["prompt_tokens"] == sum(len(tok.encode(p)) for p in prompts)
    assert u["completion_tokens"] == sum(len(c.token_ids) for g in remote for c in g)
    assert u["cost_usd"] == pytest.approx((u["prompt_tokens"] * 1.0 + u["completion_tokens"] * 2.0) / 1e6)
    assert len(engine.usage.latencies_s) == 3 and u["latency_p95_s"] >= u["latency_p50_s"] > 0


@pytest.mark.slow
def test_groups_token_prompts_and_chat_mode(ours, local):
    server, tok = ours
    engine = OpenAIEngine(server.url + "/v1", MODEL)
    groups = engine.generate([tok.encode("3+3="), tok.encode("4+4=")], SamplingParams(n=3, max_tokens=5, seed=2))
    assert [len(g) for g in groups] == [3, 3]
    for c in groups[0]:
        assert len(c.logprobs) == len(c.token_ids) > 0 and c.text == tok.decode(c.token_ids)
    chat = OpenAIEngine(server.url + "/v1", MODEL, mode="chat")
    (c,), = chat.generate(["3+3="], SamplingParams(temperature=0, max_tokens=5))
    assert c.token_ids == local.generate(["3+3="], SamplingParams(temperature=0, max_tokens=5))[0][0].token_ids
    assert len(c.logprobs) == len(c.token_ids)
    with pytest.raises(ValueError, match="chat mode takes text"):
        chat.generate([[1, 2, 3]], SamplingParams())


def test_generate_works_from_inside_a_running_event_loop(ours):
    engine = OpenAIEngine(ours[0].url + "/v1", MODEL)

    async def agent():
        return engine.generate(["1+1="], SamplingParams(max_tokens=2))

    assert len(asyncio.run(agent())[0]) == 1


# ---------------------------------------------------------------- a fake server that fails on purpose


class FakeServer:
    """Answers /v1/completions by a script of failures: '429', '500', '400', 'slow', or 'ok'."""

    def __init__(self, script: list[str], delay_s: float = 0.0) -> None:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse

        self.script, self.delay_s = list(script), delay_s
        self.attempts, self.in_flight, self.max_in_flight = 0, 0, 0
        self.released = False
        self.lock = threading.Lock()
        app = FastAPI()

        @app.post("/v1/completions")
        async def completions(body: dict):
            with self.lock:
                self.attempts += 1
                step = self.script.pop(0) if self.script else "ok"
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                if step == "429":
                    return JSONResponse({"error": {"message": "slow down"}}, 429, headers={"Retry-After": "0"})
                if step == "500":
                    return JSONResponse({"error": {"message": "boom"}}, 500)
                if step == "400":
                    return JSONResponse({"error": {"message": "bad prompt"}}, 400)
                if step == "slow":  # outlives the client's timeout; ends early when the test is over
                    for _ in range(100):
                        if self.released:
                            break
                        await asyncio.sleep(0.05)
                await asyncio.sleep(self.delay_s)
                n = body.get("n", 1)
                return {
                    "choices": [
                        {
                            "index": i,
                            "text": "ok",
                            "finish_reason": "length",
                            "logprobs": {"tokens": ["token_id:7", "token_id:8"], "token_logprobs": [-0.1, -0.2]},
                        }
                        for i in range(n)
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2 * n, "total_tokens": 3 + 2 * n},
                }
            finally:
                with self.lock:
                    self.in_flight -= 1

        self.thread = ServerThread(app)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.released = True
        self.thread.stop()

    @property
    def url(self) -> str:
        return self.thread.url + "/v1"


def _engine(url: str, **kwargs) -> OpenAIEngine:
    return OpenAIEngine(url, "fake", extras=False, backoff_s=0.01, max_backoff_s=0.05, **kwargs)


@pytest.mark.slow
def test_retries_through_429_500_and_a_timeout():
    with FakeServer(["429", "500", "slow"]) as fake:
        engine = _engine(fake.url, timeout_s=1.0, max_retries=3)
        ((c,),) = engine.generate(["x"], SamplingParams(max_tokens=2))
    assert fake.attempts == 4
    assert c.token_ids == [7, 8] and c.logprobs == [-0.1, -0.2] and c.text == "ok" and c.finish_reason is FinishReason.LENGTH
    u = engine.usage.summary()
    assert u["retries"] == 3 and u["requests"] == 1 and u["failures"] == 0 and u["completion_tokens"] == 2


def test_gives_up_after_max_retries_with_the_servers_words():
    with FakeServer(["500"] * 10) as fake:
        engine = _engine(fake.url, max_retries=2)
        with pytest.raises(EngineRequestError, match="gave up after 3 attempts.*HTTP 500: boom") as info:
            engine.generate(["x"], SamplingParams())
    assert fake.attempts == 3 and info.value.status == 500 and engine.usage.failures == 1


def test_client_errors_are_not_retried():
    with FakeServer(["400"]) as fake:
        engine = _engine(fake.url)
        with pytest.raises(EngineRequestError, match="HTTP 400: bad prompt"):
            engine.generate(["x"], SamplingParams())
    assert fake.attempts == 1


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    engine = _engine(f"http://127.0.0.1:{port}/v1", max_retries=2)
    with pytest.raises(EngineRequestError, match="gave up after 3 attempts.*Connect") as info:
        engine.generate(["x"], SamplingParams())
    assert info.value.status is None and engine.usage.retries == 2


@pytest.mark.slow
def test_concurrency_limit_holds():
    with FakeServer([], delay_s=0.3) as fake:
        engine = _engine(fake.url, max_concurrency=2)
        start = time.perf_counter()
        groups = engine.generate([f"p{i}" for i in range(6)], SamplingParams(n=2))
        elapsed = time.perf_counter() - start
    assert [len(g) for g in groups] == [2] * 6
    assert fake.max_in_flight == 2 and elapsed >= 0.85  # 6 requests, 2 at a time, 0.3 s each


class ForceOneChoice(httpx.AsyncHTTPTransport):
    """Rewrites every request to n=1: plays a hosted API that ignores `n`."""

    async def handle_async_request(self, request):
        payload = {**json.loads(request.content), "n": 1}
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        return await super().handle_async_request(httpx.Request(request.method, request.url, headers=headers, json=payload))


def test_a_server_that_ignores_n_is_asked_again():
    with FakeServer([]) as fake:
        engine = _engine(fake.url, transport=ForceOneChoice())
        (group,) = engine.generate(["x"], SamplingParams(n=3, seed=10))
    assert len(group) == 3 and fake.attempts == 3


def test_backoff_grows_with_jitter_and_honours_retry_after():
    rng = random.Random(0)
    delays = [backoff_delay(a, 0.5, 8.0, rng) for a in range(6)]
    for a, d in enumerate(delays):
        ceiling = min(8.0, 0.5 * 2**a)
        assert ceiling / 2 <= d <= ceiling
    assert delays[-1] > delays[0]
    assert backoff_delay(0, 0.5, 8.0, rng, retry_after_s=3.0) == 3.0
    assert backoff_delay(0, 0.5, 8.0, rng, retry_after_s=60.0) == 8.0


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="mode"):
        OpenAIEngine("http://x", "m", mode="embeddings")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extras"):
        _engine("http://x").generate(["x"], SamplingParams(top_k=5))
    with pytest.raises(NotImplementedError, match="cannot load weights"):
        _engine("http://x").load_weights({}, 1)


def test_it_is_an_engine_and_streams_whole_completions(ours):
    from posttrain.engine import Engine

    engine = OpenAIEngine(ours[0].url + "/v1", MODEL)
    assert isinstance(engine, Engine)
    params = SamplingParams(n=2, max_tokens=4, seed=3)
    deltas = list(engine.stream(["5+5=", "6+6="], params))
    groups = engine.generate(["5+5=", "6+6="], params)
    assert [(d.prompt_index, d.sample_index) for d in deltas] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [d.completion.token_ids for d in deltas] == [c.token_ids for g in groups for c in g]
    assert all(d.finish_reason is not None for d in deltas)
