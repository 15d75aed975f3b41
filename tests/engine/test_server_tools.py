"""`posttrain serve` with OpenAI `tools`: the request and response shape, refusals, and agents driving it.

Engines here are scripted (`MockEngine`, `ScriptedAgent`, char tokenizer), so every prompt the server
renders can be compared with the text the agent runtime itself feeds a model; one test serves the
tiny random model to show that whatever a real model writes is a response, never a 500.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from posttrain.agent import EpisodeStatus, run_agent_task, tool
from posttrain.agent import format as fmt
from posttrain.agent.env import FunctionEnv
from posttrain.agent.openai_chat import ChatEndpointModel
from posttrain.agent.scripted import ScriptedAgent, call
from posttrain.agent.tools import submit
from posttrain.engine import LocalEngine, MockEngine
from posttrain.engine.chat import ChatTemplate
from posttrain.engine.serve.openai_tools import HeldStream, ToolPlan, read_reply
from posttrain.engine.serve.server import ServeConfig, ServerThread, create_app
from posttrain.models import char_tokenizer, load_model

MODEL = "m"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def served(engine, template: ChatTemplate | None = None) -> ServerThread:
    return ServerThread(create_app(engine, ServeConfig(MODEL), template))


def client_of(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def prompt_text(engine: MockEngine, i: int = -1) -> str:
    prompts, _ = engine.calls[i]
    return engine.tokenizer.decode(prompts[0])


def test_a_call_comes_back_as_tool_calls():
    engine = MockEngine(['Let me look.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
                         'and more text the stop string cuts'], tokenizer=char_tokenizer(), cycle=True)
    with served(engine) as server:
        r = client_of(server).chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER], temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.role == "assistant" and choice.message.content == "Let me look.\n"
    (tc,) = choice.message.tool_calls
    assert tc.id.startswith("call_") and tc.type == "function" and tc.function.name == "get_weather"
    assert json.loads(tc.function.arguments) == {"city": "Paris"}
    _, params = engine.calls[-1]
    assert fmt.CALL_CLOSE in params.stop  # one call per reply, as the agent runtime samples
    # no system message: the text format's own system text and the tool schema are the prefix, the user the task
    assert prompt_text(engine) == fmt.render_prefix([WEATHER]) + fmt.render_task(USER[0]["content"])


def test_the_raw_body_matches_the_openai_shape():
    engine = MockEngine(['<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'], tokenizer=char_tokenizer())
    with served(engine) as server:
        body = httpx.post(server.url + "/v1/chat/completions",
                          json={"model": MODEL, "messages": USER, "tools": [WEATHER]}).json()
    assert body["object"] == "chat.completion"
    msg = body["choices"][0]["message"]
    assert msg["content"] is None and set(msg) == {"role", "content", "tool_calls"}
    (tc,) = msg["tool_calls"]
    assert set(tc) == {"id", "type", "function"} and set(tc["function"]) == {"name", "arguments"}
    assert isinstance(tc["function"]["arguments"], str) and json.loads(tc["function"]["arguments"]) == {"city": "Oslo"}


@pytest.mark.parametrize("text", ["It is sunny, I think.", '<tool_call>{"name": "get_weather", "arguments": {nope'])
def test_a_reply_without_a_readable_call_is_plain_content(text):
    engine = MockEngine([text], tokenizer=char_tokenizer())
    with served(engine) as server:
        r = client_of(server).chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER])
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content == text


def test_required_and_named_choices_force_the_calls_opening():
    engine = MockEngine(['{"city": "Rome"}}</tool_call>'], tokenizer=char_tokenizer(), cycle=True)
    other = {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}
    with served(engine) as server:
        client = client_of(server)
        named = client.chat.completions.create(model=MODEL, messages=USER, tools=[other, WEATHER],
                                               tool_choice={"type": "function", "function": {"name": "get_weather"}})
        assert prompt_text(engine).endswith('</task>\n<tool_call>{"name": "get_weather", "arguments": ')
        required = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER], tool_choice="required")
        assert prompt_text(engine).endswith("</task>\n<tool_call>")
    (tc,) = named.choices[0].message.tool_calls
    assert tc.function.name == "get_weather" and json.loads(tc.function.arguments) == {"city": "Rome"}
    # forced open but not a whole call: the model's text (with the forced opening) comes back as content
    assert required.choices[0].message.tool_calls is None
    assert required.choices[0].message.content == '<tool_call>{"city": "Rome"}}'


def test_tool_choice_none_reads_no_call_and_streams():
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    engine = MockEngine([text], tokenizer=char_tokenizer(), cycle=True)
    with served(engine) as server:
        client = client_of(server)
        r = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER], tool_choice="none")
        assert r.choices[0].message.content == text and r.choices[0].message.tool_calls is None
        assert fmt.CALL_CLOSE not in engine.calls[-1][1].stop
        chunks = list(client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER], tool_choice="none",
                                                     stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text


def accumulate(chunks) -> tuple[str, list[dict], list[str | None]]:
    """A stream's content, its tool calls (merged by index, as clients merge deltas) and finish reasons."""
    content, calls, finishes = "", {}, []
    for c in chunks:
        for ch in c.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += tc.id or ""
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
            finishes.append(ch.finish_reason)
    return content, [calls[i] for i in sorted(calls)], [f for f in finishes if f]


def test_streamed_tool_calls_match_the_plain_response():
    text = 'Let me look.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    engine = MockEngine([text], tokenizer=char_tokenizer(), cycle=True)
    with served(engine) as server:
        client = client_of(server)
        whole = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER])
        chunks = list(client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER], stream=True,
                                                     stream_options={"include_usage": True}))
    content, calls, finishes = accumulate(chunks)
    assert content == whole.choices[0].message.content and finishes == ["tool_calls"]
    (tc,) = calls
    assert tc["id"].startswith("call_") and tc["name"] == "get_weather"
    assert tc["arguments"] == whole.choices[0].message.tool_calls[0].function.arguments
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) > 1  # the text before the call streamed piece by piece


@pytest.mark.parametrize("text", [
    'abc <tool_call>{"name": "f", "arguments": {"x": 1}}',
    "a <tool_ca but no call after all",
    'x <tool_call>{"name": "f", "arguments": {broken',
    'one <tool_call> two <tool_call>{"name": "f", "arguments": {}}',
    "<tool",
])
@pytest.mark.parametrize("forced", ["", "<tool_call>"])
def test_a_held_stream_concatenates_to_the_read_reply(text, forced):
    plan = ToolPlan(True, forced, fmt.STOP)
    stream = HeldStream(plan)
    sent = "".join(stream.push(ch) for ch in text)
    assert fmt.CALL_OPEN not in sent and not (sent and forced)  # nothing of a call leaves early
    owed, calls = stream.finish()
    content, want = read_reply(text, plan)
    assert sent + owed == (content or "")
    assert (calls is None) == (want is None) and (calls is None or calls[0]["function"] == want[0]["function"])


def test_a_tool_conversation_renders_as_the_agent_runtime_renders_it():
    engine = MockEngine(["done"], tokenizer=char_tokenizer(), cycle=True)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "First Paris.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "rain"}]},
        {"role": "assistant", "content": "hmm"},
        {"role": "user", "content": fmt.CHAT_ERROR_LABEL + "no tool call"},
        {"role": "user", "content": fmt.CHAT_SUMMARY_LABEL + "asked twice"},
        {"role": "user", "content": "Anything else?"},
    ]
    with served(engine) as server:
        client_of(server).chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    want = (fmt.render_prefix([WEATHER], "Be brief.") + fmt.render_task("Weather in Paris and Rome?")
            + "First Paris." + fmt.render_call(call("get_weather", city="Paris")) + fmt.render_observation("get_weather", "sunny")
            + fmt.render_call(call("get_weather", city="Rome")) + fmt.render_observation("get_weather", "rain")
            + "hmm" + fmt.render_format_error("no tool call") + fmt.render_summary("asked twice")
            + fmt.render_note("Anything else?"))
    assert prompt_text(engine) == want
    ids = engine.calls[-1][0][0]
    assert ids[0] == engine.tokenizer.bos_id and ids.count(engine.tokenizer.bos_id) == 1  # BOS on the prefix only


HERMES = (  # the shape of Qwen2.5's template: tools in the system turn, calls in <tool_call> blocks
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for tc in m.tool_calls or [] %}<tool_call>\n{{ {'name': tc.function.name, 'arguments': tc.function.arguments}"
    " | tojson }}\n</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_with_tools_renders_them_and_its_calls_are_read():
    body = '{"name": "get_weather", "arguments": {"city": "Lima"}}\n</tool_call>'

    def reply(prompt):  # continues a forced opening, else writes the whole block
        return body if engine.tokenizer.decode(prompt).endswith("<tool_call>\n") else "<tool_call>\n" + body

    engine = MockEngine(reply, tokenizer=char_tokenizer())
    messages = USER + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    with served(engine, ChatTemplate(HERMES)) as server:
        client = client_of(server)
        r = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
        text = prompt_text(engine)
        forced = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER], tool_choice="required")
        assert prompt_text(engine).endswith("<|im_start|>assistant\n<tool_call>\n")
    assert json.dumps(WEATHER, ensure_ascii=False) in text  # the template's own rendering of the schema
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text  # an object
    assert text.endswith("<|im_start|>assistant\n") and "<task>" not in text
    (tc,) = r.choices[0].message.tool_calls
    assert tc.function.name == "get_weather" and json.loads(tc.function.arguments) == {"city": "Lima"}
    assert forced.choices[0].message.content is None
    assert forced.choices[0].message.tool_calls[0].function.arguments == tc.function.arguments


def test_a_template_without_tools_gets_the_text_format_and_one_with_an_unknown_syntax_is_refused():
    engine = MockEngine(["x"], tokenizer=char_tokenizer(), cycle=True)
    plain = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
    with served(engine, ChatTemplate(plain)) as server:
        client_of(server).chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER])
        assert prompt_text(engine).startswith("<system>\n" + fmt.SYSTEM)
        client_of(server).chat.completions.create(model=MODEL, messages=USER)
        assert prompt_text(engine) == "<user>" + USER[0]["content"] + "\n"  # no tools: the template as before
    llama = "{% for t in tools %}{{ t | tojson }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}"
    with served(engine, ChatTemplate(llama)) as server:
        r = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": USER, "tools": [WEATHER]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    assert "does not read" in r.json()["error"]["message"]


def _msgs(*extra):
    return USER + list(extra)


BAD = [
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "stream": True, "logprobs": True}, None),
    ({"tools": [WEATHER], "messages": _msgs({"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{nope"}}]})}, "messages"),
    ({"tools": [WEATHER], "messages": _msgs({"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]})},
     "messages"),
    ({"tools": [WEATHER], "messages": _msgs({"role": "user", "content": "x", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]})}, "messages"),
    ({"tools": [WEATHER], "messages": _msgs({"role": "tool", "tool_call_id": 7, "content": "x"})}, "messages"),
]


@pytest.mark.parametrize("extra, param", BAD)
@pytest.mark.slow
def test_malformed_tools_are_one_line_400s(extra, param):
    engine = MockEngine(["x"], tokenizer=char_tokenizer(), cycle=True)
    with served(engine) as server:
        r = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": USER, **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"] and "\n" not in err["message"]
    assert "Traceback" not in err["message"] and len(err["message"]) < 400
    if param is not None:
        assert err["param"] == param
    assert engine.calls == []  # refused before the engine


# ---- agents driving the server: ChatEndpointModel (native tools) against `posttrain serve`


@tool
def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return str(a + b)


def sum_env() -> FunctionEnv:
    return FunctionEnv("sum", "Add 2 and 3 with the add tool, then submit the result.", [add, submit],
                       lambda answer: answer == "5")


def script(*before: str) -> ScriptedAgent:
    return ScriptedAgent([*before, call("add", a=2, b=3), call("submit", answer="5")], thought="Adding.\n")


def test_chat_endpoint_model_solves_a_task_through_serve_with_the_prompts_of_a_local_run():
    system = "Solve it with the tools."
    local = script()
    local_ep = asyncio.run(run_agent_task(local, sum_env(), system=system))
    assert local_ep.status is EpisodeStatus.SOLVED

    remote = script()
    with served(remote) as server:
        model = ChatEndpointModel(server.url + "/v1", MODEL, system=system, max_retries=0)
        ep = asyncio.run(run_agent_task(model, sum_env(), system=system))
    assert ep.status is EpisodeStatus.SOLVED and ep.steps == 2 and ep.format_errors == 0
    assert [c.name for t in ep.turns for c in t.calls] == ["add", "submit"]
    assert ep.turns[0].results[0].output == "5" and ep.submitted == "5"
    assert ep.turns[0].calls[0].id.startswith("call_")  # the server's id, answered by the tool message
    assert ep.tokens_in == sum(len(p[0]) for p, _ in remote.calls)  # the server's usage
    # served exactly as trained: every prompt the server rendered is the context the local runtime built
    assert [p[0] for p, _ in remote.calls] == [p[0] for p, _ in local.calls]
    assert len(remote.calls) == 2


def test_a_reply_without_a_call_through_serve_is_a_format_error_and_the_episode_goes_on():
    remote = script("Not a call.", '<tool_call>{"name": "add", "arguments": {broken')
    with served(remote) as server:
        model = ChatEndpointModel(server.url + "/v1", MODEL, max_retries=0)
        ep = asyncio.run(run_agent_task(model, sum_env()))
    assert ep.status is EpisodeStatus.SOLVED and ep.steps == 4 and ep.format_errors == 2
    assert all("no tool call" in t.format_error for t in ep.turns[:2])
    last = remote.tokenizer.decode(remote.calls[2][0][0])
    assert last.endswith(fmt.render_format_error(ep.turns[1].format_error))  # the client's error, as a text block


@pytest.mark.slow
def test_the_tiny_model_answers_parse_or_are_plain_text_never_a_500(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    tiny = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    with served(LocalEngine(model, tok, seed=0)) as server:
        client = client_of(server)
        for choice in ("auto", "required", {"type": "function", "function": {"name": "f"}}):
            parts = client.chat.completions.create(
                model=MODEL, messages=[{"role": "system", "content": "Go."}, {"role": "user", "content": "1+1"}],
                tools=[tiny], tool_choice=choice, max_tokens=24, temperature=1.0, seed=2, stream=True)
            content, calls, finishes = accumulate(parts)
            assert finishes in (["tool_calls"], ["stop"], ["length"]) and bool(calls) == (finishes == ["tool_calls"])
            r = client.chat.completions.create(
                model=MODEL, messages=[{"role": "system", "content": "Go."}, {"role": "user", "content": "1+1"}],
                tools=[tiny], tool_choice=choice, n=4, max_tokens=24, temperature=1.0, seed=1)
            for c in r.choices:
                if c.message.tool_calls:
                    assert c.finish_reason == "tool_calls" and c.message.tool_calls[0].function.name
                    assert isinstance(json.loads(c.message.tool_calls[0].function.arguments), dict)
                else:
                    assert c.finish_reason in ("stop", "length") and isinstance(c.message.content, str)
