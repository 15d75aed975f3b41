"""`ChatEndpointModel`: an OpenAI-compatible chat endpoint with native `tools` / `tool_calls` as an agent model.

Covers: rendering the context window as chat messages (system: the stable system text; user: the
task; assistant: its text and `tool_calls`; tool: each result, answering its `tool_call_id`;
summaries and format errors as user messages; images a tool returned, such as `render`'s PNG,
as `image_url` data-URL parts of a user message after the tool messages, unless `images=False`),
one POST to `/chat/completions` per turn with the tools' schemas, retries with backoff on 408/429/5xx
and transport errors, token usage and cost from the server's `usage`. A reply whose `tool_calls`
cannot be read (arguments that are not a JSON object) is a format error for the runtime, like a
malformed text call; an answer that is not a chat completion at all is a `ChatEndpointError` (the
episode ends as env_error, one clear line).
Token counts for the context policy are estimated (characters / 4): the endpoint's tokenizer is
not ours, so these episodes are evaluated and replayed, not trained on.
Does not cover: streaming, the text call format (`models.EngineModel` with a tokenizer).
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from typing import Any

import httpx

from posttrain.agent import format as fmt
from posttrain.agent.context import ContextWindow, Entry, EntryKind
from posttrain.agent.episode import ToolCall
from posttrain.agent.models import Sampled
from posttrain.agent.tools import Tool
from posttrain.errors import UserError
from posttrain.pricing import Price
from posttrain.types import Completion, FinishReason, SamplingParams

NATIVE_SYSTEM = ("You are an agent working in a sandboxed Linux workspace (the current directory). Act with the "
                 "tools: inspect files, run commands and tests, fix what fails, then call submit.")
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})


class ChatEndpointError(UserError, RuntimeError):
    """The endpoint failed or answered something that is not a chat completion."""


class ChatCodec:
    """Entries without token ids: content only, tokens estimated at four characters each."""

    def entry(self, kind: EntryKind, content: str, turn: int = 0, name: str = "", call_id: str = "") -> Entry:
        return Entry(kind, content, [], max(1, len(content) // 4), turn, name, call_id)

    def summary(self, text: str, sampled_ids: list[int], turn: int) -> Entry:
        return self.entry("summary", text, turn)


def _message(e: Entry) -> dict[str, Any]:
    if e.kind == "prefix":
        return {"role": "system", "content": e.content}
    if e.kind == "assistant":
        m: dict[str, Any] = {"role": "assistant", "content": e.content or None}
        if e.calls:
            m["tool_calls"] = [{"id": c.id, "type": "function",
                                "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in e.calls]
        return m
    if e.kind == "observation" and e.call_id:
        return {"role": "tool", "tool_call_id": e.call_id, "content": e.content}
    label = {"summary": fmt.CHAT_SUMMARY_LABEL, "error": fmt.CHAT_ERROR_LABEL}.get(e.kind, "")
    return {"role": "user", "content": label + e.content}


def image_message(images: list[tuple[str, bytes]]) -> dict[str, Any]:
    """A user message carrying tools' PNGs as image content parts (a tool message holds text only)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Images from " + ", ".join(sorted({n for n, _ in images})) + ":"}]
    parts += [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}
              for _, png in images]
    return {"role": "user", "content": parts}


def messages_of(w: ContextWindow, images: bool = True) -> list[dict[str, Any]]:
    """The window as chat messages; with `images`, observations' PNGs follow the run of tool messages they
    belong to, as one user message of image parts (every tool_call must be answered before another role speaks)."""
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, bytes]] = []
    for e in w.entries:
        m = _message(e)
        if pending and m["role"] != "tool":
            out.append(image_message(pending))
            pending = []
        out.append(m)
        if images and e.images:
            pending += [(e.name or "a tool", png) for png in e.images]
    if pending:
        out.append(image_message(pending))
    return out


def parse_tool_calls(raw: Any) -> list[ToolCall] | str:
    """The calls of a message's `tool_calls`, or why they cannot be read."""
    calls = []
    for i, tc in enumerate(raw or []):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return f"tool_calls[{i}] has no function name"
        args = fn.get("arguments") or "{}"
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            return f"the arguments of {fn['name']} are not valid JSON"
        if not isinstance(parsed, dict):
            return f"the arguments of {fn['name']} must be a JSON object"
        calls.append(ToolCall(fn["name"], parsed, str(tc.get("id") or f"call_{i}")))
    return calls


class ChatEndpointModel:
    """Drive an agent through `base_url/chat/completions` with native tools.

    >>> model = ChatEndpointModel("http://localhost:8000/v1", "Qwen/Qwen2.5-7B-Instruct")   # doctest: +SKIP
    """

    native_tools = True

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, price: Price | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 system: str = NATIVE_SYSTEM, images: bool = True) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.codec = ChatCodec()
        self.price = price
        self.max_retries = max_retries
        self.system = system
        self.images = images  # send tools' images (`render`) as image parts; False for a text-only endpoint
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client_args: dict[str, Any] = {"timeout": timeout_s, "headers": headers, "transport": transport}
        self._clients: dict[int, httpx.AsyncClient] = {}

    def prefix(self, tools: list[Tool], system: str) -> Entry:
        # the schemas travel in `tools`; the text call format's instructions would only confuse the model
        return self.codec.entry("prefix", self.system)

    def client(self) -> httpx.AsyncClient:
        loop = id(asyncio.get_running_loop())  # one client per event loop: a client is bound to the loop that made it
        c = self._clients.get(loop)
        if c is None:
            c = self._clients[loop] = httpx.AsyncClient(**self._client_args)
        return c

    async def aclose(self) -> None:
        for c in self._clients.values():
            await c.aclose()
        self._clients.clear()

    async def sample(self, window: ContextWindow, tools: list[Tool], params: SamplingParams) -> Sampled:
        body: dict[str, Any] = {"model": self.model, "messages": messages_of(window, self.images),
                                "max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p}
        if tools:
            body["tools"] = [t.schema() for t in tools]
            body["tool_choice"] = "auto"
        if params.seed is not None:
            body["seed"] = params.seed
        data = await self.post(body)
        try:
            choice = data["choices"][0]
            msg = choice["message"]
            text = msg.get("content") or ""
            finish = choice.get("finish_reason")
            usage = data.get("usage") or {}
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ChatEndpointError(f"{self.base_url}: the answer is not a chat completion: {str(data)[:200]}") from None
        calls = parse_tool_calls(msg.get("tool_calls"))
        completion = Completion([], text if isinstance(text, str) else str(text), [],
                                FinishReason.LENGTH if finish == "length" else FinishReason.STOP)
        tokens_in = int(usage.get("prompt_tokens") or window.tokens)
        tokens_out = int(usage.get("completion_tokens") or max(1, len(completion.text) // 4))
        cost = self.price.cost(tokens_in, tokens_out) if self.price is not None else 0.0
        if isinstance(calls, str):  # unreadable calls: a format error, shown to the model
            return Sampled(completion, [], tokens_in, [], cost, f"malformed tool call: {calls}", tokens_out)
        return Sampled(completion, [], tokens_in, calls, cost, completion_tokens=tokens_out)

    async def post(self, body: dict[str, Any]) -> Any:
        url = self.base_url + "/chat/completions"
        rng = random.Random()
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                r = await self.client().post(url, json=body)
            except httpx.HTTPError as exc:
                if last:
                    raise ChatEndpointError(f"{url}: {type(exc).__name__}: {exc}") from None
            else:
                if r.status_code == 200:
                    try:
                        return r.json()
                    except ValueError:
                        raise ChatEndpointError(f"{url}: the answer is not JSON: {r.text[:200]!r}") from None
                if r.status_code not in RETRYABLE or last:
                    raise ChatEndpointError(f"{url}: HTTP {r.status_code}: {r.text[:300]}")
            await asyncio.sleep(min(8.0, 0.25 * 2**attempt) * (0.5 + rng.random() / 2))
        raise AssertionError("unreachable")
