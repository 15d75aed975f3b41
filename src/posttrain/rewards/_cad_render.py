"""Draw a triangle mesh as shaded orthographic views: SVG, PNG (resvg) and a coarse ASCII silhouette.

Runs inside the sandbox (the render tool sends this file's source as the program, with a small call at
the end), so it imports only the standard library, numpy, and resvg_py / PIL when they are there; it
never imports posttrain. Deterministic: the same mesh and settings give the same SVG text, hence the same
PNG bytes (resvg is deterministic), on any worker and rerun.

Views: iso (from +x -y +z), top (looking down -z), front (from -y), right (from +x), laid out 2x2 on a
white square, one common scale, back faces culled, faces painted far to near, flat-shaded by a fixed light.
Does not cover: running OpenSCAD, comparing solids (the host's `cad.py`).
"""

import base64
import json
import struct

import numpy as np

# (right, up) screen axes of each view; toward the viewer = right x up
VIEWS = {
    "iso": ((0.7071067811865476, 0.7071067811865476, 0.0), (-0.4082482904638631, 0.4082482904638631, 0.8164965809277261)),
    "top": ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
    "front": ((1.0, 0.0, 0.0), (0.0, 0.0, 1.0)),
    "right": ((0.0, 1.0, 0.0), (0.0, 0.0, 1.0)),
}


def read_stl(data):
    """[F, 3, 3] float64 triangles of a binary or ASCII STL."""
    if data[:5].lower() == b"solid" and b"facet" in data[:400]:
        nums = [float(t) for line in data.decode(errors="replace").splitlines()
                for t in line.split()[1:] if line.strip().startswith("vertex")]
        return np.asarray(nums, np.float64).reshape(-1, 3, 3)
    if len(data) < 84:
        return np.zeros((0, 3, 3))
    (n,) = struct.unpack("<I", data[80:84])
    n = min(n, (len(data) - 84) // 50)
    rec = np.frombuffer(data[84:84 + 50 * n], dtype=np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")]))
    return rec["v"].astype(np.float64)


def _project(tris, view):
    right, up = (np.asarray(a) for a in VIEWS[view])
    toward = np.cross(right, up)
    return tris @ right, tris @ up, tris @ toward, toward  # [F, 3] each


def views_svg(tris, size=256, views=("iso", "top", "front", "right")):
    """SVG text of the views of [F, 3, 3] triangles on a size x size white canvas."""
    cells = 2 if len(views) > 1 else 1
    cell = size / cells
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" viewBox="0 0 {size} {size}">',
           f'<rect width="{size}" height="{size}" fill="white"/>']
    if len(tris):
        centre = (tris.reshape(-1, 3).min(0) + tris.reshape(-1, 3).max(0)) / 2
        tris = tris - centre
        radius = max(float(np.sqrt((tris.reshape(-1, 3) ** 2).sum(1)).max()), 1e-9)
        scale = (cell / 2 - 6) / radius
        for k, view in enumerate(views):
            ox, oy = (k % cells) * cell + cell / 2, (k // cells) * cell + cell / 2
            xs, ys, depth, toward = _project(tris, view)
            normals = np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0])  # [F, 3]
            norm = np.linalg.norm(normals, axis=1)
            keep = (norm > 1e-12) & ((normals @ toward) > 1e-9 * norm)
            light = np.asarray(VIEWS[view][0]) * 0.3 + np.asarray(VIEWS[view][1]) * 0.5 + toward
            light = light / np.linalg.norm(light)
            shade = 0.35 + 0.6 * np.clip((normals @ light) / np.maximum(norm, 1e-12), 0, 1)
            order = np.argsort(depth.mean(1)[keep], kind="stable")
            idx = np.nonzero(keep)[0][order]
            for f in idx:
                g = int(round(40 + 200 * shade[f]))
                pts = " ".join(f"{ox + xs[f, j] * scale:.2f},{oy - ys[f, j] * scale:.2f}" for j in range(3))
                out.append(f'<polygon points="{pts}" fill="rgb({g},{g},{255 - (255 - g) // 2})" '
                           f'stroke="rgb({g},{g},{255 - (255 - g) // 2})" stroke-width="0.4"/>')
            out.append(f'<rect x="{(k % cells) * cell + 0.5:.1f}" y="{(k // cells) * cell + 0.5:.1f}" width="{cell - 1:.1f}" '
                       f'height="{cell - 1:.1f}" fill="none" stroke="rgb(200,200,200)"/>')
    out.append("</svg>")
    return "\n".join(out)


def silhouette(tris, view="top", cols=40, rows=16):
    """Rows of '#' (material) and '.' over the view's bounding rectangle, sampled at cell centres."""
    if not len(tris):
        return ""
    xs, ys, _, _ = _project(tris, view)
    x0, x1, y0, y1 = xs.min(), xs.max(), ys.min(), ys.max()
    w, h = max(x1 - x0, 1e-9), max(y1 - y0, 1e-9)
    px = x0 + (np.arange(cols) + 0.5) * w / cols
    py = y1 - (np.arange(rows) + 0.5) * h / rows
    gx, gy = np.meshgrid(px, py)  # [rows, cols]
    hit = np.zeros(gx.shape, bool)
    for lo in range(0, len(xs), 512):
        ax, ay = xs[lo:lo + 512, 0, None, None], ys[lo:lo + 512, 0, None, None]
        bx, by = xs[lo:lo + 512, 1, None, None], ys[lo:lo + 512, 1, None, None]
        cx, cy = xs[lo:lo + 512, 2, None, None], ys[lo:lo + 512, 2, None, None]
        d1 = (gx - bx) * (ay - by) - (ax - bx) * (gy - by)
        d2 = (gx - cx) * (by - cy) - (bx - cx) * (gy - cy)
        d3 = (gx - ax) * (cy - ay) - (cx - ax) * (gy - ay)
        neg = (d1 < 0) | (d2 < 0) | (d3 < 0)
        pos = (d1 > 0) | (d2 > 0) | (d3 > 0)
        hit |= (~(neg & pos)).any(0)
    return "\n".join("".join("#" if c else "." for c in row) for row in hit)


def to_png(svg, size):
    """(PNG bytes, fraction of non-white pixels); (b"", -1) when resvg is not installed."""
    try:
        import resvg_py
    except ImportError:
        return b"", -1.0
    png = bytes(resvg_py.svg_to_bytes(svg_string=svg, width=size, height=size, background="white"))
    try:
        import io

        from PIL import Image

        with Image.open(io.BytesIO(png)) as im:
            a = np.asarray(im.convert("L"))
        ink = float((a < 250).mean())
    except ImportError:
        ink = -1.0
    return png, ink


def render_file(path, size=256, views=("iso", "top", "front", "right"), cols=40, rows=16, max_faces=200000):
    """What the render tool reports of the STL at `path`, as one JSON-able dict."""
    with open(path, "rb") as fh:
        data = fh.read()
    tris = read_stl(data)[:max_faces]
    if not len(tris):
        return {"ok": False, "error": "the model has no 3D geometry"}
    pts = tris.reshape(-1, 3)
    svg = views_svg(tris, size, tuple(views))
    png, ink = to_png(svg, size)
    if ink == 0.0:
        return {"ok": False, "error": "the render came out blank"}
    return {"ok": True, "faces": int(len(tris)), "bbox": [float(v) for v in (*pts.min(0), *pts.max(0))],
            "png_b64": base64.b64encode(png).decode(), "ink": ink, "mesh_b64": base64.b64encode(data).decode(),
            "top": silhouette(tris, "top", cols, rows), "front": silhouette(tris, "front", cols, rows)}


def render_svg_file(path, size=256):
    """The render tool on an SVG file: rasterised by resvg on a white square."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        svg = fh.read()
    try:
        png, ink = to_png(svg, size)
    except BaseException as exc:  # noqa: BLE001 - resvg raises a pyo3 panic on some inputs
        return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    if ink == 0.0:
        return {"ok": False, "error": "the render came out blank (nothing visible on a white canvas)"}
    return {"ok": True, "png_b64": base64.b64encode(png).decode(), "ink": ink}


def main(request):
    """The sandboxed entry: one JSON line on stdout, tagged with the request's nonce."""
    try:
        if request["kind"] == "svg":
            reply = render_svg_file(request["path"], request["size"])
        else:
            reply = render_file(request["path"], request["size"], request["views"], request["cols"], request["rows"])
    except Exception as exc:  # noqa: BLE001 - reported to the host as a failed render
        reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    print(request["nonce"] + " " + json.dumps(reply), flush=True)
