"""`posttrain serve`: an OpenAI-compatible HTTP server over a posttrain engine.

Covers: `/v1/completions`, `/v1/chat/completions` (chat templates from
`chat.py`), `/v1/models` and `/health`; streaming as server-sent events
(`data: {...}` chunks, then `data: [DONE]`); logprobs (the sampled token's
behaviour logprob from the engine, plus top-k alternatives re-scored with the
same model); `n > 1` served as one prefix-sharing group; temperature, top_p,
top_k, max_tokens, stop strings and token ids, seed; usage counts;
OpenAI-style error bodies (400 for bad parameters, 404 for an unknown model,
429 when the queue is full, 500 without a traceback if generation itself
fails). Concurrent requests are batched into shared engine calls by
`RequestBatcher`, the engine's only caller. `serve_in_thread` runs the app on
a free port in this process (tests, notebooks, agents sharing one model).
Does not cover: authentication, tool calls, images, echo/suffix, penalties.
Streaming sends a request's chunks once its generation has finished (the
engine has no token-by-token API yet): the wire format is the real one, the
first-token latency is not.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

from posttrain.engine.chat import ChatTemplate, ChatTemplateError
from posttrain.engine.extras import require
from posttrain.engine.openai_protocol import APIError, ChatCompletionRequest, CompletionRequest, bad_request, validation_message
from posttrain.engine.request_batcher import GeneratedGroup, RequestBatcher, TopLogprobs
from posttrain.types import Completion, FinishReason, SamplingParams

log = logging.getLogger("posttrain.serve")



def require_serve_extra() -> None:
    """Raise `MissingExtraError` naming the `serve` extra unless FastAPI and uvicorn import."""
    for module in ("fastapi", "uvicorn"):
        require(module, "serve", "posttrain serve")


@dataclass
class ServeConfig:
    """How the server shares its engine."""

    model_name: str  # the id clients pass as `model`
    max_concurrency: int = 64  # requests merged into one engine call at most; more wait their turn
    max_queue: int = 1024  # waiting requests beyond this are answered 429
    batch_window_s: float = 0.002  # how long the engine thread waits for company after the first request
    default_max_tokens: int = 256  # chat requests without max_tokens (bounded by the context left)
    max_context: int | None = None  # prompt + completion tokens; None: the model's max_position_embeddings


# ---------------------------------------------------------------- pure helpers


def apply_stop(c: Completion, stops: list[str], decode) -> tuple[Completion, bool]:
    """Cut a completion before the first stop string; keep tokens up to the one that completed it."""
    if not stops or not any(s in c.text for s in stops):
        return c, False
    cut = min(c.text.index(s) for s in stops if s in c.text)
    for k in range(1, len(c.token_ids) + 1):  # the shortest token prefix whose text reaches the stop
        text = decode(c.token_ids[:k])
        if any(s in text for s in stops):
            break
    return Completion(c.token_ids[:k], c.text[:cut], c.logprobs[:k], FinishReason.STOP, c.policy_version), True


def text_deltas(decode, token_ids: list[int], final_text: str) -> list[str]:
    """One text piece per token whose concatenation is exactly `final_text` (incomplete UTF-8 held back)."""
    pieces, emitted = [], 0
    for k in range(1, len(token_ids) + 1):
        text = decode(token_ids[:k])
        if text.endswith("\ufffd") and k < len(token_ids):
            pieces.append("")
            continue
        upto = max(emitted, min(len(text), len(final_text)))
        pieces.append(final_text[emitted:upto])
        emitted = upto
    if pieces:
        pieces[-1] += final_text[emitted:]
    return pieces


def token_str(tokenizer, tid: int) -> str:
    text = tokenizer.decode([tid])
    return text if text else (tokenizer.backend.id_to_token(tid) or "")


# ---------------------------------------------------------------- the service (no HTTP here)


@dataclass
class Prepared:
    prompts: list[list[int]]
    params: SamplingParams
    stops: list[str]
    top_k_logprobs: int


class Service:
    """Turns validated requests into engine jobs and engine results into OpenAI bodies."""

    def __init__(self, engine: Any, config: ServeConfig, chat_template: ChatTemplate | None = None) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.config = config
        self.chat_template = chat_template or ChatTemplate.plain()
        model_cfg = getattr(getattr(engine, "model", None), "config", None)
        self.max_context = config.max_context or getattr(model_cfg, "max_position_embeddings", None) or 2048
        self.created = int(time.time())
        self.batcher = RequestBatcher(engine, config.max_concurrency, config.batch_window_s, config.max_queue)

    def close(self) -> None:
        self.batcher.close()

    # ---- requests -> engine jobs

    def check_model(self, name: str) -> None:
        if name != self.config.model_name:
            raise APIError(404, f"The model '{name}' does not exist; this server serves '{self.config.model_name}'", "invalid_request_error", "model", "model_not_found")

    def encode_prompts(self, prompts: list[str] | list[list[int]]) -> list[list[int]]:
        vocab = self.tokenizer.vocab_size
        out = []
        for i, p in enumerate(prompts):
            ids = self.tokenizer.encode(p) if isinstance(p, str) else list(p)
            if not ids:
                raise bad_request(f"prompt[{i}] is empty", "prompt")
            if any(not 0 <= t < vocab for t in ids):
                raise bad_request(f"prompt[{i}] holds token ids outside [0, {vocab})", "prompt")
            out.append(ids)
        return out

    def prepare(self, req: CompletionRequest | ChatCompletionRequest, prompts: list[list[int]], max_tokens: int | None, default: int, top_k_logprobs: int) -> Prepared:
        longest = max(len(p) for p in prompts)
        room = self.max_context - longest
        if room < 1:
            raise bad_request(f"This model's maximum context length is {self.max_context} tokens; the prompt has {longest}", "messages" if isinstance(req, ChatCompletionRequest) else "prompt", "context_length_exceeded")
        if max_tokens is None:
            max_tokens = min(default, room)
        elif max_tokens > room:
            raise bad_request(
                f"This model's maximum context length is {self.max_context} tokens; you requested {longest + max_tokens} "
                f"({longest} in the prompt, {max_tokens} to generate)",
                "max_tokens",
                "context_length_exceeded",
            )
        vocab = self.tokenizer.vocab_size
        stop_ids = tuple(req.stop_token_ids or ())
        if any(not 0 <= t < vocab for t in stop_ids):
            raise bad_request(f"stop_token_ids must lie in [0, {vocab})", "stop_token_ids")
        try:
            params = SamplingParams(
                n=req.n,
                temperature=1.0 if req.temperature is None else req.temperature,
                top_p=1.0 if req.top_p is None else req.top_p,
                top_k=max(0, req.top_k),
                max_tokens=max_tokens,
                stop_token_ids=stop_ids,
                seed=req.seed,
            )
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return Prepared(prompts, params, req.stop_list, top_k_logprobs)

    async def generate(self, job: Prepared) -> list[GeneratedGroup]:
        try:
            future = self.batcher.submit(job.prompts, job.params, job.top_k_logprobs)
        except queue.Full:
            raise APIError(429, "the server is at capacity; retry shortly", "rate_limit_error", None, "rate_limit_exceeded") from None
        try:
            groups = await asyncio.wrap_future(future)
        except ValueError as exc:  # the engine refused the input
            raise bad_request(str(exc)) from None
        except Exception as exc:
            log.exception("generation failed")
            raise APIError(500, f"generation failed: {type(exc).__name__}: {exc}", "server_error") from None
        decode = self.tokenizer.decode
        for g in groups:
            for i, c in enumerate(g.completions):
                c, hit = apply_stop(c, job.stops, decode)
                g.completions[i] = c
                if hit and g.top_logprobs is not None:
                    g.top_logprobs[i] = g.top_logprobs[i][: len(c.token_ids)]
        return groups

    # ---- engine results -> OpenAI bodies

    def usage(self, groups: list[GeneratedGroup]) -> dict[str, int]:
        prompt = sum(len(g.prompt_ids) for g in groups)
        completion = sum(len(c.token_ids) for g in groups for c in g.completions)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def fingerprint(self) -> str:
        return f"posttrain-v{getattr(self.engine, 'policy_version', 0)}"

    def _choices(self, groups: list[GeneratedGroup]) -> Iterator[tuple[int, GeneratedGroup, int, Completion, TopLogprobs | None]]:
        index = 0
        for g in groups:
            for j, c in enumerate(g.completions):
                yield index, g, j, c, (g.top_logprobs[j] if g.top_logprobs is not None else None)
                index += 1

    def completion_logprobs(self, c: Completion, top: TopLogprobs | None, k: int, offset0: int = 0) -> dict[str, Any]:
        tokens = [token_str(self.tokenizer, t) for t in c.token_ids]
        offsets, pos = [], offset0
        for s in tokens:
            offsets.append(pos)
            pos += len(s)
        tops = None
        if top is not None or k == 0:
            tops = []
            for i, (t, lp) in enumerate(zip(c.token_ids, c.logprobs)):
                alts = {token_str(self.tokenizer, a): v for a, v in (top[i] if top is not None and k > 0 else [])}
                alts.setdefault(tokens[i], lp)
                tops.append(alts)
        return {"tokens": tokens, "token_logprobs": list(c.logprobs), "top_logprobs": tops, "text_offset": offsets}

    def chat_logprobs(self, c: Completion, top: TopLogprobs | None) -> dict[str, Any]:
        content = []
        for i, (t, lp) in enumerate(zip(c.token_ids, c.logprobs)):
            s = token_str(self.tokenizer, t)
            alts = [{"token": (a_s := token_str(self.tokenizer, a)), "logprob": v, "bytes": list(a_s.encode())} for a, v in (top[i] if top else [])]
            content.append({"token": s, "logprob": lp, "bytes": list(s.encode()), "top_logprobs": alts})
        return {"content": content, "refusal": None}

    def completion_body(self, req: CompletionRequest, rid: str, groups: list[GeneratedGroup]) -> dict[str, Any]:
        choices = []
        for index, g, _, c, top in self._choices(groups):
            choice: dict[str, Any] = {
                "index": index,
                "text": c.text,
                "logprobs": self.completion_logprobs(c, top, req.logprobs) if req.logprobs is not None else None,
                "finish_reason": c.finish_reason.value,
            }
            if req.return_token_ids:
                choice.update(token_ids=list(c.token_ids), prompt_token_ids=list(g.prompt_ids))
            choices.append(choice)
        return {
            "id": rid, "object": "text_completion", "created": int(time.time()), "model": req.model,
            "system_fingerprint": self.fingerprint(), "choices": choices, "usage": self.usage(groups),
        }

    def chat_body(self, req: ChatCompletionRequest, rid: str, groups: list[GeneratedGroup]) -> dict[str, Any]:
        choices = []
        for index, _, _, c, top in self._choices(groups):
            choice: dict[str, Any] = {
                "index": index,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": self.chat_logprobs(c, top) if req.logprobs else None,
                "finish_reason": c.finish_reason.value,
            }
            if req.return_token_ids:
                choice["token_ids"] = list(c.token_ids)
            choices.append(choice)
        body = {
            "id": rid, "object": "chat.completion", "created": int(time.time()), "model": req.model,
            "system_fingerprint": self.fingerprint(), "choices": choices, "usage": self.usage(groups),
        }
        if req.return_token_ids:
            body["prompt_token_ids"] = list(groups[0].prompt_ids)
        return body

    def completion_chunks(self, req: CompletionRequest, rid: str, groups: list[GeneratedGroup]) -> Iterator[dict[str, Any]]:
        base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": req.model, "system_fingerprint": self.fingerprint()}
        decode = self.tokenizer.decode
        for index, g, _, c, top in self._choices(groups):
            offset = 0
            for i, piece in enumerate(text_deltas(decode, c.token_ids, c.text)):
                lp = None
                if req.logprobs is not None:
                    one = Completion([c.token_ids[i]], piece, [c.logprobs[i]], c.finish_reason)
                    lp = self.completion_logprobs(one, [top[i]] if top is not None else None, req.logprobs, offset)
                elif not piece:
                    continue
                offset += len(piece)
                choice = {"index": index, "text": piece, "logprobs": lp, "finish_reason": None}
                if req.return_token_ids:
                    choice["token_ids"] = [c.token_ids[i]]
                yield {**base, "choices": [choice]}
            yield {**base, "choices": [{"index": index, "text": "", "logprobs": None, "finish_reason": c.finish_reason.value}]}
        if req.stream_options and req.stream_options.include_usage:
            yield {**base, "choices": [], "usage": self.usage(groups)}

    def chat_chunks(self, req: ChatCompletionRequest, rid: str, groups: list[GeneratedGroup]) -> Iterator[dict[str, Any]]:
        base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": req.model, "system_fingerprint": self.fingerprint()}
        decode = self.tokenizer.decode
        for index, _, _, c, top in self._choices(groups):
            yield {**base, "choices": [{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}
            for i, piece in enumerate(text_deltas(decode, c.token_ids, c.text)):
                if not piece and not req.logprobs:
                    continue
                lp = None
                if req.logprobs:
                    one = Completion([c.token_ids[i]], piece, [c.logprobs[i]], c.finish_reason)
                    lp = self.chat_logprobs(one, [top[i]] if top else None)
                yield {**base, "choices": [{"index": index, "delta": {"content": piece}, "logprobs": lp, "finish_reason": None}]}
            yield {**base, "choices": [{"index": index, "delta": {}, "logprobs": None, "finish_reason": c.finish_reason.value}]}
        if req.stream_options and req.stream_options.include_usage:
            yield {**base, "choices": [], "usage": self.usage(groups)}


def _sse(chunks: Iterator[dict[str, Any]]) -> Iterator[str]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


# ---------------------------------------------------------------- the HTTP app


def create_app(engine: Any, config: ServeConfig, chat_template: ChatTemplate | None = None):
    """A FastAPI app serving `engine` (anything with `generate(prompts, params)` and a `tokenizer`)."""
    require_serve_extra()
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    service = Service(engine, config, chat_template)

    @asynccontextmanager
    async def lifespan(app):
        yield
        service.close()

    app = FastAPI(title="posttrain", lifespan=lifespan)
    app.state.service = service

    def error(exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        message, param = validation_message(list(exc.errors()))
        return error(bad_request(message, param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error(APIError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", kind))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unexpected error")
        return error(APIError(500, f"internal error: {type(exc).__name__}", "server_error"))

    def model_card() -> dict[str, Any]:
        return {"id": config.model_name, "object": "model", "created": service.created, "owned_by": "posttrain", "max_model_len": service.max_context}

    @app.get("/health")
    async def health():
        return {"status": "ok", "policy_version": getattr(engine, "policy_version", 0)}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str):
        service.check_model(name)
        return model_card()

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        service.check_model(req.model)
        prompts = service.encode_prompts(req.prompts())
        job = service.prepare(req, prompts, req.max_tokens, 16, req.logprobs or 0)
        groups = await service.generate(job)
        rid = f"cmpl-{uuid.uuid4().hex[:24]}"
        if req.stream:
            return StreamingResponse(_sse(service.completion_chunks(req, rid, groups)), media_type="text/event-stream")
        return service.completion_body(req, rid, groups)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest):
        service.check_model(req.model)
        try:
            ids = service.chat_template.encode([m.model_dump() for m in req.messages], service.tokenizer)
        except ChatTemplateError as exc:
            raise bad_request(str(exc), "messages") from None
        prompts = service.encode_prompts([ids])
        job = service.prepare(req, prompts, req.max_new_tokens, config.default_max_tokens, req.n_top_logprobs)
        groups = await service.generate(job)
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if req.stream:
            return StreamingResponse(_sse(service.chat_chunks(req, rid, groups)), media_type="text/event-stream")
        return service.chat_body(req, rid, groups)

    return app


class ServerThread:
    """An app served by uvicorn on a background thread of this process.

    >>> with ServerThread(create_app(engine, ServeConfig("tiny"))) as server:
    ...     OpenAI(base_url=server.url + "/v1", api_key="x").models.list()
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        require_serve_extra()
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on"))
        self.server.install_signal_handlers = lambda: None  # signals belong to the main thread
        self.thread = threading.Thread(target=self.server.run, name="posttrain-serve-http", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
