"""The OpenAI-compatible path with native tools, against a fake server (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import json

import httpx

from posttrain.agent import ContextPolicy, EpisodeStatus, run_agent_task
from posttrain.agent.demo import demo_tasks
from posttrain.agent.openai_chat import ChatEndpointModel, parse_tool_calls
from posttrain.types import SamplingParams

HELLO = demo_tasks()[1]  # create hello.txt holding "hello world"


def reply(content=None, tool_calls=None, finish="tool_calls"):
    msg = {"role": "assistant", "content": content}
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "message": msg, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10}}


def fn_call(i, name, args):
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


class FakeServer:
    def __init__(self, replies):
        self.replies = replies if callable(replies) else list(replies)
        self.requests = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        body = json.loads(request.content)
        self.requests.append(body)
        r = self.replies(body) if callable(self.replies) else self.replies.pop(0)
        return r if isinstance(r, httpx.Response) else httpx.Response(200, json=r)


def model(server, **kw):
    return ChatEndpointModel("http://fake/v1", "m", transport=httpx.MockTransport(server), **kw)


def test_native_tool_calls_solve_a_task(sandbox):
    server = FakeServer([
        reply("Writing it.", [fn_call(0, "write_file", {"path": "hello.txt", "content": "hello world\n"})]),
        reply(None, [fn_call(1, "submit", {})]),
    ])
    ep = asyncio.run(run_agent_task(model(server), HELLO, sandbox=sandbox))
    assert ep.status is EpisodeStatus.SOLVED and ep.steps == 2
    first, second = server.requests
    assert [t["function"]["name"] for t in first["tools"]][:2] == ["bash", "python"] and first["tool_choice"] == "auto"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == HELLO.instruction
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_0"
    assert second["messages"][3]["tool_call_id"] == "call_0" and "wrote 12 bytes" in second["messages"][3]["content"]
    assert ep.tokens_in == 200 and ep.tokens_out == 20


def test_malformed_arguments_and_missing_calls_are_format_errors(sandbox):
    server = FakeServer([reply(None, [fn_call(0, "bash", "{not json")]), reply("I am done.", None, "stop"),
                         reply(None, [fn_call(1, "submit", {})])])
    ep = asyncio.run(run_agent_task(model(server), HELLO, sandbox=sandbox))
    assert ep.format_errors == 2 and ep.status is EpisodeStatus.FAILED
    assert "not valid JSON" in ep.turns[0].format_error and "no tool call" in ep.turns[1].format_error
    assert server.requests[2]["messages"][-1]["content"].startswith("Error: ")


def test_garbage_from_the_endpoint_is_an_env_error(sandbox):
    ep = asyncio.run(run_agent_task(model(FakeServer([{"hello": "world"}])), HELLO, sandbox=sandbox))
    assert ep.status is EpisodeStatus.ENV_ERROR and "not a chat completion" in ep.error and ep.verdict is None
    bad = httpx.Response(400, json={"error": {"message": "model not found"}})
    ep = asyncio.run(run_agent_task(model(FakeServer([bad])), HELLO, sandbox=sandbox))
    assert ep.status is EpisodeStatus.ENV_ERROR and "HTTP 400" in ep.error


def test_retries_on_overload(sandbox):
    busy = httpx.Response(503, text="busy")
    server = FakeServer([busy, reply(None, [fn_call(0, "submit", {})])])
    ep = asyncio.run(run_agent_task(model(server, max_retries=2), HELLO, sandbox=sandbox))
    assert ep.status is EpisodeStatus.FAILED and len(server.requests) == 2


def test_compaction_over_chat_messages(sandbox):
    def answer(body):
        if "Summarise the work so far" in body["messages"][-1]["content"]:
            return reply("Summary: printed numbers.", None, "stop")
        n = len(body["messages"])
        return reply(None, [fn_call(n, "bash", {"command": "seq 1 400"})])

    server = FakeServer(answer)
    policy = ContextPolicy(budget_tokens=3000, compact_at=0.6, keep_turns=1)
    ep = asyncio.run(run_agent_task(model(server), HELLO, max_steps=10, sandbox=sandbox, context_policy=policy,
                                    params=SamplingParams(max_tokens=256)))
    kinds = [t.kind for t in ep.turns]
    assert "summary" in kinds
    after = server.requests[kinds.index("summary") + 1]["messages"]
    assert after[2]["content"].startswith("Summary of the work so far:\nSummary: printed numbers.")
    assert [m["role"] for m in after[3:5]] == ["assistant", "tool"]  # the kept turn stays whole


def test_parse_tool_calls():
    assert parse_tool_calls(None) == []
    assert isinstance(parse_tool_calls([{"function": {}}]), str)
    assert parse_tool_calls([fn_call(0, "bash", "")])[0].arguments == {}


def test_every_request_the_agent_sends_is_one_posttrain_serve_accepts(sandbox):
    """The client and `posttrain serve` agree on the wire: each body validates against the server's protocol and
    renders in the text call format, its labelled user messages as the runtime's own error and summary blocks."""
    from posttrain.agent import format as fmt
    from posttrain.engine.serve.openai_protocol import ChatCompletionRequest
    from posttrain.engine.serve.openai_tools import text_format_pieces

    def answer(body):
        last = body["messages"][-1]["content"] or ""
        if "Summarise the work so far" in last:
            return reply("Summary: printed numbers.", None, "stop")
        if len(body["messages"]) == 2:
            return reply("I am thinking.", None, "stop")  # no call: a format error
        return reply(None, [fn_call(len(body["messages"]), "bash", {"command": "seq 1 400"})])

    server = FakeServer(answer)
    policy = ContextPolicy(budget_tokens=3000, compact_at=0.6, keep_turns=1)
    asyncio.run(run_agent_task(model(server), HELLO, max_steps=8, sandbox=sandbox, context_policy=policy,
                               params=SamplingParams(max_tokens=256)))
    texts = []
    for body in server.requests:
        req = ChatCompletionRequest.model_validate(body)
        assert req.choice.mode == "auto"
        texts.append("".join(text_format_pieces([m.model_dump() for m in req.messages], req.tools)))
    assert fmt.render_format_error("no tool call: call a tool (submit when done)") in texts[1]
    assert any(fmt.render_summary("Summary: printed numbers.") in t for t in texts)
    assert all(t.startswith(fmt.render_prefix(body["tools"], body["messages"][0]["content"])) for t, body in
               zip(texts, server.requests))
