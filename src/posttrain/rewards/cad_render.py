"""Renders of CAD models and SVG drawings made in the sandbox: the program that draws them and what comes back.

Covers: `render_program` (the sandboxed Python program: `_cad_render.py`'s source plus one call, reading
a file already in the sandbox), `parse_render` (its nonce-tagged reply as a `Render`: PNG bytes, the
mesh, bounding box, ASCII silhouettes, or the error), `describe` (the compact text a text-only model
reads instead of the picture: size, bounding box, closedness, IoU with the target, silhouettes), `brief_observation`
(the one line the built-in character-level model reads: IoU, and size, volume and hole count beside the target's) and
`render_batch` / `render_one` (one-shot sandbox renders of mesh bytes or SVG text, for benchmarks and checks).
Does not cover: running OpenSCAD (`cad.py`), the agent tool (`agent/cad_tools.py`).
"""

from __future__ import annotations

import base64
import functools
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.rewards.cad import RenderSettings
from posttrain.rewards.cad_geometry import Comparison, Solid

RENDER_SCRIPT = Path(__file__).with_name("_cad_render.py")


@functools.cache
def _script_source() -> str:
    return RENDER_SCRIPT.read_text()


@dataclass(frozen=True)
class Render:
    ok: bool
    error: str = ""
    png: bytes = b""
    mesh: bytes = b""  # the STL that was drawn (models only)
    bbox: tuple[float, ...] = ()
    faces: int = 0
    silhouettes: dict[str, str] = field(default_factory=dict)  # view -> rows of '#' and '.'


def render_program(path: str, settings: RenderSettings, kind: str = "model") -> tuple[str, str]:
    """(the Python program that renders the file at `path` in the sandbox, the nonce its reply carries)."""
    nonce = secrets.token_hex(12)
    request = {"kind": kind, "path": path, "size": settings.size, "views": list(settings.views),
               "cols": settings.ascii_cols, "rows": settings.ascii_rows, "nonce": nonce}
    return _script_source() + f"\nmain(json.loads({json.dumps(json.dumps(request))}))\n", nonce


def parse_render(stdout: str, nonce: str) -> Render:
    """The reply on the line tagged with `nonce` (anything else on stdout is ignored)."""
    for line in stdout.splitlines():
        if line.startswith(nonce + " "):
            try:
                d: dict[str, Any] = json.loads(line[len(nonce) + 1:])
                if not d.get("ok"):
                    return Render(False, str(d.get("error", "render failed")))
                return Render(True, png=base64.b64decode(d.get("png_b64", "")), mesh=base64.b64decode(d.get("mesh_b64", "")),
                              bbox=tuple(d.get("bbox", ())), faces=int(d.get("faces", 0)),
                              silhouettes={k: d[k] for k in ("top", "front") if isinstance(d.get(k), str)})
            except (ValueError, TypeError) as exc:
                return Render(False, f"unreadable render reply: {exc}")
    return Render(False, "the renderer gave no reply")


def _g(x: float) -> str:
    return f"{round(x, 3):g}"


def describe(r: Render, solid: Solid | None, comparison: Comparison | None, pass_iou: float | None,
             feature_ious: list[float] | None = None) -> str:
    """What a text-only model reads in place of the picture."""
    if not r.ok:
        return f"render failed: {r.error}"
    b = r.bbox
    lines = [f"size {_g(b[3] - b[0])} x {_g(b[4] - b[1])} x {_g(b[5] - b[2])} (x, y, z); "
             f"bbox x {_g(b[0])}..{_g(b[3])}, y {_g(b[1])}..{_g(b[4])}, z {_g(b[2])}..{_g(b[5])}; {r.faces} faces"]
    if solid is not None:
        lines.append(f"closed solid, volume {solid.volume:.4g}" if solid.watertight else f"NOT a closed solid: {solid.why}")
    if comparison is not None:
        verdict = "" if pass_iou is None else (" (passes)" if comparison.iou >= pass_iou else f" (needs {pass_iou:g})")
        lines.append(f"IoU with the target {comparison.iou:.3f}{verdict}; volume {comparison.got_volume:.4g} vs target "
                     f"{comparison.target_volume:.4g}; bbox overlap {comparison.bbox:.3f}")
    if feature_ious:
        shown = ", ".join(f"{k + 1}: {v:.3f}" for k, v in enumerate(feature_ious))
        lines.append(f"IoU around each feature of the target: {shown}")
    for view, axes in (("top", "x right, y up"), ("front", "x right, z up")):
        if r.silhouettes.get(view):
            lines.append(f"{view} view ({axes}):\n{r.silhouettes[view]}")
    return "\n".join(lines)


NO_SOLID = "no valid solid"  # the brief observation of a program that made no closed solid (whatever OpenSCAD said)


def _size(b: tuple[float, ...]) -> str:
    return "x".join(f"{round(b[k + 3] - b[k], 1):g}" for k in range(3))


def holes(solid: Solid) -> int:
    """Through-holes of a closed solid: its genus (a block with one vertical through-hole has 1)."""
    return int(solid.manifold.genus()) if solid.manifold is not None else 0


def brief_observation(got: Solid | None, target: Solid, pass_iou: float, regions: list[Any] | None = None) -> str:
    """The render as one line for the built-in model (`cad_agent:parts` with `brief`). It passes exactly when the `cad`
    verifier would pass the solid: a closed solid whose IoU with the target, and whose IoU inside the box around each
    of the target's features (`regions`, `CadVerifier.regions`), are at least `pass_iou`. When it fails, the line says
    what differs in terms the program can act on: each feature's IoU (a hole moved or resized), the size (a dimension
    off), the volume and the number of through-holes (a hole missing, extra or not through), each beside the
    target's. It names aggregates of the target's solid only, never a feature's position or the target's program
    (`agent/cad_tools.leaked_target` checks that); `got` None or open: `NO_SOLID`. Pre-training's correction episodes
    and the render tool both call this, on the part's exact solid and on OpenSCAD's mesh, so the line a model learns
    is the line it reads at run time."""
    from posttrain.rewards.cad_geometry import compare, local_ious

    if got is None or not got.watertight:
        return NO_SOLID
    iou = compare(got, target).iou
    local = local_ious(got, target, regions) if regions else []
    if min([iou, *local]) >= pass_iou:
        return f"IoU {iou:.2f}, passes"
    features = f", features {' '.join(f'{v:.2f}' for v in local)}" if local else ""
    return (f"IoU {iou:.2f}{features}, needs {pass_iou:g}; size {_size(got.bbox)} vs {_size(target.bbox)}; volume "
            f"{got.volume:.0f} vs {target.volume:.0f}; holes {holes(got)} vs {holes(target)}")


async def render_batch(sandbox: Any, files: list[tuple[str, bytes | str]], settings: RenderSettings,
                       timeout_s: float = 120.0) -> list[Render] | None:
    """Many renders in one sandbox execution: each `(kind, data)` is a model's STL bytes ("model") or SVG text
    ("svg"); None when the execution ran out of time (a render hung: the caller renders those alone)."""
    from posttrain.sandbox import ExecStatus, Limits

    calls, nonces, inputs = [], [], {}
    for k, (kind, data) in enumerate(files):
        name = f"in{k}.{'svg' if kind == 'svg' else 'stl'}"
        inputs[name] = data
        code, nonce = render_program(name, settings, kind)
        calls.append(code[len(_script_source()):])
        nonces.append(nonce)
    res = await sandbox.arun(code=_script_source() + "".join(calls), files=inputs, prefork=False,
                             limits=Limits(wall_s=timeout_s, cpu_s=timeout_s, memory_mb=1024, output_bytes=64 << 20,
                                           disk_mb=256))
    if res.status is ExecStatus.SANDBOX_ERROR:
        raise RuntimeError(f"sandbox failed: {res.error}")
    if res.status in (ExecStatus.TIMEOUT, ExecStatus.CPU_LIMIT):
        return None
    out = [parse_render(res.stdout, n) for n in nonces]
    why = f" (the renderer ended: {res.status.value}: {res.stderr.strip()[-200:]})" if not res.ok else ""
    return [r if r.ok or not why else Render(False, r.error + why) for r in out]


async def render_one(sandbox: Any, kind: str, data: bytes | str, settings: RenderSettings,
                     timeout_s: float = 20.0) -> Render:
    """One render in the sandbox (`kind` "model": STL bytes; "svg": SVG text), the program the render tool runs."""
    got = await render_batch(sandbox, [(kind, data)], settings, timeout_s)
    return got[0] if got is not None else Render(False, f"render ran past {timeout_s:g} s")
