"""The `render` tool: a CAD model seen as a PNG (image parts to a chat endpoint) and as text (dimensions, IoU,
silhouettes), in a generate-observe-correct episode against a stand-in OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest

from posttrain.agent import EpisodeStatus, run_agent_task
from posttrain.agent.cad_tools import cad_agent_task, render_tool
from posttrain.agent.episode import ToolCall
from posttrain.agent.openai_chat import ChatEndpointModel
from posttrain.agent.tools import ToolContext
from posttrain.rewards.cad import CadVerifier, RenderSettings, extract_program, run_openscad
from posttrain.rewards.cad_render import render_one
from posttrain.tasks import TaskFileError
from posttrain.tasks.cad import PartsSource

TASK = PartsSource(level=1).take(1, "held_out", seed=3)[0]
GOLD = extract_program(TASK.answer)
W, D, H = TASK.meta["target_part"]["features"][0]["size"]
WRONG = f"cube([{W}, {D}, {H * 2}]);"


def fn_call(i, name, args):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def reply(calls):
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": calls},
                         "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 10, "completion_tokens": 10}}


class StandInServer:
    """An OpenAI-compatible chat endpoint that plays a scripted agent and keeps every image part it was sent,
    decoded from its data URL."""

    def __init__(self, script):
        self.script, self.images, self.requests = list(script), [], []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        for m in body["messages"]:
            if isinstance(m.get("content"), list):
                for part in m["content"]:
                    if part.get("type") == "image_url":
                        url = part["image_url"]["url"]
                        assert url.startswith("data:image/png;base64,")
                        self.images.append(base64.b64decode(url.split(",", 1)[1]))
        return httpx.Response(200, json=reply([self.script.pop(0)]))


@pytest.mark.slow
def test_generate_observe_correct_with_images_reaching_the_endpoint(sandbox):
    verifier = CadVerifier()
    server = StandInServer([
        fn_call(0, "write_file", {"path": "model.scad", "content": WRONG}),
        fn_call(1, "render", {}),
        fn_call(2, "write_file", {"path": "model.scad", "content": GOLD}),
        fn_call(3, "render", {"path": "model.scad"}),
        fn_call(4, "submit", {"answer": GOLD}),
    ])
    model = ChatEndpointModel("http://stand-in/v1", "m", transport=httpx.MockTransport(server))
    ep = asyncio.run(run_agent_task(model, cad_agent_task(TASK, verifier), sandbox=sandbox))
    assert ep.status is EpisodeStatus.SOLVED, (ep.error, [r.output for t in ep.turns for r in t.results])
    first, second = ep.turns[1].results[0], ep.turns[3].results[0]
    assert "IoU with the target" in first.output and "(needs" in first.output and "(passes)" in second.output
    assert f"size {W:g} x {D:g} x {2 * H:g}" in first.output and "top view" in first.output and "#" in first.output
    assert "IoU around each feature" in first.output
    # the endpoint got each render's PNG intact: the same bytes as an independent render of the same mesh
    assert len(server.images) >= 2
    tool_images = [r.images[0] for t in ep.turns for r in t.results if r.images]
    assert server.images[-1] == tool_images[-1] and server.images[0] == tool_images[0]
    (gold_run,) = asyncio.run(run_openscad(sandbox, [GOLD]))
    gold_mesh = gold_run.mesh
    again = asyncio.run(render_one(sandbox, "model", gold_mesh, RenderSettings()))
    assert again.ok and again.png == tool_images[-1] and again.png != tool_images[0]
    # image parts come after the tool messages they belong to, never between an assistant call and its answer
    roles = [m["role"] for m in server.requests[2]["messages"]]
    assert roles[-2:] == ["tool", "user"] and roles[-3] == "assistant"


def test_a_text_only_endpoint_gets_no_image_parts(sandbox):
    server = StandInServer([fn_call(0, "write_file", {"path": "model.scad", "content": GOLD}), fn_call(1, "render", {}),
                            fn_call(2, "submit", {"answer": GOLD})])
    model = ChatEndpointModel("http://stand-in/v1", "m", transport=httpx.MockTransport(server), images=False)
    ep = asyncio.run(run_agent_task(model, cad_agent_task(TASK, CadVerifier()), sandbox=sandbox))
    assert ep.status is EpisodeStatus.SOLVED and server.images == []
    assert "IoU with the target 1.000 (passes)" in server.requests[-1]["messages"][-1]["content"]


@pytest.mark.slow
def test_render_reports_failures_and_refusals(sandbox):
    tool = render_tool()

    async def go():
        s = await sandbox.asession()
        try:
            ctx = ToolContext(s)
            await s.awrite_file("bad.scad", "cube([1,2,3]")
            await s.awrite_file("peek.scad", 'import("/etc/passwd");')
            await s.awrite_file("d.svg", '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
                                         '<rect width="5" height="5" fill="red"/></svg>')
            await s.awrite_file("blank.svg", '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>')
            return [await tool.run(ctx, ToolCall("render", {"path": p})) for p in
                    ("bad.scad", "peek.scad", "d.svg", "blank.svg", "missing.scad", "../x.scad")]
        finally:
            await s.aclose()

    bad, peek, svg, blank, missing, outside = asyncio.run(go())
    assert not bad.ok and "OpenSCAD failed" in bad.output and "syntax error" in bad.output
    assert not peek.ok and "refused" in peek.output
    assert svg.ok and svg.images and svg.images[0][:8] == b"\x89PNG\r\n\x1a\n"
    assert not blank.ok and "blank" in blank.output
    assert not missing.ok and not outside.ok


@pytest.mark.slow
def test_the_agent_view_of_cad_parts_runs_write_render_submit_episodes(sandbox):
    from posttrain.agent.scripted import ScriptedAgent, call
    from posttrain.agent.spec import spec_of
    from posttrain.tasks.domains import load_domain

    domain = load_domain("cad_agent:parts", turns=2)
    spec = spec_of(domain)
    assert domain.rollouter == "agent" and spec is not None and spec.max_steps == 5
    task = domain.suite(limit=1).tasks[0]
    env_task = spec.load(task)
    assert [t.name for t in env_task.tools] == ["write_file", "read_file", "render", "submit"]
    gold = extract_program(task.answer)
    solved = ScriptedAgent([call("write_file", path="model.scad", content="cube(1);"), call("render"),
                            call("write_file", path="model.scad", content=gold), call("render"),
                            call("submit", answer=gold)])
    ep = asyncio.run(run_agent_task(solved, env_task, sandbox=sandbox, max_steps=spec.max_steps))
    assert ep.status is EpisodeStatus.SOLVED and "IoU with the target" in ep.turns[1].observation
    lazy = ScriptedAgent([call("submit", answer="cube(1);")])
    ep = asyncio.run(run_agent_task(lazy, spec.load(task), sandbox=sandbox))
    assert ep.status is EpisodeStatus.FAILED and ep.verdict.ok and ep.verdict.score < 0.5
    with pytest.raises(TaskFileError, match="turns"):
        load_domain("cad_agent:parts", turns=9)
