"""The built-in text call format, as the agent runtime uses it: `<tool_call>{"name", "arguments"}</tool_call>`.

The implementation is `posttrain.engine.tool_format` (shared with `posttrain serve`, which renders an
OpenAI `tools` conversation into the same text); this module re-exports it under the agent's name.
Covers: the names below. Does not cover: anything else (read `engine/tool_format.py`).
"""

from __future__ import annotations

from posttrain.engine.tool_format import (
    CALL_CLOSE,
    CALL_OPEN,
    CHAT_ERROR_LABEL,
    CHAT_SUMMARY_LABEL,
    STOP,
    SUMMARY_CLOSE,
    SUMMARY_OPEN,
    SYSTEM,
    Listing,
    Parsed,
    parse_call,
    render_call,
    render_format_error,
    render_note,
    render_observation,
    render_prefix,
    render_summary,
    render_task,
    signature,
)

__all__ = ["CALL_CLOSE", "CALL_OPEN", "CHAT_ERROR_LABEL", "CHAT_SUMMARY_LABEL", "STOP", "SUMMARY_CLOSE", "SUMMARY_OPEN",
           "SYSTEM", "Listing", "Parsed", "parse_call", "render_call", "render_format_error", "render_note", "render_observation",
           "render_prefix", "render_summary", "render_task", "signature"]
