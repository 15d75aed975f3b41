"""Solid geometry for the CAD verifier: meshes loaded with trimesh, compared by exact booleans in manifold3d.

Covers: `load_mesh(data, fmt)` (STL binary or ASCII, OBJ, OFF bytes -> a `Solid`: a manifold3d
`Manifold` when the mesh is a closed 2-manifold, with its volume and bounding box),
`compare(got, target)` -> `Comparison` (volumetric IoU = vol(A and B) / vol(A or B) computed with
manifold3d's exact mesh booleans, not voxels or samples; the volume ratio; the bounding-box
agreement; watertightness), `local_ious` (the same IoU inside given regions), and
`mesh_from_task_meta` (a JSONL task's own target: a path or inline text/base64).
Does not cover: running CAD programs (`cad.py`), drawing meshes (`_cad_render.py`).
"""

from __future__ import annotations

import base64
import functools
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posttrain.errors import UserError

MESH_FORMATS = ("stl", "obj", "off")


class MeshError(UserError, ValueError):
    """A mesh that cannot be read, or a task whose target mesh is unusable."""


@functools.cache
def require_cad() -> None:
    """manifold3d and trimesh, or `MissingExtraError` naming the `cad` extra."""
    from posttrain.extras import require

    require("manifold3d", "cad", "CAD verification")
    require("trimesh", "cad", "CAD verification")


@dataclass(frozen=True)
class Solid:
    """A loaded mesh. `manifold` is None when the mesh is not a closed 2-manifold (`why` says what is wrong)."""

    vertices: np.ndarray  # [V, 3] float64
    faces: np.ndarray  # [F, 3] int64
    manifold: Any  # manifold3d.Manifold | None
    volume: float
    bbox: tuple[float, float, float, float, float, float]  # xmin, ymin, zmin, xmax, ymax, zmax
    why: str = ""

    @property
    def watertight(self) -> bool:
        return self.manifold is not None

    @property
    def size(self) -> tuple[float, float, float]:
        b = self.bbox
        return (b[3] - b[0], b[4] - b[1], b[5] - b[2])


def load_mesh(data: bytes, fmt: str = "stl", max_faces: int = 500_000) -> Solid:
    """A `Solid` from mesh file bytes; MeshError when the bytes are not a mesh (an empty one included)."""
    require_cad()
    import manifold3d
    import trimesh

    if fmt not in MESH_FORMATS:
        raise MeshError(f"mesh format must be one of {', '.join(MESH_FORMATS)}, got {fmt!r}")
    try:
        tm = trimesh.load(io.BytesIO(data), file_type=fmt, force="mesh", process=True)
    except Exception as exc:  # noqa: BLE001 - trimesh raises many kinds on malformed input
        raise MeshError(f"not a readable {fmt.upper()} mesh: {type(exc).__name__}: {str(exc)[:200]}") from None
    faces = np.asarray(getattr(tm, "faces", np.zeros((0, 3))), np.int64)  # [F, 3]
    verts = np.asarray(getattr(tm, "vertices", np.zeros((0, 3))), np.float64)  # [V, 3]
    if len(faces) == 0:
        raise MeshError("the mesh is empty (the program produced no 3D geometry)")
    if len(faces) > max_faces:
        raise MeshError(f"the mesh has {len(faces)} faces, over the {max_faces} cap")
    if not np.isfinite(verts).all():
        raise MeshError("the mesh has non-finite coordinates")
    lo, hi = verts.min(axis=0), verts.max(axis=0)
    bbox = (float(lo[0]), float(lo[1]), float(lo[2]), float(hi[0]), float(hi[1]), float(hi[2]))
    man = manifold3d.Manifold(manifold3d.Mesh(vert_properties=verts.astype(np.float32), tri_verts=faces.astype(np.uint32)))
    status = man.status()
    if status != manifold3d.Error.NoError or man.is_empty():
        why = "empty" if status == manifold3d.Error.NoError else str(status).split(".")[-1]
        return Solid(verts, faces, None, abs(float(getattr(tm, "volume", 0.0))), bbox, f"not a closed solid ({why})")
    return Solid(verts, faces, man, float(man.volume()), bbox)


@dataclass(frozen=True)
class Comparison:
    """How a solid matches the target. Every part is in [0, 1] (1: identical)."""

    iou: float  # vol(got and target) / vol(got or target), exact booleans
    volume: float  # min(v_got, v_target) / max(v_got, v_target)
    bbox: float  # IoU of the two axis-aligned bounding boxes
    watertight: float  # 1.0 when the response is a closed 2-manifold
    got_volume: float
    target_volume: float

    def breakdown(self) -> dict[str, float]:
        return {"iou": self.iou, "volume": self.volume, "bbox": self.bbox, "watertight": self.watertight}


def _box_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    lo = np.maximum(a[:3], b[:3])
    hi = np.minimum(a[3:], b[3:])
    inter = float(np.prod(np.clip(hi - lo, 0.0, None)))
    va = float(np.prod(np.subtract(a[3:], a[:3])))
    vb = float(np.prod(np.subtract(b[3:], b[:3])))
    union = va + vb - inter
    return inter / union if union > 0 else 0.0


def compare(got: Solid, target: Solid) -> Comparison:
    """The IoU and the breakdown parts; a response that is not a closed solid has IoU 0 (its volume is undefined)."""
    if target.manifold is None:
        raise MeshError(f"the target mesh is {target.why}")
    vt = target.volume
    vg = got.volume
    vol = min(vg, vt) / max(vg, vt) if max(vg, vt) > 0 else 0.0
    box = _box_iou(got.bbox, target.bbox)
    if got.manifold is None:
        return Comparison(0.0, vol, box, 0.0, vg, vt)
    inter = float((got.manifold ^ target.manifold).volume())
    union = vg + vt - inter
    iou = min(1.0, max(0.0, inter / union)) if union > 0 else 0.0
    return Comparison(iou, vol, box, 1.0, vg, vt)


def local_ious(got: Solid, target: Solid, regions: list[Any]) -> list[float]:
    """IoU of the two solids inside each region (a manifold3d box); 1.0 where neither has material there. A
    response that is not a closed solid has 0 everywhere."""
    if got.manifold is None or target.manifold is None:
        return [0.0] * len(regions)
    out = []
    for box in regions:
        a, b = got.manifold ^ box, target.manifold ^ box
        va, vb = float(a.volume()), float(b.volume())
        inter = float((a ^ b).volume()) if va > 0 and vb > 0 else 0.0
        union = va + vb - inter
        out.append(min(1.0, max(0.0, inter / union)) if union > 1e-12 else 1.0)
    return out


def mesh_from_task_meta(meta: dict[str, Any], base: Path | None = None) -> tuple[bytes, str] | None:
    """A task's own target mesh: `target_mesh` (a path to .stl/.obj/.off, relative to `base`), `target_mesh_text`
    (inline OBJ/OFF/ASCII STL text, `target_mesh_format` naming which) or `target_mesh_b64` (base64 bytes, a
    binary STL by default); None when the task carries none."""
    fmt = str(meta.get("target_mesh_format", "")).lower()
    if isinstance(meta.get("target_mesh"), str):
        path = Path(meta["target_mesh"])
        if base is not None and not path.is_absolute():
            path = base / path
        suffix = path.suffix.lower().lstrip(".")
        try:
            return path.read_bytes(), fmt or suffix
        except OSError as exc:
            raise MeshError(f"target_mesh {str(path)!r}: {exc.strerror or exc}") from None
    if isinstance(meta.get("target_mesh_text"), str):
        return meta["target_mesh_text"].encode(), fmt or "obj"
    if isinstance(meta.get("target_mesh_b64"), str):
        try:
            return base64.b64decode(meta["target_mesh_b64"], validate=True), fmt or "stl"
        except ValueError:
            raise MeshError("target_mesh_b64 is not valid base64") from None
    return None
