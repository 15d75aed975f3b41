"""The built-in text call format: parsing calls, malformed ones, and the byte-identical prefix."""

from __future__ import annotations

from posttrain.agent import format as fmt
from posttrain.agent.episode import ToolCall
from posttrain.agent.tools import default_tools


def test_parse_a_call_with_reasoning_and_a_cut_stop():
    text = 'I will list files.\n<tool_call>{"name": "bash", "arguments": {"command": "ls"}}'
    assert fmt.parse_call(text).call == ToolCall("bash", {"command": "ls"})
    assert fmt.parse_call(text + "</tool_call>").call == ToolCall("bash", {"command": "ls"})


def test_round_trip():
    c = ToolCall("write_file", {"path": "a", "content": "x\n\"q\""})
    assert fmt.parse_call(fmt.render_call(c)).call == c


def test_double_encoded_arguments_are_accepted():
    assert fmt.parse_call('<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}').call.arguments == {
        "command": "ls"}


def test_malformed_calls_say_why():
    assert "no tool call" in fmt.parse_call("just text").error
    assert "not valid JSON" in fmt.parse_call("<tool_call>{nope").error
    assert "JSON object" in fmt.parse_call('<tool_call>["bash"]').error
    assert "arguments must be a JSON object" in fmt.parse_call('<tool_call>{"name": "bash", "arguments": 3}').error


def test_prefix_is_byte_identical_and_lists_every_schema():
    schemas = [t.schema() for t in default_tools()]
    a, b = fmt.render_prefix(schemas), fmt.render_prefix([t.schema() for t in default_tools()])
    assert a == b and a.startswith("<system>\n") and a.endswith("</system>\n")
    assert all(f'"name": "{t.name}"' in a for t in default_tools())
