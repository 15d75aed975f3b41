"""Parts as feature lists: the target geometry of generated CAD tasks, built directly in manifold3d.

Covers: `Feature` (a box or a cylinder, added or subtracted, at a position; cylinders along z, x
or y) and `Part` (features applied in order: adds are unions, subs differences), their JSON form
(`Part.to_dict` / `part_from_dict`, what a task stores in `meta["target_part"]`), `part_solid` (the
exact solid, built with manifold3d primitives and never through OpenSCAD, so a gold program
passing is evidence that it and the specification agree), and `part_scad` (the canonical
OpenSCAD program for a part: the gold answer; `brief_scad` the same without whitespace or identity
translations, the gold of the built-in model's brief prompts), `feature_regions` (the box around each feature, for local IoU).
Does not cover: drawing parts (`tasks/cad.py`), judging programs (`cad.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from posttrain.rewards.cad_geometry import MeshError, Solid, require_cad

Shape = Literal["box", "cyl"]
Op = Literal["add", "sub"]
Axis = Literal["z", "x", "y"]
# OpenSCAD rotations that take a z-axis cylinder (base at the origin) to one along +x or +y; manifold3d's
# `rotate` applies x, then y, then z degrees, as OpenSCAD's does, so both produce the same vertices.
AXIS_ROTATION: dict[str, tuple[int, int, int]] = {"z": (0, 0, 0), "x": (0, 90, 0), "y": (-90, 0, 0)}


@dataclass(frozen=True)
class Feature:
    """A box (`size` = [dx, dy, dz], `at` its minimum corner) or a cylinder (`r`, `h`, `at` the centre of its base,
    along `axis`, with `fn` facets as OpenSCAD's `$fn`), added to or subtracted from what came before."""

    op: Op
    shape: Shape
    at: tuple[float, float, float]
    size: tuple[float, float, float] = (0.0, 0.0, 0.0)
    r: float = 0.0
    h: float = 0.0
    axis: Axis = "z"
    fn: int = 32

    def to_dict(self) -> dict[str, Any]:
        if self.shape == "box":
            return {"op": self.op, "shape": "box", "at": list(self.at), "size": list(self.size)}
        return {"op": self.op, "shape": "cyl", "at": list(self.at), "r": self.r, "h": self.h, "axis": self.axis,
                "fn": self.fn}


@dataclass(frozen=True)
class Part:
    features: tuple[Feature, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"features": [f.to_dict() for f in self.features]}


def _triple(value: Any, what: str) -> tuple[float, float, float]:
    if not (isinstance(value, (list, tuple)) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value)):
        raise MeshError(f"target_part: {what} must be three numbers, got {value!r}")
    return (float(value[0]), float(value[1]), float(value[2]))


def part_from_dict(d: Any) -> Part:
    """A `Part` from its JSON form; MeshError naming the bad field."""
    if not isinstance(d, dict) or not isinstance(d.get("features"), list) or not d["features"]:
        raise MeshError("target_part must be {\"features\": [...]} with at least one feature")
    out = []
    for i, f in enumerate(d["features"]):
        if not isinstance(f, dict) or f.get("op") not in ("add", "sub") or f.get("shape") not in ("box", "cyl"):
            raise MeshError(f"target_part feature {i}: needs op add|sub and shape box|cyl, got {f!r}")
        at = _triple(f.get("at"), f"feature {i} at")
        if f["shape"] == "box":
            size = _triple(f.get("size"), f"feature {i} size")
            if min(size) <= 0:
                raise MeshError(f"target_part feature {i}: box sizes must be > 0, got {size}")
            out.append(Feature(f["op"], "box", at, size=size))
        else:
            r, h, axis, fn = f.get("r"), f.get("h"), f.get("axis", "z"), f.get("fn", 32)
            if not all(isinstance(v, (int, float)) and v > 0 for v in (r, h)) or axis not in AXIS_ROTATION \
                    or not isinstance(fn, int) or not 3 <= fn <= 256:
                raise MeshError(f"target_part feature {i}: a cylinder needs r > 0, h > 0, axis z|x|y, fn 3..256")
            out.append(Feature(f["op"], "cyl", at, r=float(f["r"]), h=float(f["h"]), axis=axis, fn=fn))
    if out[0].op != "add":
        raise MeshError("target_part: the first feature must add material")
    return Part(tuple(out))


def _feature_manifold(f: Feature) -> Any:
    import manifold3d

    if f.shape == "box":
        return manifold3d.Manifold.cube(list(f.size)).translate(list(f.at))
    m = manifold3d.Manifold.cylinder(f.h, f.r, f.r, f.fn)
    if f.axis != "z":
        m = m.rotate(list(AXIS_ROTATION[f.axis]))
    return m.translate(list(f.at))


def part_solid(part: Part) -> Solid:
    """The part's exact solid (manifold3d booleans of its features, in order)."""
    require_cad()
    import numpy as np

    acc = None
    for f in part.features:
        m = _feature_manifold(f)
        acc = m if acc is None else (acc + m if f.op == "add" else acc - m)
    assert acc is not None
    mesh = acc.to_mesh()
    verts = np.asarray(mesh.vert_properties, np.float64)[:, :3]  # [V, 3]
    faces = np.asarray(mesh.tri_verts, np.int64)  # [F, 3]
    if acc.is_empty():
        raise MeshError("target_part is empty (its subtractions remove everything)")
    b = acc.bounding_box()
    return Solid(verts, faces, acc, float(acc.volume()), tuple(float(x) for x in b))  # type: ignore[arg-type]


def feature_regions(part: Part) -> list[Any]:
    """Per feature, the box around it (its bounding box grown by its radius, or by a quarter of a box's smallest
    side, at least 1) as a manifold3d solid: where `cad.py` compares the response with the target locally, so a
    small hole counts as much as the plate it is cut from."""
    import manifold3d

    out = []
    for f in part.features:
        lo, hi = feature_extent(f)
        grow = f.r if f.shape == "cyl" else max(1.0, min(f.size) / 4)
        lo3 = [v - grow for v in lo]
        out.append(manifold3d.Manifold.cube([h - lo_ + 2 * grow for lo_, h in zip(lo, hi)]).translate(lo3))
    return out


def feature_extent(f: Feature) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """The feature's axis-aligned bounding box (min corner, max corner)."""
    x, y, z = f.at
    if f.shape == "box":
        return (x, y, z), (x + f.size[0], y + f.size[1], z + f.size[2])
    r, h = f.r, f.h
    if f.axis == "z":
        return (x - r, y - r, z), (x + r, y + r, z + h)
    if f.axis == "x":
        return (x, y - r, z - r), (x + h, y + r, z + r)
    return (x - r, y, z - r), (x + r, y + h, z + r)


def _num(x: float) -> str:
    return f"{x:g}"


def _vec(v: tuple[float, float, float]) -> str:
    return "[" + ", ".join(_num(x) for x in v) + "]"


def feature_scad(f: Feature) -> str:
    """One feature as an OpenSCAD statement."""
    if f.shape == "box":
        return f"translate({_vec(f.at)}) cube({_vec(f.size)});"
    rx, ry, rz = AXIS_ROTATION[f.axis]
    rot = "" if f.axis == "z" else f"rotate({_vec((float(rx), float(ry), float(rz)))}) "
    return f"translate({_vec(f.at)}) {rot}cylinder(h={_num(f.h)}, r={_num(f.r)}, $fn={f.fn});"


def _block(name: str, lines: list[str]) -> str:
    inner = "\n".join("  " + line for text in lines for line in text.splitlines())
    return f"{name}() {{\n{inner}\n}}"


def part_scad(part: Part) -> str:
    """The canonical program: `difference() { union() { adds } subs }` when the adds come first (the generated
    parts), else each feature applied to what came before, as nested booleans."""
    feats = list(part.features)
    n_add = next((i for i, f in enumerate(feats) if f.op == "sub"), len(feats))
    if all(f.op == "sub" for f in feats[n_add:]):
        adds = [feature_scad(f) for f in feats[:n_add]]
        body = adds[0] if len(adds) == 1 else _block("union", adds)
        subs = [feature_scad(f) for f in feats[n_add:]]
        return (_block("difference", [body, *subs]) if subs else body) + "\n"
    body = feature_scad(feats[0])
    for f in feats[1:]:
        body = _block("union" if f.op == "add" else "difference", [body, feature_scad(f)])
    return body + "\n"


def brief_scad(part: Part) -> str:
    """`part_scad` on one line without whitespace or `translate([0,0,0])`: the same solid in ~half the characters
    (what the built-in character-level model writes: `tasks/cad.py`, option `brief`)."""
    import re

    return re.sub(r"\s+", "", part_scad(part)).replace("translate([0,0,0])", "")
