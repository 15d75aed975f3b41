"""The OpenAI wire format the server speaks: request records, their validation, and error bodies.

Covers: `/v1/completions` and `/v1/chat/completions` request bodies as
pydantic records with OpenAI's ranges (a bad value is a 400 naming the field),
the vLLM-style extras RL clients use (`top_k`, `min_p`, `ignore_eos`,
`stop_token_ids`, `return_token_ids`), OpenAI function `tools` and `tool_choice`
(checked here: a malformed tool or choice is a 400 with one line; how they are
rendered and read is `openai_tools.py`), explicit refusals of features the
server does not implement (penalties, logit bias, echo, suffix, logprobs on
streamed tool calls) instead of silently ignoring them, and the OpenAI error body.
Does not cover: producing responses (`server.py`, `openai_service.py`) or the
HTTP client side (engine/remote/openai_engine.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

MAX_N = 128
MAX_LOGPROBS = 20
MAX_TOOLS = 128  # OpenAI's limit
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's function names
TOOL_CHOICES = "'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}"


class APIError(Exception):
    """An error the client caused or must see: becomes `{"error": {...}}` with `status`."""

    def __init__(
        self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Sampling(BaseModel):
    """Fields shared by both endpoints. Unknown fields are ignored (clients send metadata such as `user`)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM-style extras
    top_k: int = Field(0, ge=-1)  # 0 or -1: disabled
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    return_token_ids: bool = False
    # accepted only at their neutral values
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    best_of: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # some clients send every field, unset ones as null: null means "the default" here
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _refuse_unsupported(self):
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                raise ValueError(f"{name} is not supported by this server (only 0)")
        if self.repetition_penalty not in (None, 1, 1.0):
            raise ValueError("repetition_penalty is not supported by this server (only 1)")
        if self.logit_bias:
            raise ValueError("logit_bias is not supported by this server")
        if self.best_of not in (None, self.n):
            raise ValueError("best_of is not supported by this server (only best_of == n)")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream: true")
        stops = self.stop_list
        if len(stops) > 4:
            raise ValueError("stop: at most 4 sequences")
        if any(s == "" for s in stops):
            raise ValueError("stop: sequences must be non-empty strings")
        return self

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionRequest(_Sampling):
    """POST /v1/completions. `prompt`: a string, a list of strings, token ids, or a list of token-id lists."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    suffix: str | None = None

    @model_validator(mode="after")
    def _refuse_completion_extras(self):
        if self.echo:
            raise ValueError("echo is not supported by this server")
        if self.suffix:
            raise ValueError("suffix is not supported by this server")
        return self

    def prompts(self) -> list[str] | list[list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise bad_request("prompt must not be empty", "prompt")
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[return-value]


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """OpenAI function tools, checked: `[{"type": "function", "function": {"name", "description"?, "parameters"?}}]`."""
    if not isinstance(tools, list):
        raise ValueError("tools must be a list of {\"type\": \"function\", \"function\": {...}} objects")
    if len(tools) > MAX_TOOLS:
        raise ValueError(f"tools: at most {MAX_TOOLS}")
    seen: set[str] = set()
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("function"), dict):
            raise ValueError(f'tools[{i}] must be {{"type": "function", "function": {{"name", "parameters"}}}}')
        if t.get("type") != "function":
            raise ValueError(f"tools[{i}].type = {t.get('type')!r}: only function tools are supported")
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise ValueError(f"tools[{i}].function.name = {name!r}: 1 to 64 letters, digits, '_' or '-'")
        if name in seen:
            raise ValueError(f"tools[{i}]: two tools are named {name!r}")
        seen.add(name)
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise ValueError(f"tools[{i}].function.description must be a string")
        params = fn.get("parameters")
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema of an object")
    return tools


@dataclass(frozen=True)
class ToolChoice:
    """A request's `tool_choice`: `none` (no call is read), `auto`, `required` or `function` (the named one)."""

    mode: Literal["none", "auto", "required", "function"]
    name: str = ""


def parse_tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> ToolChoice:
    """The request's choice (None: `auto` with tools, `none` without); a ValueError says what is wrong."""
    names = [t["function"]["name"] for t in tools or []]
    if value is None:
        return ToolChoice("auto" if names else "none")
    if value in ("none", "auto", "required"):
        if value == "required" and not names:
            raise ValueError("tool_choice 'required' needs tools")
        return ToolChoice(value)
    fn = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise ValueError(f"tool_choice: expected {TOOL_CHOICES}, got {value!r}"[:300])
    if name not in names:
        raise ValueError(f"tool_choice names {name!r}, which is not among the request's tools")
    return ToolChoice("function", name)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: Any | None = None  # list[dict], checked by `check_tools` (own messages, one line each)
    tool_choice: Any | None = None
    response_format: dict[str, Any] | None = None

    @field_validator("tools")
    @classmethod
    def _check_tools(cls, value: Any) -> Any:
        return check_tools(value) or None

    @field_validator("tool_choice")
    @classmethod
    def _check_tool_choice(cls, value: Any, info: ValidationInfo) -> Any:
        parse_tool_choice(value, info.data.get("tools"))  # invalid tools: their own error comes first
        return value

    @model_validator(mode="after")
    def _refuse_chat_extras(self):
        if self.stream and self.logprobs and self.choice.mode != "none":
            # a call's text is held back until it is whole: its tokens' logprobs would not line up with chunks
            raise ValueError("logprobs with streamed tool calls are not supported by this server (send stream: "
                             "false, or tool_choice: 'none')")
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            raise ValueError("response_format: only {'type': 'text'} is supported by this server")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        if (
            self.max_tokens is not None
            and self.max_completion_tokens is not None
            and self.max_tokens != self.max_completion_tokens
        ):
            raise ValueError("max_tokens and max_completion_tokens disagree; send one")
        return self

    @property
    def choice(self) -> ToolChoice:
        return parse_tool_choice(self.tool_choice, self.tools)

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def n_top_logprobs(self) -> int:
        return (self.top_logprobs or 0) if self.logprobs else 0


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """pydantic/FastAPI errors -> (one readable line, the offending top-level field)."""
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(x) for x in first.get("loc", ()) if x not in ("body",)]
    # drop pydantic's union-branch names ("str", "list[str]") from the location
    loc = [x for x in loc if not any(c in x for c in "[]") and x not in ("str", "int", "float", "function-after")]
    where = ".".join(loc)
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if where and msg.startswith(where):  # the message names its place itself ("tools[0].type = ...")
        return msg, loc[0]
    if first.get("type") == "json_invalid":
        return "request body is not valid JSON", None
    if first.get("type") == "missing":
        return f"missing required field: {where}", (loc[0] if loc else None)
    return (f"{where}: {msg}" if where else msg), (loc[0] if loc else None)
