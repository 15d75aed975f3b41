"""`MockEngine`: a scripted engine that behaves like the real ones where a user's test can tell."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from posttrain.engine import Engine, MockEngine
from posttrain.engine.mock import ScriptExhaustedError
from posttrain.models import char_tokenizer
from posttrain.types import FinishReason, SamplingParams


def test_a_list_of_responses_is_handed_out_in_order_one_per_sample():
    engine = MockEngine(["42", "41", "40", "39", "38"])
    assert isinstance(engine, Engine)
    groups = engine.generate(["12+30=", "1+1="], SamplingParams(n=2))
    assert [[c.text for c in g] for g in groups] == [["42", "41"], ["40", "39"]]
    with pytest.raises(ScriptExhaustedError, match="5 responses"):
        engine.generate(["x"], SamplingParams(n=2))
    assert engine.generate(["x"], SamplingParams())[0][0].text == "38"  # a failed call takes nothing
    assert [c.text for c in MockEngine(["a", "b"], cycle=True).generate(["x"], SamplingParams(n=3))[0]] == ["a", "b", "a"]
    with pytest.raises(ValueError, match="needs responses"):
        MockEngine([])


def test_a_function_answers_from_the_prompt_and_calls_are_recorded():
    engine = MockEngine(lambda prompt: str(eval(prompt.rstrip("="))))  # noqa: S307 - the test's own arithmetic
    params = SamplingParams(n=1, max_tokens=8)
    groups = engine.generate(["12+30=", "2*3="], params)
    assert [g[0].text for g in groups] == ["42", "6"]
    assert engine.calls == [(["12+30=", "2*3="], params)]
    assert all(g[0].finish_reason is FinishReason.STOP and g[0].token_ids == [] for g in groups)  # no tokenizer: text only
    assert engine.encode(["x"]) is None and engine.tokenizer is None


def test_with_a_tokenizer_it_has_tokens_max_tokens_stop_strings_and_a_token_stream():
    tok = char_tokenizer()
    engine = MockEngine(lambda prompt: "the answer is 42", tokenizer=tok)
    c = engine.generate(["q"], SamplingParams())[0][0]
    assert c.token_ids == tok.encode("the answer is 42", add_bos=False) and c.logprobs == [0.0] * len(c.token_ids)
    cut = engine.generate(["q"], SamplingParams(max_tokens=3))[0][0]
    assert (cut.text, cut.finish_reason) == ("the", FinishReason.LENGTH)
    stop = engine.generate(["q"], SamplingParams(stop=(" is",)))[0][0]
    assert stop.text == "the answer" and stop.finish_reason is FinishReason.STOP
    assert tok.decode(stop.token_ids) == "the answer is"  # up to the token that completed the stop string, as an engine stops
    deltas = list(engine.stream(["q"], SamplingParams(n=2, max_tokens=5)))
    assert len(deltas) == 10 and "".join(d.text for d in deltas if d.sample_index == 1) == "the a"
    assert [d.finish_reason for d in deltas if d.finish_reason] == [FinishReason.LENGTH] * 2
    assert engine.encode(["ab"]) == [tok.encode("ab")]
    assert engine.usage.requests == 4 and engine.usage.prompt_tokens == 4 * len(
        tok.encode("q")
    )  # one request per prompt per call
    assert engine.usage.completion_tokens == 16 + 3 + 13 + 2 * 5


def test_async_weights_and_versions():
    engine = MockEngine(["x"], cycle=True, max_context=64)
    assert asyncio.run(engine.agenerate(["p"], SamplingParams()))[0][0].policy_version == 0
    engine.load_weights({"w": 1}, version=3)
    assert engine.weights == {"w": 1} and engine.generate(["p"], SamplingParams())[0][0].policy_version == 3
    assert engine.max_context == 64 and engine.max_concurrency >= 1
    script = MockEngine(["a", "b", "c"])
    script.generate(["p"], SamplingParams())
    state = script.sampler_state()
    after = script.generate(["p"], SamplingParams(n=2))
    script.load_sampler_state(state)
    assert script.generate(["p"], SamplingParams(n=2)) == after == [[c for c in after[0]]]


def test_it_imports_without_torch():
    code = "import sys, posttrain.engine.mock as m; m.MockEngine(['a']); assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_with_an_eos_id_a_completion_that_stops_on_its_own_ends_with_it():
    tok = char_tokenizer()
    engine = MockEngine(["cube(1);", "cube(1);</tool_call>", "cube(1);"], tokenizer=tok, eos_id=tok.eos_id)
    (own,), = engine.generate(["p"], SamplingParams())
    assert own.token_ids == tok.encode("cube(1);", add_bos=False) + [tok.eos_id] and own.text == "cube(1);"
    (cut,), = engine.generate(["p"], SamplingParams(stop=("</tool_call>",)))  # a stop string: no EOS after it
    assert cut.token_ids[-1] != tok.eos_id
    (full,), = engine.generate(["p"], SamplingParams(max_tokens=8))  # no room left: no EOS
    assert full.token_ids == tok.encode("cube(1);", add_bos=False)
    (plain,), = MockEngine(["cube(1);"], tokenizer=tok).generate(["p"], SamplingParams())  # the default: none
    assert tok.eos_id not in plain.token_ids
