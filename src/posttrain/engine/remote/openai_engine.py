"""`OpenAIEngine`: the engine interface over any OpenAI-compatible server.

Covers: `generate(prompts, params) -> list[list[Completion]]` against vLLM,
SGLang, hosted APIs or `posttrain serve`, in completions mode (text or
token-id prompts) or chat mode (each prompt becomes one user message); one
request per prompt carrying `n`, so a server that shares prefixes can; async
httpx with a concurrency limit; retries with exponential backoff and jitter
(honouring `Retry-After`) on 408/429/5xx, connection errors and timeouts;
token accounting (prompt and completion tokens, per-request latency, retries,
failures, optional cost from a price table). Completions carry text, the
sampled tokens' logprobs where the server returns them, the token ids where
it returns them (`return_token_ids` on vLLM >= 0.10.2, SGLang and `posttrain
serve`; `token_id:N` logprob tokens from vLLM's `--return-tokens-as-token-ids`;
else re-encoded with a tokenizer when one is given), and the finish reason;
`encode` with that tokenizer (None without one).
Does not cover: pushing weights to the server (`load_weights` refuses; a
remote server's weights are its own), tool calls, streaming.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from posttrain.engine.base import CompletionDelta
from posttrain.engine.remote.errors import EngineRequestError
from posttrain.pricing import Price
from posttrain.types import Completion, FinishReason, SamplingParams

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass
class Usage:
    """Totals over an engine's lifetime (safe to read from any thread)."""

    requests: int = 0  # successful HTTP requests
    failures: int = 0  # requests given up on
    retries: int = 0  # attempts beyond each request's first
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latencies_s: list[float] = field(default_factory=list)  # per successful request, retries and backoff included
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: float) -> None:
        with self._lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)

    def record_latency(self, seconds: float) -> None:
        with self._lock:
            self.latencies_s.append(seconds)

    def summary(self) -> dict[str, float]:
        with self._lock:
            lat = sorted(self.latencies_s)
            out = {
                "requests": self.requests, "failures": self.failures, "retries": self.retries,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "cost_usd": self.cost_usd,
            }
        if lat:
            out.update(
                latency_mean_s=statistics.fmean(lat),
                latency_p50_s=lat[len(lat) // 2],
                latency_p95_s=lat[min(len(lat) - 1, int(0.95 * len(lat)))],
            )
        return out


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random, retry_after_s: float | None = None) -> float:
    """Seconds to wait before retry `attempt` (0-based): exponential with equal jitter, or the server's Retry-After."""
    if retry_after_s is not None:
        return min(cap_s, max(0.0, retry_after_s))
    ceiling = min(cap_s, base_s * 2**attempt)
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
        err = body.get("error", body) if isinstance(body, dict) else body
        message = err.get("message") if isinstance(err, dict) else None
        return str(message or err)[:500]
    except ValueError:
        return response.text[:500] or response.reason_phrase


def _finish(reason: str | None) -> FinishReason:
    return FinishReason.LENGTH if reason == "length" else FinishReason.STOP


def _token_ids_from_tokens(tokens: list[str] | None) -> list[int] | None:
    if not tokens or not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return None
    return [int(t.removeprefix("token_id:")) for t in tokens]


class RemoteWeightsError(NotImplementedError):
    """A client engine cannot push weights into a server it does not run (a `NotImplementedError` for callers
    that probe `load_weights`)."""


class OpenAIEngine:
    """Generate through an OpenAI-compatible HTTP server.

    >>> engine = OpenAIEngine("http://localhost:8000/v1", "Qwen/Qwen2.5-0.5B-Instruct")
    >>> groups = engine.generate(["12+30="], SamplingParams(n=4, max_tokens=8))
    >>> engine.usage.summary()["completion_tokens"]
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        mode: Literal["completions", "chat"] = "completions",
        max_concurrency: int = 16,
        max_retries: int = 5,
        timeout_s: float = 120.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        logprobs: bool = True,
        extras: bool = True,
        system_prompt: str | None = None,
        price: Price | dict[str, Price] | None = None,
        tokenizer: Any = None,
        seed: int = 0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`extras`: send the vLLM-style fields (`return_token_ids`, `top_k`, `stop_token_ids`) that vLLM,
        SGLang and `posttrain serve` understand; set False for hosted APIs that reject unknown fields.
        `tokenizer` (anything with `encode(text, add_bos=False)`): re-encodes texts when the server returns no ids."""
        if mode not in ("completions", "chat"):
            raise ValueError(f"OpenAIEngine mode must be 'completions' or 'chat', got {mode!r}")
        if max_concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise ValueError("OpenAIEngine needs max_concurrency >= 1, max_retries >= 0 and timeout_s > 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "EMPTY")
        self.mode = mode
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.logprobs, self.extras = logprobs, extras
        self.system_prompt = system_prompt
        self.price = price.get(model) if isinstance(price, dict) else price
        self.tokenizer = tokenizer
        self.transport = transport
        self.usage = Usage()
        self.max_context: int | None = None  # the server's own limit applies (`posttrain serve` clamps to it)
        self.policy_version = 0
        self._rng = random.Random(seed)

    # ---- the engine interface

    def encode(self, prompts: list[str]) -> list[list[int]] | None:
        """The prompts' token ids with the local tokenizer, when one was given; None in chat mode (the
        server's chat template decides the tokens) or without a tokenizer."""
        if self.tokenizer is None or self.mode == "chat":
            return None
        return [self.tokenizer.encode(p) for p in prompts]

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (grouped in prompt order). Raises `EngineRequestError`."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate(prompts, params))
        with ThreadPoolExecutor(1) as pool:  # called from async code: run the requests on a loop of their own
            return pool.submit(asyncio.run, self.agenerate(prompts, params)).result()

    async def agenerate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        if self.mode == "chat" and any(not isinstance(p, str) for p in prompts):
            raise ValueError("OpenAIEngine in chat mode takes text prompts; use mode='completions' for token ids")
        if not self.extras and (params.top_k or params.stop_token_ids):
            raise ValueError("top_k and stop_token_ids need a server that takes vLLM-style extras (extras=True)")
        limit = asyncio.Semaphore(self.max_concurrency)
        headers = {"Authorization": f"Bearer {self.api_key}"}
        timeout = httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s))
        limits = httpx.Limits(max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency)
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, limits=limits, transport=self.transport
        ) as client:
            return list(await asyncio.gather(*(self._group(client, limit, p, params) for p in prompts)))

    def stream(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> Iterator[CompletionDelta]:
        """The `Engine` stream, not incremental: each completion arrives whole, as its final delta."""
        for i, group in enumerate(self.generate(prompts, params)):
            for j, c in enumerate(group):
                yield CompletionDelta(i, j, i, list(c.token_ids), list(c.logprobs), c.text, c.finish_reason, c)

    def load_weights(self, state: Any, version: int) -> None:
        raise RemoteWeightsError(
            "OpenAIEngine cannot load weights into a remote server; update the server itself "
            "(e.g. VLLMEngine.load_weights in its process) and call set_version(version) here"
        )

    def sampler_state(self) -> None:
        """None: the server samples (a request's `seed` is what reproduces it)."""
        return None

    def load_sampler_state(self, state: None) -> None:
        pass

    def set_version(self, version: int) -> None:
        """Tag later completions with the policy version the server now holds."""
        self.policy_version = version

    # ---- one prompt

    async def _group(
        self, client: httpx.AsyncClient, limit: asyncio.Semaphore, prompt: str | list[int], params: SamplingParams
    ) -> list[Completion]:
        out = await self._request(client, limit, prompt, params, params.n, params.seed)
        while len(out) < params.n:  # a server that ignores `n` (some hosted APIs): ask again for the rest
            seed = None if params.seed is None else params.seed + len(out)
            more = await self._request(client, limit, prompt, params, 1, seed)
            if not more:
                raise EngineRequestError(f"{self.base_url}: the server returned no choices")
            out.extend(more)
        return out[: params.n]

    def _body(self, prompt: str | list[int], params: SamplingParams, n: int, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "n": n,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if seed is not None:
            body["seed"] = seed
        if params.stop:
            body["stop"] = list(params.stop)
        if self.extras:
            body["return_token_ids"] = True
            if params.top_k:
                body["top_k"] = params.top_k
            if params.stop_token_ids:
                body["stop_token_ids"] = list(params.stop_token_ids)
        if self.mode == "chat":
            messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            body["messages"] = [*messages, {"role": "user", "content": prompt}]
            if self.logprobs:
                body["logprobs"] = True
        else:
            body["prompt"] = prompt
            if self.logprobs:  # 0: the sampled token's only (vLLM, SGLang, posttrain serve); hosted APIs want >= 1
                body["logprobs"] = 0 if self.extras else 1
        return body

    async def _request(
        self,
        client: httpx.AsyncClient,
        limit: asyncio.Semaphore,
        prompt: str | list[int],
        params: SamplingParams,
        n: int,
        seed: int | None,
    ) -> list[Completion]:
        body = self._body(prompt, params, n, seed)
        path = "/chat/completions" if self.mode == "chat" else "/completions"
        async with limit:
            data = await self._post(client, path, body)
        usage = data.get("usage") or {}
        prompt_tokens, completion_tokens = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        self.usage.add(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self.price.cost(prompt_tokens, completion_tokens) if self.price else 0.0,
        )
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        return [self._completion(c) for c in choices]

    async def _post(self, client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                response = await client.post(path, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                problem, status = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, None
            else:
                if response.status_code == 200:
                    self.usage.add(requests=1)
                    self.usage.record_latency(time.perf_counter() - start)
                    return response.json()
                problem, status = f"HTTP {response.status_code}: {_error_text(response)}", response.status_code
                if status not in RETRYABLE_STATUS:
                    self.usage.add(failures=1)
                    raise EngineRequestError(f"{self.base_url}{path}: {problem}", status)
                retry_after = _retry_after(response)
            if attempt == self.max_retries:
                break
            self.usage.add(retries=1)
            await asyncio.sleep(backoff_delay(attempt, self.backoff_s, self.max_backoff_s, self._rng, retry_after))
        self.usage.add(failures=1)
        raise EngineRequestError(f"{self.base_url}{path}: gave up after {self.max_retries + 1} attempts; last: {problem}", status)

    def _completion(self, choice: dict[str, Any]) -> Completion:
        lp = choice.get("logprobs") or {}
        if self.mode == "chat":
            text = (choice.get("message") or {}).get("content") or ""
            entries = lp.get("content") or []
            logprobs = [float(e.get("logprob", 0.0)) for e in entries]
            tokens = [e.get("token") for e in entries]
        else:
            text = choice.get("text") or ""
            logprobs = [float(x) if x is not None else 0.0 for x in (lp.get("token_logprobs") or [])]
            tokens = lp.get("tokens")
        ids = choice.get("token_ids")
        if ids is None:
            ids = _token_ids_from_tokens(tokens)
        if ids is None:
            ids = self.tokenizer.encode(text, add_bos=False) if self.tokenizer is not None else []
        return Completion(list(ids), text, logprobs, _finish(choice.get("finish_reason")), self.policy_version)
