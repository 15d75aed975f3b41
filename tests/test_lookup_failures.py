"""``benchmarks/lookup_failures.py``: the kinds of misquote it counts, and its tallies, on planted episodes."""

import json

from benchmark_module import load_benchmark

FILE = "[read] xl -> i\nis = k\nqp = i"


def test_each_kind_of_misquote_is_told_apart():
    q = load_benchmark("lookup_failures").quote_error
    assert q("xl", FILE, 'xl -> i\n<tool_call>{"name": "read"}') is None  # quoted right
    assert q("xl", FILE, "xl = i\n<tool_call>") == "operator"  # a pointer read as a value
    assert q("xl", FILE, "xl -> k\n<tool_call>") == "target"
    assert q("xl", FILE, "is = k\n<tool_call>") == "other line"
    assert q("xl", FILE, "zz\n<tool_call>") == "other"
    assert q("ab", FILE, "ab = 1\n<tool_call>") is None  # the file has no line for the key: nothing to judge


def test_malformed_replies_are_counted_by_turn_and_failed_episodes_by_their_first_misquote():
    def turn(text, observation="", error=""):
        return {"text": text, "observation": observation, "format_error": error}

    failed = {"status": "failed", "instruction": "Find the value of xl. Start in the file start.",
              "turns": [turn("<tool_call>read start", "[read] xl -> j"), turn("xl -> j\n<tool_call>read j", FILE),
                        turn("xl = i\n<tool_call>submit i")]}
    broken = {"status": "format_errors", "instruction": "Find the value of xl.",
              "turns": [turn("<tool_call>read start"), turn("garble", error="no tool call"),
                        turn("garble", error="no tool call")]}
    got = load_benchmark("lookup_failures").analyse([json.dumps(failed), json.dumps(broken)])
    assert got["malformed_by_turn"] == {0: 0.0, 1: 0.5, 2: 0.5}
    assert got["failed_first_misquote"] == {"turn 2: operator": 1}
    assert got["status"] == {"failed": 1, "format_errors": 1}
