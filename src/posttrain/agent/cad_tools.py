"""The `render` tool: look at the workspace's current CAD model (or SVG drawing), as a picture and as text.

Covers: `render_tool(target, settings, pass_iou)`, a `Tool` that renders `model.scad` (any `.scad` file of
the workspace: OpenSCAD exports its mesh, `_cad_render.py` draws four shaded orthographic views to a PNG,
all inside the episode's sandbox session) or an `.svg` file (rasterised by resvg there), and returns the
PNG as an image beside a compact text rendering: size and bounding box, whether it is a closed solid, the
IoU with the task's target (computed here, on the host: the target never enters the sandbox) and coarse
ASCII silhouettes. A multimodal chat endpoint gets the image as an image part (`openai_chat.py`); a
text-only model reads the text. The same tool serves training and run time; and `cad_agent_task`, a
generated CAD task as an `AgentTask` (write, render, correct, submit the program; judged by `cad`), and
`cad_agent_spec` with the `cad_agent:` registry family (`cad_agent:parts`: the same tasks and verifier as
`cad:parts`, run that way in training and evaluation; option `turns`, the write-and-render rounds, 1-5).
Does not cover: the CAD verifier (`rewards/cad.py`), drawing (`rewards/_cad_render.py`).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from posttrain.agent.env import AgentTask
from posttrain.agent.spec import AgentSpec
from posttrain.agent.tools import Tool, ToolContext, ToolOutput, read_file, submit, tool, write_file
from posttrain.rewards.cad import OPENSCAD, RenderSettings, unsafe_reason
from posttrain.rewards.cad_geometry import MeshError, Solid, compare, load_mesh, local_ious
from posttrain.rewards.cad_render import describe, parse_render, render_program
from posttrain.sandbox.result import ExecStatus
from posttrain.tasks.cad import parts_domain
from posttrain.tasks.domains import Domain, register_domain
from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import Task

TargetFn = Callable[[], Awaitable["Solid | None"]]
CAD_AGENT_NOTE = ("Write your OpenSCAD program to model.scad with write_file, call render to see it (a picture "
                  "and, in words, its size and IoU with the target), correct it, then call submit with the "
                  "final program as the answer.")


def render_tool(target: TargetFn | None = None, settings: RenderSettings | None = None, pass_iou: float | None = None,
                openscad_timeout_s: float = 20.0, regions: Callable[[], list[Any]] | None = None) -> Tool:
    """A `render` tool; `target` (when given) yields the task's target solid for the IoU line, `regions` the boxes
    around its features (`CadVerifier.regions`) for the per-feature line."""
    look = settings or RenderSettings()

    @tool(name="render", timeout_s=openscad_timeout_s + 30.0, max_output_chars=4000)
    async def render(ctx: ToolContext, path: str = "model.scad") -> ToolOutput:
        """Render a model (.scad) or drawing (.svg) of the workspace; returns a picture of it and, in words, its size, its
        IoU with the target and coarse silhouettes.

        Args:
            path: the file to render, relative to the workspace
        """
        if path.startswith("/") or ".." in path.split("/"):
            return ToolOutput("render: give a path inside the workspace", ok=False)
        if path.lower().endswith(".svg"):
            code, nonce = render_program(path, look, kind="svg")
            res = await ctx.exec(code=code)
            r = parse_render(res.stdout, nonce)
            if not r.ok:
                return ToolOutput(f"render failed: {r.error}", ok=False)
            return ToolOutput(f"rendered {path} to a {look.size}x{look.size} PNG", images=[r.png])
        program = await ctx.read(path)
        why = unsafe_reason(program)
        if why is not None:
            return ToolOutput(f"render refused: {why}", ok=False)
        code, nonce = render_program("/tmp/render.stl", look)
        cmd = (f"rm -f /tmp/render.stl; timeout -s KILL {openscad_timeout_s:g} {OPENSCAD} -o /tmp/render.stl "
               f"--export-format binstl {shlex.quote(path)} >/tmp/render.log 2>&1 </dev/null "
               f"|| {{ echo 'OpenSCAD failed:'; grep -E 'ERROR|WARNING' /tmp/render.log | head -5; exit 1; }}; "
               f"python3 -c {shlex.quote(code)}")
        res = await ctx.exec(cmd)
        if res.status is ExecStatus.TIMEOUT:
            return ToolOutput(f"render timed out after {ctx.timeout_s:g}s", ok=False)
        r = parse_render(res.stdout, nonce)
        if not r.ok:
            shown = res.stdout.strip() if "OpenSCAD failed" in res.stdout else r.error
            return ToolOutput(f"render failed: {shown[-600:]}", ok=False)
        solid = comparison = None
        local: list[float] = []
        try:
            solid = load_mesh(r.mesh, "stl")
            goal = await target() if target is not None else None
            comparison = compare(solid, goal) if goal is not None else None
            if goal is not None and regions is not None:
                local = local_ious(solid, goal, regions())
        except MeshError as exc:
            return ToolOutput(f"rendered, but the mesh is unusable: {exc}", ok=False, images=[r.png])
        return ToolOutput(f"rendered {path}:\n" + describe(r, solid, comparison, pass_iou, local), images=[r.png])

    return render


def cad_agent_spec(verifier: object, turns: int = 3) -> AgentSpec:
    """The `AgentSpec` of `cad_agent:parts`: each task an episode of `cad_agent_task`, room for `turns` rounds of
    write_file + render and a submit."""
    return AgentSpec(load=lambda task: cad_agent_task(task, verifier), max_steps=2 * turns + 1, max_tokens=512)


@register_domain("cad_agent:", "CAD parts (parts) as generate-observe-correct episodes: write, render, correct, submit")
def _cad_agent_domain(family: str, turns: int = 3, **options: Any) -> Domain:
    """`cad:<family>`'s tasks and verifier, run as agent episodes of at most `turns` write-and-render rounds."""
    if not isinstance(turns, int) or isinstance(turns, bool) or not 1 <= turns <= 5:
        raise TaskFileError(f"cad_agent:{family}: turns must be an integer in 1..5, got {turns!r}")
    d = parts_domain(family, **options)
    meta = {k: v for k, v in d.meta.items() if k != "null_response"}  # an episode that never submits fails anyway
    return dataclasses.replace(d, name=f"cad_agent:{family}", rollouter="agent", agent=cad_agent_spec(d.verifier, turns),
                               description=d.description + f", as episodes of up to {turns} render rounds",
                               meta={**meta, "turns": turns})


def cad_agent_task(task: Task, verifier: object, settings: RenderSettings | None = None) -> AgentTask:
    """A CAD task as a generate-observe-correct episode: write_file, read_file, render, submit; the submitted
    program is judged by `verifier` (a `CadVerifier`, whose target the render tool's IoU line uses too)."""

    async def target() -> Solid | None:
        return await verifier.target(task)  # type: ignore[attr-defined]

    regions = getattr(verifier, "regions", None)
    look = render_tool(target, settings or getattr(verifier, "render", None), task.meta.get("pass_iou"),
                       regions=(lambda: regions(task)) if regions is not None else None)
    tools = (write_file, read_file, look, submit)
    return AgentTask(task.id, f"{task.prompt}\n{CAD_AGENT_NOTE}", answer=task.answer or "", answer_verifier=verifier,
                     meta=dict(task.meta), tools=tools, timeout_s=300.0)
