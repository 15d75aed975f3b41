"""Rendering rewards: rasterise the SVG a model wrote and compare it with a target image by SSIM.

Covers: `SvgRender`, a verifier that takes the last ```svg block or
`<svg>...</svg>` element of a response, refuses anything that could reach
outside the document (DOCTYPE/ENTITY declarations, `href`/`src`/`url()` that
is not `#fragment` or `data:`, CSS `@import`), renders it with `resvg-py` to a
fixed `size` x `size` white canvas (fit, centred) in a separate worker process
bounded in time and memory, and scores the SSIM of its luma against the
target's (`ssim.py`). The target is the task's `meta["target_svg"]` (rendered
the same way), `meta["target_png"]` (a file path), `meta["target_png_b64"]`,
or else the gold answer as SVG. A malformed, oversized, slow or external SVG
scores 0 with the reason in the details; it never raises, reads a file or
touches the network.
Does not cover: raster formats in responses, or perceptual metrics other than SSIM.

Score: SSIM rescaled so that an empty white canvas scores 0 and the target 1,
(SSIM - SSIM_blank) / (1 - SSIM_blank) clipped to [0, 1] -- a mostly white
target already shares much structure with a blank image, and drawing nothing
must not earn a reward (`blank_baseline=False`: max(SSIM, 0)). Passed when
the raw SSIM >= `pass_ssim`.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posttrain.extras import require
from posttrain.rewards.registry import register_verifier
from posttrain.rewards.ssim import luma, ssim
from posttrain.types import Task, Verdict, VerdictStatus

RENDER_EXTRA = "SVG rendering needs resvg-py and pillow: pip install 'posttrain[render]'"

_SVG_FENCE = re.compile(r"```svg\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_SVG_ELEMENT = re.compile(r"<svg\b(?:[^>]*/>|.*?</svg\s*>)", re.DOTALL | re.IGNORECASE)
_FORBIDDEN = [
    (re.compile(r"<!\s*(?:DOCTYPE|ENTITY)", re.IGNORECASE), "DOCTYPE/ENTITY declarations are not allowed"),
    (re.compile(r"(?:href|src)\s*=\s*[\"']\s*(?!#|data:)", re.IGNORECASE), "external reference (href/src)"),
    (re.compile(r"url\(\s*[\"']?\s*(?!#|data:)", re.IGNORECASE), "external reference (url())"),
    (re.compile(r"@import", re.IGNORECASE), "CSS @import is not allowed"),
    (re.compile(r"<\?xml-stylesheet", re.IGNORECASE), "xml-stylesheet is not allowed"),
]


@functools.cache
def _require_extra() -> None:
    require("PIL.Image", "render", "SVG rendering")
    require("resvg_py", "render", "SVG rendering")


def extract_svg(response: str) -> str | None:
    """The last ```svg fenced block, else the last <svg>...</svg> element, else None."""
    fenced = _SVG_FENCE.findall(response)
    if fenced:
        return fenced[-1].strip()
    found = _SVG_ELEMENT.findall(response)
    return found[-1] if found else None


def unsafe_reason(svg: str) -> str | None:
    """Why this SVG must not be rendered (it could reach a file or the network), or None."""
    for pattern, why in _FORBIDDEN:
        if pattern.search(svg):
            return why
    return None


class RenderWorker:
    """One rasteriser process, reused across renders, killed and replaced when a render runs over time."""

    def __init__(self, mem_bytes: int = 2 << 30) -> None:
        self.mem_bytes = mem_bytes
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        # the workers' empty working directory, made here and removed here (on close, or when this object goes):
        # a worker is killed when a render runs over, so it cannot remove a directory of its own
        self._dir: str | None = None
        self._remove_dir: weakref.finalize | None = None

    def _start(self, startup_s: float = 60.0) -> subprocess.Popen[bytes]:
        """A fresh worker, once it has imported resvg and loaded the system fonts (not charged to a render)."""
        script = str(Path(__file__).with_name("_render_worker.py"))
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="posttrain-render-")
            self._remove_dir = weakref.finalize(self, shutil.rmtree, self._dir, True)
        env = {"POSTTRAIN_RENDER_MEM": str(self.mem_bytes), "POSTTRAIN_RENDER_DIR": self._dir,
               "PATH": os.environ.get("PATH", "")}
        proc = subprocess.Popen(
            [sys.executable, "-I", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        box: dict[str, bytes] = {}
        t = threading.Thread(target=lambda: box.update(line=proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        t.start()
        t.join(startup_s)
        if box.get("line") != b"ready\n":
            proc.kill()
            proc.wait()
            raise ValueError(f"the SVG renderer did not start ({RENDER_EXTRA})")
        return proc

    def render(self, svg: str, width: int, height: int, timeout_s: float) -> bytes:
        """PNG bytes; raises TimeoutError past `timeout_s` (the process is killed) or ValueError when resvg refuses."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            data = svg.encode("utf-8", errors="replace")
            box: dict[str, Any] = {}

            def exchange() -> None:
                try:
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(json.dumps({"width": width, "height": height, "len": len(data)}).encode() + b"\n" + data)
                    proc.stdin.flush()
                    head = json.loads(proc.stdout.readline() or b"null")
                    box["head"] = head
                    box["body"] = proc.stdout.read(head["len"]) if head else b""
                except (OSError, ValueError, TypeError) as exc:
                    box["error"] = exc

            t = threading.Thread(target=exchange, daemon=True)
            t.start()
            t.join(timeout_s)
            if t.is_alive() or "error" in box or not box.get("head"):
                timed_out = t.is_alive()
                proc.kill()
                proc.wait()
                self._proc = None
                t.join()
                if timed_out:
                    raise TimeoutError(f"render ran past {timeout_s:g} s")
                raise ValueError(f"renderer died ({box.get('error', 'no reply')}; out of memory?)")
            head = box["head"]
            if not head["ok"]:
                raise ValueError(head["error"])
            return box["body"]

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._proc.kill()
                self._proc.wait()
                self._proc = None
            if self._remove_dir is not None:
                self._remove_dir()
                self._dir = self._remove_dir = None


def _png_to_canvas(png: bytes, size: int) -> np.ndarray:
    """[size, size] luma of a PNG centred on a white canvas (renders fit inside; targets are resized to fit)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        if im.width * im.height > 4096 * 4096:
            raise ValueError(f"target image {im.width}x{im.height} is too large")
        im = im.convert("RGBA")
        if im.width > size or im.height > size:
            im.thumbnail((size, size))
        canvas = Image.new("RGBA", (size, size), (255, 255, 255, 255))
        canvas.alpha_composite(im, ((size - im.width) // 2, (size - im.height) // 2))
    return luma(np.asarray(canvas.convert("RGB")))


@dataclass
class SvgRender:
    """Reward = SSIM between the response's rendered SVG and the target image, both as `size` x `size` luma."""

    size: int = 128
    pass_ssim: float = 0.95
    timeout_s: float = 5.0
    max_svg_chars: int = 200_000
    isolate: bool = True
    blank_baseline: bool = True
    name: str = "svg_render"

    def __post_init__(self) -> None:
        _require_extra()
        if not 16 <= self.size <= 1024:
            raise ValueError(f"svg_render: size must be in 16..1024 pixels, got {self.size}")
        if self.timeout_s <= 0:
            raise ValueError(f"svg_render: timeout_s must be > 0, got {self.timeout_s}")
        self._worker = RenderWorker()
        self._targets: dict[str, np.ndarray] = {}

    def _rasterise(self, svg: str) -> np.ndarray:
        """[size, size] luma, or ValueError/TimeoutError with the reason."""
        if len(svg) > self.max_svg_chars:
            raise ValueError(f"SVG is {len(svg)} chars, over the {self.max_svg_chars} cap")
        why = unsafe_reason(svg)
        if why is not None:
            raise ValueError(f"refused: {why}")
        if self.isolate:
            png = self._worker.render(svg, self.size, self.size, self.timeout_s)
        else:
            import resvg_py

            try:
                png = resvg_py.svg_to_bytes(svg_string=svg, width=self.size, height=self.size, background="white")
            except BaseException as exc:  # noqa: BLE001 - a pyo3 panic is a BaseException
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                raise ValueError(f"{type(exc).__name__}: {exc}") from None
        return _png_to_canvas(png, self.size)

    def _target(self, task: Task) -> np.ndarray:
        meta = task.meta
        if isinstance(meta.get("target_svg"), str):
            key, load = "svg:" + meta["target_svg"], lambda: self._rasterise(meta["target_svg"])
        elif isinstance(meta.get("target_png"), str):
            path = meta["target_png"]
            key, load = "png:" + path, lambda: _png_to_canvas(Path(path).read_bytes(), self.size)
        elif isinstance(meta.get("target_png_b64"), str):
            data = meta["target_png_b64"]
            key, load = "b64:" + data, lambda: _png_to_canvas(base64.b64decode(data), self.size)
        elif task.answer and extract_svg(task.answer):
            svg = extract_svg(task.answer) or ""
            key, load = "svg:" + svg, lambda: self._rasterise(svg)
        else:
            raise ValueError(
                f"task {task.id!r}: no target image (meta target_svg / target_png / target_png_b64, or an SVG answer)")
        if key not in self._targets:
            try:
                self._targets[key] = load()
            except (ValueError, TimeoutError, OSError) as exc:
                raise ValueError(f"task {task.id!r}: target image unusable: {exc}") from None
        return self._targets[key]

    def _judge(self, task: Task, response: str) -> Verdict:
        try:
            target = self._target(task)
        except ValueError as exc:
            return Verdict(0.0, False, VerdictStatus.ERROR, details=str(exc))
        svg = extract_svg(response)
        if svg is None:
            return Verdict(0.0, False, details="no <svg> element or ```svg block in the response")
        try:
            got = self._rasterise(svg)
        except (ValueError, TimeoutError) as exc:
            return Verdict(0.0, False, details=f"not rendered: {exc}"[:400])
        value = ssim(got, target, data_range=255.0)
        ok = value >= self.pass_ssim
        reward, note = max(value, 0.0), ""
        if self.blank_baseline:
            blank = ssim(np.full_like(target, 255.0), target, data_range=255.0)
            reward = float(ok) if blank >= 1.0 - 1e-9 else min(max((value - blank) / (1.0 - blank), 0.0), 1.0)
            note = f" (blank canvas {blank:.4f})"
        return Verdict(reward, ok, details=f"ssim {value:.4f}{note}" + ("" if ok else f" < {self.pass_ssim}"))

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        return [await asyncio.to_thread(self._judge, t, r) for t, r in zip(tasks, responses)]

    def close(self) -> None:
        self._worker.close()


@register_verifier("svg_render")
def _svg_render(**params: Any) -> SvgRender:
    return SvgRender(**params)
