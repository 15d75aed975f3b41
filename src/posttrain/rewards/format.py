"""Format verifiers: is the response shaped the way the task demands?

Covers: `RegexFormat` (the response, or a part of it, matches a pattern:
full match or search), `JsonSchemaFormat` (the response is JSON that
validates against a JSON Schema, from the spec or the task's meta) and
`TagFormat` (a required tag structure such as
`<think>...</think><answer>...</answer>`: in order, each tag once, nothing but
whitespace outside unless allowed). Each scores 1.0 or 0.0 and says what is
wrong; a response never makes them raise. A bad pattern or schema (the
task's fault) is an ERROR verdict, or a ValueError at construction.
Does not cover: what the answer inside the format says (answer verifiers do).

Patterns and schemas come from configs and task files, never from the
model. JSON Schema `$ref`s resolve only inside the schema: nothing is
fetched.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from posttrain.rewards.base import SyncVerifier
from posttrain.rewards.extract import tagged
from posttrain.rewards.registry import register_verifier
from posttrain.types import Task, Verdict

_FLAGS = {"ignorecase": re.IGNORECASE, "dotall": re.DOTALL, "multiline": re.MULTILINE}


def _compile(pattern: str, flags: list[str]) -> re.Pattern[str]:
    value = 0
    for f in flags:
        if f.lower() not in _FLAGS:
            raise ValueError(f"unknown regex flag {f!r}: use {', '.join(_FLAGS)}")
        value |= _FLAGS[f.lower()]
    try:
        return re.compile(pattern, value)
    except re.error as exc:
        raise ValueError(f"bad regex {pattern!r}: {exc}") from None


def _verdict(ok: bool, why: str) -> Verdict:
    return Verdict(float(ok), ok, details="" if ok else why)


@dataclass
class RegexFormat(SyncVerifier):
    """1.0 when the stripped response matches `pattern` (`mode`: fullmatch or search).

    With `pattern` None the task's `meta["pattern"]` is used.
    """

    pattern: str | None = None
    mode: Literal["fullmatch", "search"] = "fullmatch"
    flags: list[str] = field(default_factory=list)
    strip: bool = True
    name: str = "regex"

    def __post_init__(self) -> None:
        if self.mode not in ("fullmatch", "search"):
            raise ValueError(f"regex: mode must be 'fullmatch' or 'search', got {self.mode!r}")
        self._compiled = _compile(self.pattern, self.flags) if self.pattern is not None else None

    def verify(self, task: Task, response: str) -> Verdict:
        compiled = self._compiled
        if compiled is None:
            if not isinstance(task.meta.get("pattern"), str):
                raise ValueError(f"task {task.id!r}: regex verifier without a pattern and no meta['pattern']")
            compiled = _compile(task.meta["pattern"], self.flags)
        text = response.strip() if self.strip else response
        hit = (compiled.fullmatch if self.mode == "fullmatch" else compiled.search)(text) is not None
        return _verdict(hit, f"response does not {'match' if self.mode == 'fullmatch' else 'contain'} /{compiled.pattern}/")


_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


def _json_text(response: str, extract: str) -> str | None:
    if extract == "full":
        return response.strip()
    if extract == "tag":
        return tagged(response)
    if extract == "fenced":
        found = _FENCE.findall(response)
        return found[-1].strip() if found else response.strip()
    raise ValueError(f"json_schema: unknown extract {extract!r} (full, fenced, tag)")


@dataclass
class JsonSchemaFormat(SyncVerifier):
    """1.0 when the response parses as JSON and validates against `schema` (or the task's `meta["schema"]`).

    `extract`: `full` (the whole response), `fenced` (the last ```json block,
    else the whole response) or `tag` (`<answer>` contents).
    """

    schema: dict[str, Any] | None = None
    extract: Literal["full", "fenced", "tag"] = "fenced"
    name: str = "json_schema"

    def __post_init__(self) -> None:
        _json_text("", self.extract)
        self._validator = self._build(self.schema) if self.schema is not None else None

    @staticmethod
    def _build(schema: Any) -> Any:
        import jsonschema
        from referencing import Registry

        if not isinstance(schema, dict):
            raise ValueError(f"json_schema: a schema must be an object, got {type(schema).__name__}")
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"json_schema: invalid schema: {exc.message}") from None
        return cls(schema, registry=Registry())  # an empty registry: no $ref is ever fetched

    def verify(self, task: Task, response: str) -> Verdict:
        validator = self._validator or self._build(task.meta.get("schema"))
        text = _json_text(response, self.extract)
        if not text:
            return _verdict(False, "no JSON found")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return _verdict(False, f"not JSON: {str(exc)[:120]}")
        try:
            error = next(iter(validator.iter_errors(value)), None)
        except RecursionError:
            return _verdict(False, "JSON nested too deeply to validate")
        if error is None:
            return _verdict(True, "")
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return _verdict(False, f"schema violation at {where}: {error.message[:160]}")


@dataclass
class TagFormat(SyncVerifier):
    """1.0 when the response is exactly the `tags` in order, each once, e.g. `<think>..</think><answer>..</answer>`.

    `allow_outside`: text outside the tags is allowed (default: whitespace
    only). `nonempty`: every tag must hold some non-whitespace text.
    """

    tags: list[str] = field(default_factory=lambda: ["think", "answer"])
    allow_outside: bool = False
    nonempty: bool = True
    name: str = "tags"

    def __post_init__(self) -> None:
        if not self.tags or not all(isinstance(t, str) and re.fullmatch(r"[A-Za-z_][\w.-]*", t) for t in self.tags):
            raise ValueError(f"tags: expected a list of tag names, got {self.tags!r}")
        gap = r".*?" if self.allow_outside else r"\s*"
        body = gap.join(rf"<{re.escape(t)}>(.*?)</{re.escape(t)}>" for t in self.tags)
        self._pattern = re.compile(rf"{gap}{body}{gap}" if self.allow_outside else rf"\s*{body}\s*", re.DOTALL)

    def verify(self, task: Task, response: str) -> Verdict:
        for t in self.tags:
            opens, closes = response.count(f"<{t}>"), response.count(f"</{t}>")
            if opens != 1 or closes != 1:
                return _verdict(False, f"<{t}> must appear exactly once (found {opens} open, {closes} close)")
        m = self._pattern.fullmatch(response)
        if m is None:
            where = "in order" if self.allow_outside else "in order with nothing but whitespace outside them"
            return _verdict(False, f"expected {''.join(f'<{t}>…</{t}>' for t in self.tags)} {where}")
        if self.nonempty:
            for t, content in zip(self.tags, m.groups()):
                if not content.strip():
                    return _verdict(False, f"<{t}> is empty")
        return _verdict(True, "")


@register_verifier("regex")
def _regex(**params: Any) -> RegexFormat:
    return RegexFormat(**params)


@register_verifier("json_schema")
def _json_schema(**params: Any) -> JsonSchemaFormat:
    return JsonSchemaFormat(**params)


@register_verifier("tags")
def _tags(**params: Any) -> TagFormat:
    return TagFormat(**params)
