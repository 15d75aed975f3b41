"""The OpenAI API's logic without HTTP: validated requests in, response bodies and stream chunks out.

Covers: prompt encoding and checks (token ids in range, context length: a
prompt that fills the context is a 400, `max_tokens` beyond what is left is
cut to fit, with a note in the log once per server),
`SamplingParams` from a request (temperature, top_p, top_k, min_p, max_tokens,
stop strings, stop token ids, seed, ignore_eos), chat prompts with or without
`tools` (rendered and read by `openai_tools.py`), submitting to the
`RequestBatcher`, and turning engine results into OpenAI bodies: completions
and chat choices, logprobs in both endpoints' formats, usage, and streaming
chunks built from `CompletionDelta`s (live from a continuous engine, or
replayed from finished completions when the engine has no token stream or
top-k alternatives are requested).
Does not cover: HTTP routing, error rendering, SSE framing (`server.py`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from posttrain.engine.base import CompletionDelta
from posttrain.engine.chat import ChatTemplate, ChatTemplateError
from posttrain.engine.detokenize import text_deltas
from posttrain.engine.local.worker import GeneratedGroup, TopLogprobs
from posttrain.engine.serve.batcher import RequestBatcher
from posttrain.engine.serve.openai_protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    bad_request,
)
from posttrain.engine.serve.openai_tools import NO_TOOLS, HeldStream, ToolPlan, chat_prompt, tool_message
from posttrain.models.prompting import PromptRenderer
from posttrain.types import Completion, SamplingParams

log = logging.getLogger("posttrain.serve")

DISCONNECT_POLL_S = 0.25  # how often a waiting request checks that its client is still there


@dataclass
class ServeConfig:
    """How the server shares its engine."""

    model_name: str  # the id clients pass as `model`
    max_concurrency: int = 64  # requests in the engine at once (continuous) or per generate call; more wait their turn
    max_queue: int = 1024  # waiting requests beyond this are answered 429
    batch_window_s: float = 0.002  # engines without continuous batching: how long to wait for company
    default_max_tokens: int = 256  # chat requests without max_tokens (bounded by the context left)
    max_context: int | None = None  # prompt + completion tokens; None: the engine's own `max_context` (unbounded if none)


@dataclass
class Prepared:
    prompts: list[list[int]]
    params: SamplingParams
    top_k_logprobs: int


@dataclass
class TokenEvent:
    """A streamed piece of one choice: a delta plus the top-k alternatives of its tokens, when known."""

    delta: CompletionDelta
    top: TopLogprobs | None = None


def replay_events(groups: list[GeneratedGroup], decode) -> Iterator[TokenEvent]:
    """Finished completions as the per-token deltas a live stream would have sent."""
    for i, g in enumerate(groups):
        for j, c in enumerate(g.completions):
            top = g.top_logprobs[j] if g.top_logprobs is not None else None
            for t, (tok, lp, piece) in enumerate(zip(c.token_ids, c.logprobs, text_deltas(decode, c.token_ids, c.text))):
                yield TokenEvent(CompletionDelta(i, j, -1, [tok], [lp], piece), [top[t]] if top is not None else None)
            yield TokenEvent(CompletionDelta(i, j, -1, [], [], "", c.finish_reason, c))


def token_str(tokenizer, tid: int) -> str:
    text = tokenizer.decode([tid])
    return text if text else (tokenizer.backend.id_to_token(tid) or "")


class Service:
    """Turns validated requests into engine jobs and engine results into OpenAI bodies."""

    def __init__(self, engine: Any, config: ServeConfig, chat_template: ChatTemplate | None = None,
                 renderer: PromptRenderer | None = None) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.config = config
        self.chat_template = chat_template or ChatTemplate.plain()
        # the model's renderer (training's): its system prompt opens a conversation without one, its end-of-turn stops
        self.renderer = renderer or PromptRenderer()
        self.max_context: int | None = config.max_context or engine.max_context
        self._clamp_noted = False
        self.created = int(time.time())
        self.batcher = RequestBatcher(engine, config.max_concurrency, config.batch_window_s, config.max_queue)

    def close(self) -> None:
        self.batcher.close()

    # ---- requests -> engine jobs

    def check_model(self, name: str) -> None:
        if name != self.config.model_name:
            raise APIError(
                404,
                f"The model '{name}' does not exist; this server serves '{self.config.model_name}'",
                "invalid_request_error",
                "model",
                "model_not_found",
            )

    def chat_prompt(self, req: ChatCompletionRequest) -> tuple[list[int], ToolPlan]:
        """The chat request's prompt ids (tools included) and how its completions are read."""
        messages = self.renderer.conversation([m.model_dump() for m in req.messages])
        try:
            return chat_prompt(messages, req.tools, req.choice, self.chat_template, self.tokenizer)
        except ChatTemplateError as exc:
            raise bad_request(str(exc), "messages") from None

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

    def prepare(
        self,
        req: CompletionRequest | ChatCompletionRequest,
        prompts: list[list[int]],
        max_tokens: int | None,
        default: int,
        top_k_logprobs: int,
        extra_stop: tuple[str, ...] = (),
    ) -> Prepared:
        max_tokens = self._budget(prompts, req, max_tokens, default)
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
                min_p=req.min_p,
                max_tokens=max_tokens,
                stop_token_ids=stop_ids,
                stop=tuple(dict.fromkeys((*req.stop_list, *extra_stop))),
                seed=req.seed,
                ignore_eos=req.ignore_eos,
            )
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        if isinstance(req, ChatCompletionRequest):  # a reply ends at the end-of-turn token, as in training
            params = self.renderer.sampling(params)
        return Prepared(prompts, params, top_k_logprobs)

    def _budget(
        self, prompts: list[list[int]], req: CompletionRequest | ChatCompletionRequest, max_tokens: int | None, default: int
    ) -> int:
        """Tokens to generate: as asked (chat: `default` when unset), cut to what the context leaves after the longest prompt."""
        if self.max_context is None:
            return default if max_tokens is None else max_tokens
        longest = max(len(p) for p in prompts)
        room = self.max_context - longest
        if room < 1:
            where = "messages" if isinstance(req, ChatCompletionRequest) else "prompt"
            raise bad_request(
                f"This model's maximum context length is {self.max_context} tokens; the prompt has {longest}",
                where,
                "context_length_exceeded",
            )
        if max_tokens is None:
            return min(default, room)
        if max_tokens > room:
            if not self._clamp_noted:
                self._clamp_noted = True
                log.warning(
                    "a request asked for %d tokens after a %d-token prompt; the context holds %d, so it gets %d "
                    "(finish reason 'length'; noted once per server)", max_tokens, longest, self.max_context, room,
                )
            return room
        return max_tokens

    def _submit(self, job: Prepared, on_delta=None):
        try:
            return self.batcher.submit(job.prompts, job.params, job.top_k_logprobs, on_delta)
        except queue.Full:
            raise APIError(
                429, "the server is at capacity; retry shortly", "rate_limit_error", None, "rate_limit_exceeded"
            ) from None

    async def _result(self, future) -> list[GeneratedGroup]:
        try:
            return await asyncio.wrap_future(future)
        except ValueError as exc:  # the engine refused the input
            raise bad_request(str(exc)) from None
        except Exception as exc:
            log.exception("generation failed")  # the traceback stays in the server log
            raise APIError(500, f"generation failed: {type(exc).__name__}: {exc}", "server_error") from None

    async def generate(
        self, job: Prepared, is_disconnected: Callable[[], Awaitable[bool]] | None = None
    ) -> list[GeneratedGroup] | None:
        """The job's groups; None if the client went away first (a job still waiting is then dropped)."""
        future = self._submit(job)
        if is_disconnected is not None:
            waiter = asyncio.wrap_future(future)
            while not (await asyncio.wait({waiter}, timeout=DISCONNECT_POLL_S))[0]:
                if await is_disconnected():
                    future.cancel()  # a job not yet started never reaches the engine; a running one ends unheard
                    return None
        return await self._result(future)

    def start_stream(self, job: Prepared) -> AsyncIterator[TokenEvent | list[GeneratedGroup]]:
        """Submit now (a full queue is a 429 before any byte is sent); iterate for events, then the groups."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        live = self.batcher.streams_live and job.top_k_logprobs == 0
        on_delta = (lambda d: loop.call_soon_threadsafe(events.put_nowait, TokenEvent(d))) if live else None
        future = self._submit(job, on_delta)
        done = object()
        # set on the worker thread after the job's last delta was queued, so it arrives last
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(events.put_nowait, done))

        async def iterate():
            try:
                while (item := await events.get()) is not done:
                    yield item
                groups = await self._result(future)
                if not live:
                    for event in replay_events(groups, self.tokenizer.decode):
                        yield event
                yield groups
            finally:
                future.cancel()  # the client left before its job started: it never reaches the engine

        return iterate()

    # ---- engine results -> OpenAI bodies

    @staticmethod
    def usage(groups: list[GeneratedGroup]) -> dict[str, int]:
        prompt = sum(len(g.prompt_ids) for g in groups)
        completion = sum(len(c.token_ids) for g in groups for c in g.completions)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def fingerprint(self) -> str:
        return f"posttrain-v{self.engine.policy_version}"

    def completion_logprobs(
        self, token_ids: list[int], logprobs: list[float], top: TopLogprobs | None, k: int, offset0: int = 0
    ) -> dict[str, Any]:
        tokens = [token_str(self.tokenizer, t) for t in token_ids]
        offsets, pos = [], offset0
        for s in tokens:
            offsets.append(pos)
            pos += len(s)
        tops = []
        for i, lp in enumerate(logprobs):
            alts = {token_str(self.tokenizer, a): v for a, v in (top[i] if top is not None and k > 0 else [])}
            alts.setdefault(tokens[i], lp)  # OpenAI lists the sampled token too
            tops.append(alts)
        return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": tops, "text_offset": offsets}

    def chat_logprobs(self, token_ids: list[int], logprobs: list[float], top: TopLogprobs | None) -> dict[str, Any]:
        content = []
        for i, (t, lp) in enumerate(zip(token_ids, logprobs)):
            s = token_str(self.tokenizer, t)
            alts = []
            for a, v in top[i] if top else []:
                a_s = token_str(self.tokenizer, a)
                alts.append({"token": a_s, "logprob": v, "bytes": list(a_s.encode())})
            content.append({"token": s, "logprob": lp, "bytes": list(s.encode()), "top_logprobs": alts})
        return {"content": content, "refusal": None}

    def _choices(self, groups: list[GeneratedGroup]) -> Iterator[tuple[int, GeneratedGroup, Completion, TopLogprobs | None]]:
        index = 0
        for g in groups:
            for j, c in enumerate(g.completions):
                yield index, g, c, (g.top_logprobs[j] if g.top_logprobs is not None else None)
                index += 1

    def _envelope(self, rid: str, kind: str, model: str) -> dict[str, Any]:
        return {"id": rid, "object": kind, "created": int(time.time()), "model": model, "system_fingerprint": self.fingerprint()}

    def completion_body(self, req: CompletionRequest, rid: str, groups: list[GeneratedGroup]) -> dict[str, Any]:
        choices = []
        for index, g, c, top in self._choices(groups):
            lp = self.completion_logprobs(c.token_ids, c.logprobs, top, req.logprobs) if req.logprobs is not None else None
            choice: dict[str, Any] = {"index": index, "text": c.text, "logprobs": lp, "finish_reason": c.finish_reason.value}
            if req.return_token_ids:
                choice.update(token_ids=list(c.token_ids), prompt_token_ids=list(g.prompt_ids))
            choices.append(choice)
        return {**self._envelope(rid, "text_completion", req.model), "choices": choices, "usage": self.usage(groups)}

    def chat_body(
        self, req: ChatCompletionRequest, rid: str, groups: list[GeneratedGroup], plan: ToolPlan = NO_TOOLS
    ) -> dict[str, Any]:
        choices = []
        for index, _, c, top in self._choices(groups):
            message, finish = tool_message(c.text, plan, c.finish_reason.value)
            choice: dict[str, Any] = {
                "index": index,
                "message": message,
                "logprobs": self.chat_logprobs(c.token_ids, c.logprobs, top) if req.logprobs else None,
                "finish_reason": finish,
            }
            if req.return_token_ids:
                choice["token_ids"] = list(c.token_ids)
            choices.append(choice)
        body = {**self._envelope(rid, "chat.completion", req.model), "choices": choices, "usage": self.usage(groups)}
        if req.return_token_ids:
            body["prompt_token_ids"] = list(groups[0].prompt_ids)
        return body

    async def completion_chunks(self, req: CompletionRequest, rid: str, events: AsyncIterator) -> AsyncIterator[dict[str, Any]]:
        base = self._envelope(rid, "text_completion", req.model)
        offsets: dict[int, int] = defaultdict(int)
        async for event in events:
            if isinstance(event, list):  # the finished groups: the stream's end
                if req.stream_options and req.stream_options.include_usage:
                    yield {**base, "choices": [], "usage": self.usage(event)}
                return
            d, index = event.delta, event.delta.prompt_index * req.n + event.delta.sample_index
            if d.token_ids or d.text:
                lp = None
                if req.logprobs is not None:
                    lp = self.completion_logprobs(d.token_ids, d.logprobs, event.top, req.logprobs, offsets[index])
                offsets[index] += len(d.text)
                choice = {"index": index, "text": d.text, "logprobs": lp, "finish_reason": None}
                if req.return_token_ids:
                    choice["token_ids"] = list(d.token_ids)
                yield {**base, "choices": [choice]}
            if d.finish_reason is not None:
                yield {
                    **base,
                    "choices": [{"index": index, "text": "", "logprobs": None, "finish_reason": d.finish_reason.value}],
                }

    async def chat_chunks(
        self, req: ChatCompletionRequest, rid: str, events: AsyncIterator, n_prompts: int = 1, plan: ToolPlan = NO_TOOLS
    ) -> AsyncIterator[dict[str, Any]]:
        if plan.parse:
            async for chunk in self.tool_chunks(req, rid, events, plan, n_prompts):
                yield chunk
            return
        base = self._envelope(rid, "chat.completion.chunk", req.model)
        for index in range(n_prompts * req.n):
            yield {
                **base,
                "choices": [
                    {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                ],
            }
        async for event in events:
            if isinstance(event, list):
                if req.stream_options and req.stream_options.include_usage:
                    yield {**base, "choices": [], "usage": self.usage(event)}
                return
            d, index = event.delta, event.delta.prompt_index * req.n + event.delta.sample_index
            if d.text or (req.logprobs and d.token_ids):
                lp = self.chat_logprobs(d.token_ids, d.logprobs, event.top) if req.logprobs else None
                yield {**base, "choices": [{"index": index, "delta": {"content": d.text}, "logprobs": lp, "finish_reason": None}]}
            if d.finish_reason is not None:
                yield {
                    **base,
                    "choices": [{"index": index, "delta": {}, "logprobs": None, "finish_reason": d.finish_reason.value}],
                }

    async def tool_chunks(
        self, req: ChatCompletionRequest, rid: str, events: AsyncIterator, plan: ToolPlan, n_prompts: int = 1
    ) -> AsyncIterator[dict[str, Any]]:
        """Chat chunks when calls are read: content streams until a call begins; the call is one `tool_calls`
        delta at the choice's end (`openai_tools.HeldStream`). No logprobs (the protocol refuses them here)."""
        base = self._envelope(rid, "chat.completion.chunk", req.model)

        def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        held: dict[int, HeldStream] = {}
        for index in range(n_prompts * req.n):
            held[index] = HeldStream(plan)
            yield chunk(index, {"role": "assistant", "content": ""})
        async for event in events:
            if isinstance(event, list):
                if req.stream_options and req.stream_options.include_usage:
                    yield {**base, "choices": [], "usage": self.usage(event)}
                return
            d, index = event.delta, event.delta.prompt_index * req.n + event.delta.sample_index
            text = held[index].push(d.text) if d.text else ""
            if text:
                yield chunk(index, {"content": text})
            if d.finish_reason is not None:
                owed, calls = held[index].finish()
                if owed:
                    yield chunk(index, {"content": owed})
                if calls:
                    yield chunk(index, {"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
                yield chunk(index, {}, "tool_calls" if calls else d.finish_reason.value)
