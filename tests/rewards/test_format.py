"""Format verifiers: regex, JSON Schema and tag structure; good shapes pass, bad ones say why, garbage is wrong."""

import json

import pytest

from posttrain.rewards import make_verifier, safe_verify
from posttrain.rewards.format import JsonSchemaFormat, RegexFormat, TagFormat
from posttrain.types import Task, VerdictStatus

T = Task(id="f", prompt="?", answer="x")
GARBAGE = ["", "\x00\ufffd", "}{" * 1000, "[" * 5000]


def test_regex_fullmatch_and_search():
    full = RegexFormat(pattern=r"[A-D]")
    assert safe_verify(full, T, "  B \n").passed
    assert not safe_verify(full, T, "B because").passed
    search = RegexFormat(pattern=r"answer:\s*[A-D]", mode="search", flags=["IGNORECASE"])
    v = safe_verify(search, T, "... ANSWER: c")
    assert v.passed
    bad = safe_verify(search, T, "no idea")
    assert not bad.passed and "does not contain" in bad.details


def test_regex_pattern_from_task_meta_and_errors():
    task = Task(id="p", prompt="?", meta={"pattern": r"\d{3}"})
    assert safe_verify(RegexFormat(), task, "123").passed
    assert safe_verify(RegexFormat(), T, "123").status is VerdictStatus.ERROR  # no pattern anywhere: the task's fault
    with pytest.raises(ValueError, match="bad regex"):
        make_verifier({"type": "regex", "pattern": "("})
    with pytest.raises(ValueError, match="unknown regex flag"):
        make_verifier({"type": "regex", "pattern": "a", "flags": ["sloppy"]})
    with pytest.raises(ValueError, match="mode"):
        make_verifier({"type": "regex", "pattern": "a", "mode": "match"})


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_json_schema_valid_and_invalid():
    v = JsonSchemaFormat(schema=SCHEMA)
    assert safe_verify(v, T, 'Sure:\n```json\n{"name": "Ada", "age": 36}\n```').passed
    assert safe_verify(v, T, '{"name": "Ada", "age": 36}').passed
    missing = safe_verify(v, T, '{"name": "Ada"}')
    assert not missing.passed and "'age' is a required property" in missing.details
    wrong_type = safe_verify(v, T, '{"name": "Ada", "age": -1}')
    assert not wrong_type.passed and "age" in wrong_type.details
    assert not safe_verify(v, T, "{name: Ada}").passed


@pytest.mark.parametrize("response", GARBAGE)
def test_json_schema_garbage_is_wrong(response):
    out = safe_verify(JsonSchemaFormat(schema=SCHEMA), T, response)
    assert out.ok and not out.passed


def test_json_schema_from_meta_and_bad_schema():
    task = Task(id="s", prompt="?", meta={"schema": {"type": "array", "items": {"type": "number"}}})
    assert safe_verify(make_verifier({"type": "json_schema", "extract": "full"}), task, "[1, 2.5]").passed
    assert not safe_verify(make_verifier("json_schema"), task, '["a"]').passed
    with pytest.raises(ValueError, match="invalid schema"):
        JsonSchemaFormat(schema={"type": "not-a-type"})
    assert safe_verify(JsonSchemaFormat(), T, "[]").status is VerdictStatus.ERROR  # no schema: the task's fault


def test_json_schema_never_fetches_remote_refs():
    v = JsonSchemaFormat(schema={"$ref": "https://example.invalid/schema.json"}, extract="full")
    out = safe_verify(v, T, json.dumps({"a": 1}))
    assert out.status is VerdictStatus.ERROR and "Unresolvable" in out.details


def test_tag_structure():
    v = TagFormat()
    assert safe_verify(v, T, "<think>add them</think>\n<answer>4</answer>\n").passed
    cases = {
        "<answer>4</answer><think>x</think>": "in order",
        "preamble <think>x</think><answer>4</answer>": "nothing but whitespace",
        "<think>x</think><answer>4</answer> trailing": "nothing but whitespace",
        "<think>x</think><answer>4</answer><answer>5</answer>": "exactly once",
        "<think>x</think>": "exactly once",
        "<think> </think><answer>4</answer>": "empty",
        "<think>x<answer>4</answer></think>": "in order",
    }
    for response, why in cases.items():
        out = safe_verify(v, T, response)
        assert out.ok and not out.passed and why in out.details, (response, out.details)


def test_tag_structure_options():
    loose = make_verifier({"type": "tags", "tags": ["answer"], "allow_outside": True, "nonempty": False})
    assert safe_verify(loose, T, "Let me see. <answer></answer> done").passed
    three = TagFormat(tags=["plan", "code", "answer"])
    assert safe_verify(three, T, "<plan>p</plan><code>c</code><answer>a</answer>").passed
    assert not safe_verify(three, T, "<plan>p</plan><answer>a</answer><code>c</code>").passed
    with pytest.raises(ValueError, match="tag names"):
        TagFormat(tags=["<bad>"])


@pytest.mark.parametrize("response", GARBAGE)
def test_tag_garbage_is_wrong(response):
    out = safe_verify(TagFormat(), T, response)
    assert out.ok and not out.passed
