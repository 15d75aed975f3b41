"""`posttrain serve`: an OpenAI-compatible HTTP server over a posttrain engine.

Covers: the FastAPI app (`/v1/completions`, `/v1/chat/completions`,
`/v1/models`, `/health`), streaming as server-sent events (`data: {...}`
chunks, then `data: [DONE]`; an engine failure mid-stream is a final
`data: {"error": ...}` chunk), OpenAI-style error bodies for everything that
goes wrong (400 bad parameters, 404 unknown model or route, 429 queue full,
500 without a traceback when generation fails), and `ServerThread`, which runs
the app on a free port in this process (tests, notebooks, agents sharing one
model). The API logic lives in `openai_service.py`, request records in
`openai_protocol.py`, engine sharing in `batcher.py`.
Chat completions accept OpenAI `tools` / `tool_choice` and answer `tool_calls` (`openai_tools.py`).
Does not cover: authentication, images, echo/suffix, penalties.
"""

# no `from __future__ import annotations`: FastAPI must resolve the route annotations, some of
# which (Request) are imported inside create_app to keep FastAPI an optional import
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Self

from posttrain.engine.chat import ChatTemplate
from posttrain.engine.serve.openai_protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    bad_request,
    validation_message,
)
from posttrain.engine.serve.openai_service import ServeConfig, Service
from posttrain.extras import require

__all__ = ["ServeConfig", "ServerThread", "create_app", "require_serve_extra"]

log = logging.getLogger("posttrain.serve")


def require_serve_extra() -> None:
    """Raise `MissingExtraError` naming the `serve` extra unless FastAPI and uvicorn import."""
    for module in ("fastapi", "uvicorn"):
        require(module, "serve", "posttrain serve")


async def _sse(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
    try:
        async for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
    except APIError as exc:  # the status line is long gone: the error travels as the last event
        yield f"data: {json.dumps(exc.body())}\n\n"
    yield "data: [DONE]\n\n"


def create_app(engine: Any, config: ServeConfig, chat_template: ChatTemplate | None = None, renderer: Any = None):
    """A FastAPI app serving `engine` (an `Engine` with a `tokenizer`; a `LocalEngine` streams live)."""
    require_serve_extra()
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import Response, StreamingResponse

    service = Service(engine, config, chat_template, renderer)  # renderer: the model's `PromptRenderer` (training's)

    @asynccontextmanager
    async def lifespan(app):
        yield
        service.close()

    app = FastAPI(title="posttrain", lifespan=lifespan)
    app.state.service = service

    _add_error_handlers(app)
    _add_model_routes(app, service, engine, config)

    def stream(chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
        return StreamingResponse(_sse(chunks), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def respond(job, render, http: Request):
        groups = await service.generate(job, http.is_disconnected)
        if groups is None:  # nobody is listening any more
            return Response(status_code=499)
        return render(groups)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, http: Request):
        service.check_model(req.model)
        prompts = service.encode_prompts(req.prompts())
        job = service.prepare(req, prompts, req.max_tokens, 16, req.logprobs or 0)
        rid = f"cmpl-{uuid.uuid4().hex[:24]}"
        if req.stream:
            return stream(service.completion_chunks(req, rid, service.start_stream(job)))
        return await respond(job, lambda groups: service.completion_body(req, rid, groups), http)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, http: Request):
        service.check_model(req.model)
        ids, plan = service.chat_prompt(req)
        prompts = service.encode_prompts([ids])
        job = service.prepare(req, prompts, req.max_new_tokens, config.default_max_tokens, req.n_top_logprobs, plan.stop)
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if req.stream:
            return stream(service.chat_chunks(req, rid, service.start_stream(job), plan=plan))
        return await respond(job, lambda groups: service.chat_body(req, rid, groups, plan), http)

    return app


def _add_model_routes(app, service: Service, engine: Any, config: ServeConfig) -> None:
    """`/health` and the model list (one model, named as configured)."""

    def model_card() -> dict[str, Any]:
        return {
            "id": config.model_name,
            "object": "model",
            "created": service.created,
            "owned_by": "posttrain",
            "max_model_len": service.max_context,
        }

    @app.get("/health")
    async def health():
        return {"status": "ok", "policy_version": engine.policy_version}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str):
        service.check_model(name)
        return model_card()


def _add_error_handlers(app) -> None:
    """Every error as an OpenAI-style JSON body: ours, FastAPI's validation, Starlette's HTTP ones, and the
    unexpected (its traceback stays in the server log)."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

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
        log.exception("unexpected error", exc_info=exc)  # the traceback stays in the server log
        return error(APIError(500, f"internal error: {type(exc).__name__}", "server_error"))


class ServerThread:
    """An app served by uvicorn on a background thread of this process.

    >>> with ServerThread(create_app(engine, ServeConfig("tiny"))) as server:
    ...     OpenAI(base_url=server.url + "/v1", api_key="x").models.list()
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        require_serve_extra()
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on"))
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
