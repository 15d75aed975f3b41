"""The `cad:parts` domain: procedurally generated mechanical parts to model in OpenSCAD, judged by volumetric IoU.

Covers: `PartsSource`, a generated source of parts at three levels (1: a block, perhaps with one
through-hole; 2: plates with hole patterns, blocks with a boss, stacked primitives; 3: L-brackets
with holes through both flanges, pockets and patterns), each a `cad_parts.Part` stored in
`meta["target_part"]`, described in words (`prompt`) and drawn (`drawing_svg`: top, front and right
orthographic views with a feature table, as SVG text), with its canonical
OpenSCAD program as the gold `answer`; knobs: `level`, `features` (extra holes at levels 2-3),
`pass_iou` (the tolerance), `derive` (the prompt gives no numbers: they must be read off the
drawing, which the prompt then carries), `brief` (a one-line feature list for a prompt and a one-line gold
program: the built-in character-level model's form, `recipes/builtin.py`); and the `cad:` registry family
(`cad:parts`; its agent view, `cad_agent:parts`, is registered by `agent/cad_tools.py`).
Does not cover: judging (`rewards/cad.py`), rendering (`rewards/cad_render.py`). A JSONL task brings its
own part with `meta.verifier = "cad"` and `target_mesh` (see docs/rewards.md).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from posttrain.rewards.cad_parts import Feature, Part, brief_scad, feature_extent, part_scad
from posttrain.tasks.base import GeneratedSource, Split, split_of
from posttrain.tasks.domains import Domain, SamplingDefaults, register_domain, reject_unknown
from posttrain.types import Task

FN = 32  # cylinder facets: the prompt asks for $fn=32, so a faithful program matches to float precision
NULL_PROGRAM = "cube(1);"  # a trivial program every task must fail (`posttrain tasks validate`)
PASS_IOU = {1: 0.9, 2: 0.95, 3: 0.97}
INSTRUCTIONS = ("Write an OpenSCAD program for this part. Units are mm; +z is up. Use $fn=32 for every cylinder. "
                "Answer with one ```openscad block.")


def _box(x: float, y: float, z: float, dx: float, dy: float, dz: float, op: str = "add") -> Feature:
    return Feature(op, "box", (x, y, z), size=(dx, dy, dz))  # type: ignore[arg-type]


def _hole(x: float, y: float, z: float, r: float, h: float, axis: str = "z") -> Feature:
    return Feature("sub", "cyl", (x, y, z), r=r, h=h, axis=axis, fn=FN)  # type: ignore[arg-type]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _grid(rng: random.Random, n: int, w: int, d: int, margin: int) -> list[tuple[int, int]]:
    """Up to n hole centres on a regular grid inside a w x d face, `margin` from its edges."""
    cols = max(1, min(n, 4))
    rows = max(1, -(-n // cols))
    xs = [margin + round(k * (w - 2 * margin) / max(1, cols - 1)) for k in range(cols)] if cols > 1 else [w // 2]
    ys = [margin + round(k * (d - 2 * margin) / max(1, rows - 1)) for k in range(rows)] if rows > 1 else [d // 2]
    return [(x, y) for y in ys for x in xs][:n]


def _level1(rng: random.Random) -> tuple[list[Feature], list[str]]:
    w, d, h = rng.randint(8, 40), rng.randint(8, 40), rng.randint(3, 20)
    feats = [_box(0, 0, 0, w, d, h)]
    words = [f"a rectangular block {w} x {d} x {h} (x, y, z) with one corner at the origin, filling +x, +y, +z"]
    if rng.random() < 0.5:
        r = rng.randint(1, max(1, min(w, d) // 4))
        cx = rng.randint(r + 2, w - r - 2) if w > 2 * r + 4 else w // 2
        cy = rng.randint(r + 2, d - r - 2) if d > 2 * r + 4 else d // 2
        feats.append(_hole(cx, cy, -1, r, h + 2))
        words.append(f"a vertical through-hole of radius {r} centred at x={cx}, y={cy}")
    return feats, words


def _level2(rng: random.Random, extra: int) -> tuple[list[Feature], list[str]]:
    if rng.random() < 0.5:  # a plate with a hole pattern
        w, d, t = rng.randint(30, 60), rng.randint(20, 40), rng.randint(2, 6)
        n = rng.randint(2, 4) + extra
        r = rng.randint(1, 3)
        pts = _grid(rng, n, w, d, r + 3)
        feats = [_box(0, 0, 0, w, d, t)] + [_hole(x, y, -1, r, t + 2) for x, y in pts]
        words = [f"a plate {w} x {d} x {t} (x, y, z) with one corner at the origin",
                 f"{_count(len(pts), 'vertical through-hole')} of radius {r} centred at "
                 + ", ".join(f"({x}, {y})" for x, y in pts)]
        return feats, words
    w, d, h = rng.randint(20, 40), rng.randint(20, 40), rng.randint(3, 10)  # a block with a boss on top
    r, bh = rng.randint(3, max(3, min(w, d) // 2 - 2)), rng.randint(3, 12)
    cx, cy = w // 2, d // 2
    feats = [_box(0, 0, 0, w, d, h), Feature("add", "cyl", (cx, cy, h), r=r, h=bh, fn=FN)]
    words = [f"a block {w} x {d} x {h} (x, y, z) with one corner at the origin",
             f"a cylindrical boss of radius {r} and height {bh} standing on its top face, centred at x={cx}, y={cy}"]
    hr = max(1, r // 2)
    if hr < r:
        feats.append(_hole(cx, cy, -1, hr, h + bh + 2))
        words.append(f"a vertical through-hole of radius {hr} through block and boss on the same axis")
    for k, (x, y) in enumerate(_grid(rng, extra, w, d, 3)):
        if abs(x - cx) > r + 2 or abs(y - cy) > r + 2:
            feats.append(_hole(x, y, -1, 1, h + 2))
            words.append(f"extra hole {k + 1}: a vertical through-hole of radius 1 at ({x}, {y})")
    return feats, words


def _level3(rng: random.Random, extra: int) -> tuple[list[Feature], list[str]]:
    w, d, t = rng.randint(30, 60), rng.randint(20, 40), rng.randint(3, 6)  # an L-bracket: base plate + back flange
    fh = rng.randint(20, 40)
    feats = [_box(0, 0, 0, w, d, t), _box(0, 0, t, w, t, fh - t)]
    words = [f"an L-bracket: a base plate {w} x {d} x {t} (x, y, z) with one corner at the origin",
             f"a vertical flange along the back edge (y from 0 to {t}) rising to a total height of {fh}"]
    r = rng.randint(1, 3)
    n_base = rng.randint(1, 3) + extra
    base_pts = [(x, y + t) for x, y in _grid(rng, n_base, w, d - t, r + 3)]
    feats += [_hole(x, y, -1, r, t + 2) for x, y in base_pts]
    words.append(f"{_count(len(base_pts), 'vertical through-hole')} of radius {r} in the base plate at "
                 + ", ".join(f"(x={x}, y={y})" for x, y in base_pts))
    n_fl = rng.randint(1, 3)
    fz = t + (fh - t) // 2
    fl_xs = [round(w * (k + 1) / (n_fl + 1)) for k in range(n_fl)]
    feats += [_hole(x, -1, fz, r, t + 2, axis="y") for x in fl_xs]
    words.append(f"{_count(n_fl, 'horizontal through-hole')} of radius {r} through the flange along y, at z={fz} and x = "
                 + ", ".join(str(x) for x in fl_xs))
    if rng.random() < 0.5:
        pw, pd = rng.randint(4, max(4, w // 4)), rng.randint(3, max(3, (d - t) // 4))
        px, py = w - pw - 2, d - pd - 2
        feats.append(_box(px, py, t - 1, pw, pd, 2, op="sub"))
        words.append(f"a rectangular pocket 1 deep in the top of the base plate, {pw} x {pd}, corner at x={px}, y={py}")
    return feats, words


BRIEF_HEAD = "OpenSCAD part, $fn=32: "


def _vec(v: tuple[float, ...]) -> str:
    return "[" + ",".join(_fmt(x) for x in v) + "]"


def brief_spec(part: Part) -> str:
    """The part as a one-line feature list, in the order the program applies them: `cube [38,12,13]; minus
    cylinder r=1 h=15 at [26,7,-1]` (every number given: the prompt of the built-in model's easy level)."""
    out = []
    for f in part.features:
        where = "" if tuple(f.at) == (0, 0, 0) else f" at {_vec(f.at)}"
        what = f"cube {_vec(f.size)}" if f.shape == "box" else \
            f"cylinder r={_fmt(f.r)} h={_fmt(f.h)}" + ("" if f.axis == "z" else f" along {f.axis}")
        out.append(("minus " if f.op == "sub" else "") + what + where)
    return "; ".join(out)


def _fmt(x: float) -> str:
    return f"{x:g}"


def drawing_svg(part: Part, view_px: int = 180) -> str:
    """Top (x right, y up), front (x right, z up) and right (y right, z up) orthographic views with a feature
    table: material solid, removed features dashed, every dimension in the table."""
    feats = part.features
    lo = [min(feature_extent(f)[0][k] for f in feats) for k in range(3)]
    hi = [max(feature_extent(f)[1][k] for f in feats) for k in range(3)]
    span = max(max(h - lo_ for lo_, h in zip(lo, hi)), 1.0)
    s = view_px / span
    views = [("top", 0, 1), ("front", 0, 2), ("right", 1, 2)]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * (view_px + 40)}" height="{view_px + 60 + 14 * len(feats)}"'
           ' font-family="monospace" font-size="10">', '<rect width="100%" height="100%" fill="white"/>']
    for v, (name, a, b) in enumerate(views):
        ox, oy = 20 + v * (view_px + 40), 20 + view_px
        out.append(f'<text x="{ox}" y="14">{name}</text>')
        for f in feats:
            lo3, hi3 = feature_extent(f)
            x0, x1, y0, y1 = lo3[a], hi3[a], lo3[b], hi3[b]
            style = 'fill="none" stroke="black"' + ('' if f.op == "add" else ' stroke-dasharray="3,2"')
            px, py = ox + (x0 - lo[a]) * s, oy - (y1 - lo[b]) * s
            if f.shape == "cyl" and "xyz"[3 - a - b] == f.axis:  # seen end-on: a circle
                cx, cy = px + (x1 - x0) * s / 2, py + (y1 - y0) * s / 2
                out.append(f'<circle cx="{cx:.2f}" cy="{cy:.2f}" r="{f.r * s:.2f}" {style}/>')
            else:
                out.append(f'<rect x="{px:.2f}" y="{py:.2f}" width="{(x1 - x0) * s:.2f}" height="{(y1 - y0) * s:.2f}" {style}/>')
    for k, f in enumerate(feats):
        if f.shape == "box":
            what = f"box {'x'.join(_fmt(v) for v in f.size)} corner ({', '.join(_fmt(v) for v in f.at)})"
        else:
            what = f"cylinder r={_fmt(f.r)} h={_fmt(f.h)} axis {f.axis} base centre ({', '.join(_fmt(v) for v in f.at)})"
        out.append(f'<text x="20" y="{view_px + 44 + 14 * k}">{k + 1}. {"add" if f.op == "add" else "cut"} {what}</text>')
    out.append("</svg>")
    return "\n".join(out)


@dataclass
class PartsSource(GeneratedSource):
    """Generated parts at one `level` (1-3)."""

    level: int = 1
    features: int = 0  # extra holes at levels 2-3
    pass_iou: float | None = None  # None: the level's default (PASS_IOU)
    derive: bool = False  # the prompt gives no dimensions: read them off the drawing
    brief: bool = False  # a one-line feature list and a one-line gold program (the built-in model's form)
    held_out_fraction: float = 0.15

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise ValueError(f"level must be 1, 2 or 3, got {self.level!r}")
        if not isinstance(self.features, int) or not 0 <= self.features <= 8:
            raise ValueError(f"features must be an integer in 0..8, got {self.features!r}")
        if self.pass_iou is not None and not 0.5 <= self.pass_iou <= 1.0:
            raise ValueError(f"pass_iou must be in [0.5, 1], got {self.pass_iou!r}")
        if not isinstance(self.derive, bool):
            raise ValueError(f"derive must be true or false, got {self.derive!r}")
        if not isinstance(self.brief, bool):
            raise ValueError(f"brief must be true or false, got {self.brief!r}")
        if self.brief and self.derive:
            raise ValueError("brief and derive exclude each other (a brief prompt gives every number)")
        if not 0 < self.held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must be in (0, 1), got {self.held_out_fraction}")

    @property
    def name(self) -> str:
        return f"cad-parts-l{self.level}" + (f"-f{self.features}" if self.features else "") + ("-derive" if self.derive else "") \
            + ("-brief" if self.brief else "")

    def _draw(self, rng: random.Random) -> Task:
        if self.level == 1:
            feats, words = _level1(rng)
        elif self.level == 2:
            feats, words = _level2(rng, self.features)
        else:
            feats, words = _level3(rng, self.features)
        part = Part(tuple(feats))
        key = json.dumps(part.to_dict(), sort_keys=True)
        drawing = drawing_svg(part)
        if self.brief:
            prompt = f"{BRIEF_HEAD}{brief_spec(part)}\n"
        elif self.derive:
            prompt = f"{INSTRUCTIONS}\nThe part is drawn below (three orthographic views and a feature table); " \
                     f"read every dimension off the drawing.\n```svg\n{drawing}\n```\n"
        else:
            prompt = f"{INSTRUCTIONS}\nThe part: " + "; ".join(words) + ".\n"
        digest = hashlib.blake2b(key.encode(), digest_size=6).hexdigest()
        return Task(
            id=f"{self.name}:{digest}",
            prompt=prompt,
            answer=brief_scad(part) if self.brief else f"```openscad\n{part_scad(part)}```",
            meta={"family": "cad:parts", "level": self.level, "split_key": key, "verifier": "cad",
                  "target_part": part.to_dict(), "pass_iou": self.pass_iou or PASS_IOU[self.level],
                  "drawing_svg": drawing, "spec": "; ".join(words), "null_response": NULL_PROGRAM},
        )

    def split_of(self, task: Task) -> Split:
        return split_of(task.meta["split_key"], self.held_out_fraction)


_OPTIONS = ("level", "features", "pass_iou", "derive", "brief", "held_out_fraction", "limit", "seed")


@register_domain("cad:", "CAD parts (parts) to model in OpenSCAD, judged by volumetric IoU with the target solid")
def parts_domain(family: str, **options: Any) -> Domain:
    """`cad:<family>` (family: parts) with its options checked; every problem is a one-line `TaskFileError`."""
    from posttrain.rewards.cad import CadVerifier
    from posttrain.tasks.jsonl import TaskFileError

    reject_unknown(f"cad:{family}", options, _OPTIONS)
    if family != "parts":
        raise TaskFileError(f"unknown CAD family {family!r}; the families are: parts")
    try:
        source = PartsSource(level=options.get("level", 1), features=options.get("features", 0),
                             pass_iou=options.get("pass_iou"), derive=options.get("derive", False),
                             brief=options.get("brief", False),
                             held_out_fraction=options.get("held_out_fraction", 0.15))
    except ValueError as exc:
        raise TaskFileError(f"cad:{family}: {exc}") from None
    limit, seed = options.get("limit", 200), options.get("seed", 0)
    return Domain(
        f"cad:{family}",
        source,
        CadVerifier(),
        evaluation=lambda n, s: source.take(200 if n is None else n, "held_out", seed=s),
        sampling=SamplingDefaults(max_tokens=(160 if source.brief else 384) * source.level),
        description=f"held-out level-{source.level} CAD parts (OpenSCAD, IoU >= {source.pass_iou or PASS_IOU[source.level]})",
        meta={"family": family, "level": source.level, "features": source.features, "derive": source.derive,
              "brief": source.brief, "limit": limit, "seed": seed, "null_response": NULL_PROGRAM},
        eval_limit=limit,
        eval_seed=seed,
    )
