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
`cad:parts`, run that way in training and evaluation; option `turns`, the write-and-render rounds, 1-5). With
`brief` (the built-in character-level model's form, whose context is a few hundred tokens) the episode is compact
and opens as single-shot does (`spec.Opening`): the brief prompt alone, the first attempt a bare program written
exactly where and how the single-shot program is (to EOS), which the runtime runs as `render(program)` (writes
`model.scad`, runs it; answers one line, `cad_render.brief_observation`); then the two tools listed by signature,
`render(program)` again to correct it and `submit()` to keep what was rendered, `turns` calls after the first
attempt. The verdict is the `cad` verifier's on the workspace's `model.scad` when the episode ends (the program
rendered last), whatever ended it, so a pass is never lost in a copy and an episode whose later call is garbled is
graded on what it built. `correction_steps` draws its oracle episodes for pre-training (`recipes/builtin.py`,
family `cad_agent:parts`): a first attempt that is the gold program (then `submit()`) or the gold with one planted
mistake (`planted_error`: a dimension off, a hole missing, moved, resized, not through, or one too many), the
observation the render tool gives it, then the gold program rendered; `drilled` gives RL the same mistakes as correction
drills (option `planted`: the first attempt given, not sampled); `leaked_target` is the check that an observation
names nothing of the target beyond its size, volume and hole count.
Does not cover: the CAD verifier (`rewards/cad.py`), drawing (`rewards/_cad_render.py`).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import random
import re
import secrets
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from posttrain.agent.env import AgentTask
from posttrain.agent.spec import AgentSpec, Opening
from posttrain.agent.tools import Tool, ToolContext, ToolOutput, read_file, submit, tool, write_file
from posttrain.rewards.cad import RenderSettings, export_command, unsafe_reason
from posttrain.rewards.cad_geometry import MeshError, Solid, compare, load_mesh, local_ious
from posttrain.rewards.cad_parts import Feature, Part, brief_scad, feature_regions, part_from_dict, part_solid
from posttrain.rewards.cad_render import NO_SOLID, brief_observation, describe, parse_render, render_program
from posttrain.sandbox.result import ExecStatus
from posttrain.tasks.cad import parts_domain
from posttrain.tasks.domains import Domain, register_domain
from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import Task, ToolCall

TargetFn = Callable[[], Awaitable["Solid | None"]]
CAD_AGENT_NOTE = ("Write your OpenSCAD program to model.scad with write_file, call render to see it (a picture "
                  "and, in words, its size and IoU with the target), correct it, then call submit with the "
                  "final program as the answer.")


def render_tool(target: TargetFn | None = None, settings: RenderSettings | None = None, pass_iou: float | None = None,
                openscad_timeout_s: float = 20.0, regions: Callable[[], list[Any]] | None = None,
                hard_warnings: bool = True) -> Tool:
    """A `render` tool; `target` (when given) yields the task's target solid for the IoU line, `regions` the boxes
    around its features (`CadVerifier.regions`) for the per-feature line; `hard_warnings` as the verifier's."""
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
        cmd = (f"{export_command(path, openscad_timeout_s, hard_warnings, '/tmp/render.log')} "
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
def _cad_agent_domain(family: str, turns: int = 3, planted: float = 0.0, train_opening: bool = True,
                      **options: Any) -> Domain:
    """`cad:<family>`'s tasks and verifier, run as agent episodes of at most `turns` write-and-render rounds.
    `planted` (brief form only): the share of tasks run as correction drills, their first attempt given with one
    planted mistake (training the correction alone; evaluation figures of the loop use 0). `train_opening` (brief
    form only): false makes the sampled opening program context for the learner, never trained (`Opening.trains`):
    RL then trains the calls after the model's own first attempt (correct it, or keep it) and nothing else."""
    if not isinstance(turns, int) or isinstance(turns, bool) or not 1 <= turns <= 5:
        raise TaskFileError(f"cad_agent:{family}: turns must be an integer in 1..5, got {turns!r}")
    if isinstance(planted, bool) or not isinstance(planted, (int, float)) or not 0.0 <= planted <= 1.0:
        raise TaskFileError(f"cad_agent:{family}: planted must be a number in [0, 1], got {planted!r}")
    if not isinstance(train_opening, bool):
        raise TaskFileError(f"cad_agent:{family}: train_opening must be true or false, got {train_opening!r}")
    brief = bool(options.get("brief", False))
    if not train_opening and not brief:
        raise TaskFileError(f"cad_agent:{family}: train_opening = false needs brief = true (only the brief form opens "
                            "with a sampled program)")
    if planted and not brief:
        raise TaskFileError(f"cad_agent:{family}: planted needs brief = true (a drill's first attempt is the brief "
                            "form's opening program)")
    d = parts_domain(family, **options)
    meta = {k: v for k, v in d.meta.items() if k != "null_response"}  # an episode that never submits fails anyway
    spec = brief_agent_spec(d.verifier, turns, float(planted), train_opening) if brief else cad_agent_spec(d.verifier, turns)
    sampling = dataclasses.replace(d.sampling, max_tokens=spec.max_tokens, stop=("</tool_call>",)) if brief else d.sampling
    return dataclasses.replace(d, name=f"cad_agent:{family}", rollouter="agent", agent=spec, sampling=sampling,
                               description=d.description + f", as episodes of up to {turns} render rounds",
                               meta={**meta, "turns": turns, "planted": float(planted), "train_opening": train_opening})


def cad_agent_task(task: Task, verifier: object, settings: RenderSettings | None = None) -> AgentTask:
    """A CAD task as a generate-observe-correct episode: write_file, read_file, render, submit; the submitted
    program is judged by `verifier` (a `CadVerifier`, whose target the render tool's IoU line uses too)."""

    async def target() -> Solid | None:
        return await verifier.target(task)  # type: ignore[attr-defined]

    regions = getattr(verifier, "regions", None)
    look = render_tool(target, settings or getattr(verifier, "render", None), task.meta.get("pass_iou"),
                       regions=(lambda: regions(task)) if regions is not None else None,
                       hard_warnings=getattr(verifier, "hard_warnings", True))
    tools = (write_file, read_file, look, submit)
    return AgentTask(task.id, f"{task.prompt}\n{CAD_AGENT_NOTE}", answer=task.answer or "", answer_verifier=verifier,
                     meta=dict(task.meta), tools=tools, timeout_s=300.0)


BRIEF_SYSTEM = "Correct the model or submit it. Tools:\n"  # the brief form's system text, after the first render
BRIEF_MODEL = "model.scad"  # the workspace's model: what `render` writes and the verifier judges at the end
BRIEF_MAX_TOKENS = 192  # one brief call: a level-1 gold program is at most ~85 characters and a call's text around it
# 70 (144 cut the longest calls off before their closing tag: the first probe, benchmarks/RESULTS.md)


def brief_render_tool(target: TargetFn | None = None, pass_iou: float = 0.9, openscad_timeout_s: float = 20.0,
                      regions: Callable[[], list[Any]] | None = None, hard_warnings: bool = True) -> Tool:
    """The render tool of the brief form: `render(program)` writes `model.scad`, runs OpenSCAD on it in the
    episode's sandbox session (with the verifier's `hard_warnings`) and answers one line, `brief_observation` of its
    mesh against `target` (no picture: the brief form is for a text-only model whose context holds a few hundred
    tokens)."""

    @tool(name="render", timeout_s=openscad_timeout_s + 30.0, max_output_chars=400)
    async def render(ctx: ToolContext, program: str) -> ToolOutput:
        """Run the program; compare its solid with the target.

        Args:
            program: the OpenSCAD program
        """
        await ctx.write(BRIEF_MODEL, program)  # the workspace's model is the program written last, run or not
        if unsafe_reason(program) is not None:  # never run here; the verifier refuses it too
            return ToolOutput(NO_SOLID)
        nonce = secrets.token_hex(8)
        res = await ctx.exec(f"{export_command(BRIEF_MODEL, openscad_timeout_s, hard_warnings)} "
                             f"&& printf '%s ' {nonce} && base64 -w0 /tmp/render.stl")
        solid = None
        for line in res.stdout.splitlines() if res.status is not ExecStatus.TIMEOUT else []:
            if line.startswith(nonce + " "):
                try:
                    solid = load_mesh(base64.b64decode(line[len(nonce) + 1:]), "stl")
                except (MeshError, ValueError):
                    solid = None
        goal = await target() if target is not None else None
        if goal is None:
            return ToolOutput(NO_SOLID if solid is None or not solid.watertight else "rendered (no target to compare)")
        return ToolOutput(brief_observation(solid, goal, pass_iou, regions() if regions is not None else None))

    return render


@tool(name="submit")
async def submit_rendered() -> ToolOutput:
    """Keep the model rendered last."""
    return ToolOutput("submitted", ends_episode=True)  # the verdict reads the workspace's model.scad, not an argument


def cad_brief_task(task: Task, verifier: object, planted: float = 0.0) -> AgentTask:
    """A brief-form CAD task as a compact episode: `render(program)` and `submit()`, the workspace's `model.scad`
    judged by `verifier` when the episode ends. `planted`: the share of tasks whose first attempt is given, the gold
    with a planted mistake (`drilled`), so the episode's only way to pass is to correct it."""

    async def target() -> Solid | None:
        return await verifier.target(task)  # type: ignore[attr-defined]

    regions = getattr(verifier, "regions", None)
    look = brief_render_tool(target, float(task.meta.get("pass_iou", 0.9)),
                             regions=(lambda: regions(task)) if regions is not None else None,
                             hard_warnings=getattr(verifier, "hard_warnings", True))
    tools = (look, submit_rendered)
    return AgentTask(task.id, task.prompt, answer=task.answer or "", answer_verifier=verifier, meta=dict(task.meta),
                     tools=tools, timeout_s=120.0, answer_file=BRIEF_MODEL,
                     opening=drilled(task, planted))


BRIEF_OPENING = Opening("render", "program")  # the first attempt: a bare program, rendered by the runtime


def brief_agent_spec(verifier: object, turns: int = 1, planted: float = 0.0, train_opening: bool = True) -> AgentSpec:
    """The `AgentSpec` of `cad_agent:parts` with `brief`: the opening program (rendered) and `turns` calls after it,
    each reply at most `BRIEF_MAX_TOKENS` sampled tokens (so an episode samples at most `(turns + 1) *
    BRIEF_MAX_TOKENS`); two malformed calls in a row end it (it is graded on its model all the same). `planted`:
    the share of tasks run as correction drills (`cad_brief_task`); `train_opening`: false leaves the sampled
    opening program out of training (`Opening.trains`)."""
    opening = BRIEF_OPENING if train_opening else dataclasses.replace(BRIEF_OPENING, trains=False)
    return AgentSpec(load=lambda task: cad_brief_task(task, verifier, planted), system=BRIEF_SYSTEM, tool_listing="signature",
                     max_steps=turns + 1, max_format_errors=2, max_tokens=BRIEF_MAX_TOKENS, opening=opening)


def sampled_token_budget(spec: AgentSpec) -> int:
    """The most tokens one episode of `spec` can sample: every step's call at its full `max_tokens`."""
    return spec.max_steps * spec.max_tokens


PLANTED = ("size", "hole_missing", "hole_moved", "radius", "hole_short", "extra_hole")


def planted_error(part: Part, rng: random.Random) -> tuple[str, Part]:
    """`part` with one mistake of the kinds a first attempt makes (a kind in `PLANTED` that applies to it)."""
    box, holes = part.features[0], part.features[1:]
    kind = rng.choice(["size", "size"] + (["hole_missing", "hole_moved", "radius", "hole_short"] if holes else ["extra_hole"]))
    feats = list(part.features)
    if kind == "size":
        k = rng.randrange(3)
        d = box.size[k]
        # off by 15-50% (the IoU threshold of the easy level, 0.9, passes a dimension off by less than ~11%)
        new = max(1.0, d + rng.choice((-1, 1)) * rng.randint(max(1, round(0.15 * d)), max(2, int(d) // 2)))
        size = list(box.size)
        size[k] = new if new != d else d + 1
        feats[0] = dataclasses.replace(box, size=tuple(size))  # type: ignore[arg-type]
    elif kind == "hole_missing":
        feats = feats[:1]
    elif kind == "hole_moved":
        at = list(holes[0].at)
        k = rng.randrange(2)
        at[k] += rng.choice((-1, 1)) * rng.randint(2, 8)
        feats[1] = dataclasses.replace(holes[0], at=tuple(at))  # type: ignore[arg-type]
    elif kind == "radius":
        step = rng.randint(1, 3)
        r = holes[0].r - step if holes[0].r - step >= 1 and rng.random() < 0.5 else holes[0].r + step
        feats[1] = dataclasses.replace(holes[0], r=float(r))
    elif kind == "hole_short":
        feats[1] = dataclasses.replace(holes[0], h=max(1.0, float(int(box.size[2]) // 2)))
    else:
        w, d, _ = box.size
        r = rng.randint(1, max(1, int(min(w, d)) // 4))
        feats.append(Feature("sub", "cyl", (rng.randint(r, max(r, int(w) - r)), rng.randint(r, max(r, int(d) - r)), -1.0),
                             r=float(r), h=box.size[2] + 2, fn=32))
    return kind, Part(tuple(feats))


def correction_steps(task: Task, rng: random.Random, clean: float = 0.4) -> tuple[list[tuple[ToolCall, str]], bool]:
    """An oracle episode of the brief form (one call after the opening, `turns` 1) for pre-training: (the (call, tool
    answer) pairs, whether the first attempt is the gold program). With probability `clean` the opening program is
    the gold (it passes; then `submit()`), else the gold with a planted mistake that fails the task's IoU threshold
    (when 16 draws find none: the clean episode), its observation, then the gold program rendered (the episode's last
    call: its model is graded). Observations are `brief_observation` of the attempt's exact solid, the function the
    render tool calls on OpenSCAD's mesh. A first attempt with a mistake is what the episode corrects, never what
    the base should learn to write: the caller gives its tokens no loss."""
    part = part_from_dict(task.meta["target_part"])
    target, regions = part_solid(part), feature_regions(part)
    gold, pass_iou = task.answer or brief_scad(part), float(task.meta.get("pass_iou", 0.9))
    fixed = brief_observation(target, target, pass_iou, regions)
    if rng.random() >= clean:
        wrong = planted_attempt(task, rng)
        if wrong is not None:
            return [(ToolCall("render", {"program": wrong[0]}), wrong[1]),
                    (ToolCall("render", {"program": gold}), fixed)], False
    return [(ToolCall("render", {"program": gold}), fixed), (ToolCall("submit", {}), "submitted")], True


def planted_attempt(task: Task, rng: random.Random, draws: int = 16) -> tuple[str, str] | None:
    """The brief gold program of `task` with one planted mistake (`planted_error`) that fails its IoU threshold, and
    the render line it gets (`brief_observation` of its exact solid); None when `draws` draws find none (a small
    hole's mistakes can pass the threshold)."""
    part = part_from_dict(task.meta["target_part"])
    target, regions = part_solid(part), feature_regions(part)
    pass_iou = float(task.meta.get("pass_iou", 0.9))
    for _ in range(draws):
        _, wrong = planted_error(part, rng)
        try:
            seen = brief_observation(part_solid(wrong), target, pass_iou, regions)
        except MeshError:
            continue
        if "needs" in seen:
            return brief_scad(wrong), seen
    return None


def drilled(task: Task, share: float) -> str | None:
    """The first attempt a correction drill gives `task` (`cad_agent:parts` option `planted`): for a `share` of
    tasks (chosen by the task's id, the same in every run) the gold with a planted mistake that fails, else None
    (the model writes its own). Memoised: every episode of a group loads its task (~30 ms of mesh booleans a draw)."""
    if share <= 0:
        return None
    part = json.dumps(task.meta["target_part"], sort_keys=True)
    return _drill(task.id, part, float(task.meta.get("pass_iou", 0.9)), float(share))


@functools.lru_cache(maxsize=4096)
def _drill(task_id: str, part: str, pass_iou: float, share: float) -> str | None:
    rng = random.Random(f"planted:{task_id}")
    if rng.random() >= share:
        return None
    wrong = planted_attempt(Task(task_id, "", None, {"target_part": json.loads(part), "pass_iou": pass_iou}), rng)
    return None if wrong is None else wrong[0]


def correction_trace(task: Task, tokenizer: Any, rng: random.Random, turns: int = 1) -> tuple[list[int], list[float]]:
    """A brief-form oracle episode (`correction_steps`) as the runtime builds its ids (`traces.episode_trace`), and
    the loss weight of each: 1 on the calls the model samples, except a first attempt with a planted mistake (0)."""
    from posttrain.agent.traces import episode_trace

    steps, clean = correction_steps(task, rng)
    spec = dataclasses.replace(brief_agent_spec(None, turns), tools=cad_brief_task(task, None).tools)
    ids, mask = episode_trace(spec, task.prompt, steps, tokenizer)
    weight = [float(m) for m in mask]
    if not clean:  # the first call (the mistake) ends where its observation's tokens begin
        first = mask.index(True)
        end = first + mask[first:].index(False)
        weight[first:end] = [0.0] * (end - first)
    return ids, weight


def leaked_target(observation: str, task: Task, attempt: str = "") -> str | None:
    """What an observation of `attempt` (the program rendered) tells of the target beyond its size, volume and hole
    count (None: nothing): the gold program, or a hole's position or radius that the attempt does not hold itself.
    An observation that leaks lets an episode copy the answer instead of correcting its attempt."""
    gold = task.answer or ""
    if gold and gold in observation:
        return "the gold program"
    number = r"[0-9]+(?:\.[0-9]+)?"
    # what the observation may say: the IoU and its threshold, the hole counts, and the target's aggregates after "vs"
    rest = re.sub(rf"IoU {number}|features( {number})+|needs {number}|holes [0-9]+ vs [0-9]+|vs [0-9x.]+", " ", observation)
    said = set(re.findall(number, rest)) - set(re.findall(number, attempt))
    part = part_from_dict(task.meta["target_part"])
    private = {f"{v:g}" for f in part.features[1:] for v in (*f.at[:2], f.r)}
    leaked = sorted(said & private)
    return f"the target's numbers {leaked}" if leaked else None
