"""The CAD verifier (`cad`): run the response's OpenSCAD program in the sandbox, compare its solid with the target.

Covers: `extract_program` (the last ```openscad / ```scad block, else the first fenced block, else the
text), `unsafe_reason` (refuses file references: `include`/`use`/`import`/`surface` of anything but the
workspace files a task allows, absolute or `..` paths, the deprecated `file=` arguments), `run_openscad`
(a batch of programs in one sandbox execution, each in its own directory under its own time and
address-space cap, each mesh exported by OpenSCAD itself as binary STL and read back base64 on lines
tagged with a per-run nonce; a warning is an error by default: `CadVerifier.hard_warnings`), and
`CadVerifier`: reward = 1.0 when the solid passes (a closed 2-manifold
whose IoU with the target >= the task's `pass_iou`, and, for a feature-list target, whose IoU inside the box
around every feature too: IoU alone weighs a feature by its volume, and a forgotten small hole would pass),
else the smaller of the IoU and the worst feature's as partial credit; `Verdict.breakdown` has iou, volume,
bbox, watertight (`cad_geometry.compare`) and features (the worst local IoU), `Verdict.info` the run status,
OpenSCAD's last log lines and each feature's IoU (`made_valid_solid` reads from it whether a solid was made).

The target (never inside the sandbox, so a program cannot read it): `meta["target_part"]` (a feature list,
built exactly in manifold3d: `cad_parts.py`), `meta["target_mesh"]` / `target_mesh_text` / `target_mesh_b64`
(a user's STL/OBJ/OFF), `meta["target_scad"]`, or else the gold `answer` as an OpenSCAD program (both run
through the same sandboxed path). Why a hack earns nothing: the mesh is always exported by the verifier's
own OpenSCAD invocation from the program text (a mesh written by the response, or text it prints, is never
read: OpenSCAD programs cannot write files or stdout); file references are refused before running, and the
sandbox shows the program no host files anyway; a program over its time is killed and scores 0.
A sandbox failure is an ERROR verdict, never 0. Render settings are fields, so they enter the version hash.

Does not cover: CadQuery/build123d programs, drawing a mesh (`_cad_render.py`, `cad_render.py`).
"""

from __future__ import annotations

import asyncio
import base64
import enum
import functools
import hashlib
import math
import re
import secrets
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.rewards import cad_parts
from posttrain.rewards.cad_geometry import MeshError, Solid, compare, load_mesh, local_ious, mesh_from_task_meta, require_cad
from posttrain.rewards.registry import register_verifier
from posttrain.sandbox.sandboxes import current_sandboxes
from posttrain.types import Task, Verdict, VerdictStatus

OPENSCAD = "openscad"
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_INCLUDE = re.compile(r"\b(?:include|use)\s*<([^>]*)>")
# the keyword anywhere (a comment between it and its bracket must not hide it); it may only name an allowed file,
# literally: `import("part.stl")`
_FILE_CALL = re.compile(r"\b(import|surface|dxf_linear_extrude|dxf_rotate_extrude|dxf_dim|dxf_cross)\b")
_FIRST_STRING = re.compile(r"\s*\(\s*(?:file\s*=\s*)?\"([^\"\\]*)\"")
TARGET_CACHE = 4096  # target solids kept per verifier
RUN_CACHE_BYTES = 128 << 20  # meshes kept by the run cache, at most (a level-1 mesh is ~4 KB)
KILLED = "the run was killed (memory or time)"
PARTS = ("iou", "volume", "bbox", "watertight", "features")  # `Verdict.breakdown`


class RunStatus(str, enum.Enum):
    """How one OpenSCAD run ended."""

    OK = "ok"  # a mesh came back
    ERROR = "error"  # OpenSCAD failed (syntax, CGAL), or made no mesh
    TIMEOUT = "timeout"  # past the per-program limit of CPU seconds: the program's own cost, the same on any load
    STALLED = "stalled"  # past the wall-clock backstop, or lost with its batch: the machine's load, not the program
    REFUSED = "refused"  # refused before running (a file reference, too long)
    TOO_BIG = "too_big"  # the mesh was over the size cap
    UNAVAILABLE = "unavailable"  # OpenSCAD is not installed where the sandbox runs: the verifier's failure, never a 0


@dataclass(frozen=True)
class ScadRun:
    status: RunStatus
    mesh: bytes = b""  # binary STL
    log: str = ""  # OpenSCAD's last output lines, or why it was refused


def extract_program(response: str) -> str:
    """The last ```openscad / ```scad block, else the first fenced block, else the whole response."""
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(response)]
    tagged = [body for lang, body in blocks if lang in ("openscad", "scad")]
    if tagged:
        return tagged[-1]
    return blocks[0][1] if blocks else response


def _allowed_path(name: str, allowed: Sequence[str]) -> bool:
    return name in allowed and not name.startswith(("/", "~")) and ".." not in name.replace("\\", "/").split("/")


def unsafe_reason(program: str, allowed: Sequence[str] = ()) -> str | None:
    """Why this program must not run (it names a file that is not one of the workspace's `allowed` files), or None."""
    for m in _INCLUDE.finditer(program):
        if not _allowed_path(m.group(1).strip(), allowed):
            return f"file reference refused: {m.group(0)[:80]} (only the workspace's own files may be included)"
    for m in _FILE_CALL.finditer(program):
        arg = _FIRST_STRING.match(program, m.end())
        if arg is None or not _allowed_path(arg.group(1), allowed):
            return f"file reference refused: {m.group(1)}(...) may read only the workspace's own files, named literally"
    if re.search(r"\bfile\s*=", program):
        return "file reference refused: file= arguments are not allowed"
    return None


WALL_FACTOR = 10  # the wall-clock backstop of one OpenSCAD run, in multiples of its CPU limit


def _batch_script(n: int, nonce: str, timeout_s: float, mem_kb: int, max_mesh_bytes: int, binary: str = OPENSCAD,
                  hard_warnings: bool = False) -> str:
    """The shell program of one sandbox execution: each item's program in its own directory, the mesh exported
    by OpenSCAD, then a tagged line per item (nonce, index, exit code, base64 mesh, base64 log tail). With
    `hard_warnings` OpenSCAD stops at a program's first warning (`--hardwarnings`), an error like any other.

    The per-program limit counts CPU seconds (`ulimit -t`, soft: SIGXCPU, exit 152; the soft limit is set before the
    hard one, which may not go below it), so whether a program is too
    slow does not depend on what else the machine runs, as a wall-clock limit did (a level-1 part takes ~0.15 s of
    CPU; on a loaded machine a niced run can take 100 times that in wall time). The wall clock is only a backstop,
    `WALL_FACTOR` times longer (exit 124, or 137 after the KILL: STALLED, the machine's failure, not a 0)."""
    flags = " --hardwarnings" if hard_warnings else ""
    cpu_s = max(1, math.ceil(timeout_s))
    return f"""
for i in $(seq 0 {n - 1}); do
  cd /work/i$i || exit 3
  rm -f /tmp/o.stl /tmp/e.txt
  ( ulimit -v {mem_kb}; ulimit -S -t {cpu_s}; ulimit -H -t {cpu_s + 1}
    exec timeout -k 2 {WALL_FACTOR * cpu_s} {binary}{flags} -o /tmp/o.stl --export-format binstl model.scad ) \\
    >/tmp/e.txt 2>&1 </dev/null
  rc=$?
  size=$(stat -c %s /tmp/o.stl 2>/dev/null || echo 0)
  printf '{nonce} %s %s ' "$i" "$rc"
  if [ "$size" -gt {max_mesh_bytes} ]; then printf 'BIG'; elif [ "$size" -gt 0 ]; then base64 -w0 /tmp/o.stl; else printf '-'; fi
  printf ' '
  tail -c 600 /tmp/e.txt | base64 -w0
  printf '\\n'
done
"""


def export_command(src: str, timeout_s: float, hard_warnings: bool, log: str = "/dev/null") -> str:
    """The shell command an agent's render tool runs in its session: OpenSCAD exports `src` (a workspace path, quoted
    here) to binary STL at /tmp/render.stl, killed after `timeout_s`, with the verifier's `hard_warnings` (so a
    program the verifier fails for a warning does not render as a solid); OpenSCAD's output goes to `log`."""
    flags = " --hardwarnings" if hard_warnings else ""
    return (f"rm -f /tmp/render.stl; timeout -s KILL {timeout_s:g} {OPENSCAD}{flags} -o /tmp/render.stl "
            f"--export-format binstl {shlex.quote(src)} >{log} 2>&1 </dev/null")


def _parse_batch(stdout: str, nonce: str, n: int) -> dict[int, ScadRun]:
    out: dict[int, ScadRun] = {}
    for line in stdout.splitlines():
        parts = line.split(" ")
        if len(parts) != 5 or parts[0] != nonce or not parts[1].isdigit() or not 0 <= int(parts[1]) < n:
            continue
        i, rc, mesh, log = int(parts[1]), parts[2], parts[3], parts[4]
        try:
            text = base64.b64decode(log).decode(errors="replace")
            body = b"" if mesh in ("-", "BIG") else base64.b64decode(mesh)
        except ValueError:
            continue
        if rc in ("126", "127"):
            out[i] = ScadRun(RunStatus.UNAVAILABLE, log=text)
        elif rc in ("152", "158"):  # SIGXCPU: the CPU limit (158 where SIGXCPU is 30)
            out[i] = ScadRun(RunStatus.TIMEOUT, log=text)
        elif rc in ("137", "124"):
            out[i] = ScadRun(RunStatus.STALLED, log=text)
        elif mesh == "BIG":
            out[i] = ScadRun(RunStatus.TOO_BIG, log=text)
        elif rc != "0" or not body:
            out[i] = ScadRun(RunStatus.ERROR, log=text)
        else:
            out[i] = ScadRun(RunStatus.OK, body, text)
    return out


async def run_openscad(sandbox: Any, programs: Sequence[str], *, timeout_s: float = 10.0, memory_mb: int = 1024,
                       max_mesh_bytes: int = 8 << 20, binary: str = OPENSCAD,
                       hard_warnings: bool = False) -> list[ScadRun | None]:
    """Each program's run, in one sandbox execution; None for items the execution did not report (it was killed:
    the caller re-runs those alone). Refusals are the caller's job (`unsafe_reason`)."""
    from posttrain.sandbox import Limits

    n = len(programs)
    nonce = secrets.token_hex(12)
    files = {f"i{k}/model.scad": p for k, p in enumerate(programs)}
    budget = n * (timeout_s + 2.0) + 5.0  # CPU seconds; the wall clock waits out a loaded machine (`_batch_script`)
    limits = Limits(wall_s=WALL_FACTOR * budget, cpu_s=budget, memory_mb=memory_mb + 256, pids=32,
                    output_bytes=max(1 << 20, n * (max_mesh_bytes * 4 // 3 + 4096)), disk_mb=max(64, 2 * max_mesh_bytes >> 20))
    script = _batch_script(n, nonce, timeout_s, memory_mb * 1024, max_mesh_bytes, binary, hard_warnings)
    res = await sandbox.arun(["/bin/sh", "-c", script], files=files, limits=limits, prefork=False)
    from posttrain.sandbox import ExecStatus

    if res.status is ExecStatus.SANDBOX_ERROR:
        raise RuntimeError(f"sandbox failed: {res.error}")
    got = _parse_batch(res.stdout, nonce, n)
    return [got.get(k) for k in range(n)]


@functools.cache
def openscad_version() -> str:
    """`openscad --version` (part of the verifier's version hash: another OpenSCAD may tessellate differently)."""
    try:
        r = subprocess.run([OPENSCAD, "--version"], capture_output=True, text=True, timeout=30)
        return (r.stdout + r.stderr).strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "missing"


@dataclass(frozen=True)
class RenderSettings:
    """How `render` draws a model (`cad_render.py`); a field of the verifier so that it enters its version hash."""

    size: int = 256  # PNG width and height, pixels
    views: tuple[str, ...] = ("iso", "top", "front", "right")
    ascii_cols: int = 40  # the text-only silhouette
    ascii_rows: int = 16


def made_valid_solid(info: dict) -> bool:
    """Whether a `cad` verdict's `info` says the program produced a valid solid (OpenSCAD ran clean and its mesh is
    a closed 2-manifold), pass or fail; what `cad_invalid_rate` counts the lack of. An episode that never rendered
    a program, or a verdict from before the mesh was read, has no such info and counts as no valid solid."""
    return info.get("run") == RunStatus.OK.value and info.get("watertight") is True


def _info(run: ScadRun, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    tail = "\n".join(line for line in run.log.splitlines() if line.strip())[-400:]
    return {"run": run.status.value, "log": tail, **(extra or {})}


@dataclass
class CadVerifier:
    """IoU of the response's OpenSCAD solid with the task's target; passes at `meta["pass_iou"]` (default `pass_iou`)."""

    pass_iou: float = 0.95
    timeout_s: float = 10.0  # per program
    memory_mb: int = 1024  # address space of one OpenSCAD run
    max_program_chars: int = 50_000
    max_mesh_bytes: int = 8 << 20
    batch_size: int = 16  # programs per sandbox execution
    max_concurrency: int = 2  # sandbox executions at once
    render: RenderSettings = field(default_factory=RenderSettings)
    binary: str = OPENSCAD  # the OpenSCAD executable, on the sandbox's PATH
    hard_warnings: bool = True  # a program OpenSCAD warns about (an unknown module or function, an argument given
    # twice) fails as OpenSCAD's own error. Without it OpenSCAD drops the offending call and renders the rest, so a
    # garbled call in place of a part's hole (`cyr(h=6,5)`) made a solid and earned the partial credit of a misplaced
    # hole; RL on the easy level learnt to write such calls (issue 42, benchmarks/RESULTS.md, ninth session)
    run_cache: int = 2048  # programs whose runs are remembered (the same text gives the same mesh): a sampled group
    # repeats programs across steps, and an evaluation repeats the greedy one; 0 runs every program every time
    name: str = "cad"

    def __post_init__(self) -> None:
        require_cad()
        if not 0.0 < self.pass_iou <= 1.0:
            raise ValueError(f"cad: pass_iou must be in (0, 1], got {self.pass_iou}")
        if self.timeout_s <= 0:
            raise ValueError(f"cad: timeout_s must be > 0, got {self.timeout_s}")
        self._targets: dict[str, Solid] = {}
        self._regions: dict[str, list[Any]] = {}
        self._ran: dict[str, ScadRun] = {}  # program text -> its run (OK or OpenSCAD's own failure), oldest first
        self._ran_bytes = 0

    def version_key(self) -> str:
        here = Path(__file__).parent
        src = b"".join((here / f).read_bytes() for f in ("cad.py", "cad_geometry.py", "cad_parts.py"))
        return hashlib.sha256(src + openscad_version().encode()).hexdigest()[:12]

    def _keep_run(self, program: str, run: ScadRun) -> None:
        """Remember a deterministic outcome (a mesh, OpenSCAD's own error, a mesh over the cap); never a timeout,
        a lost item or a missing OpenSCAD, which depend on the machine, not on the program."""
        if self.run_cache <= 0 or program in self._ran or run.status not in (RunStatus.OK, RunStatus.ERROR, RunStatus.TOO_BIG) \
                or run.log == KILLED:
            return
        self._ran[program] = run
        self._ran_bytes += len(run.mesh)
        while len(self._ran) > self.run_cache or self._ran_bytes > RUN_CACHE_BYTES:
            self._ran_bytes -= len(self._ran.pop(next(iter(self._ran))).mesh)

    async def _runs(self, programs: list[str], on_chunk: Any = None) -> list[ScadRun]:
        """Each program's run: batched over `max_concurrency` executions; an item a batch lost runs alone.
        `on_chunk(lo, runs)` is called as each execution's runs come back (the caller judges them while the other
        executions are still running)."""
        sandbox = current_sandboxes().executor  # the run's (`[sandbox]`), or this process's local default
        sem = asyncio.Semaphore(self.max_concurrency)
        size = max(1, min(self.batch_size, -(-len(programs) // self.max_concurrency)))

        async def chunk(lo: int, hi: int) -> list[ScadRun]:
            async with sem:
                got = await run_openscad(sandbox, programs[lo:hi], timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                                         max_mesh_bytes=self.max_mesh_bytes, binary=self.binary,
                                         hard_warnings=self.hard_warnings)
            if hi - lo > 1 and any(g is None for g in got):
                done = [g if g is not None else (await chunk(lo + k, lo + k + 1))[0] for k, g in enumerate(got)]
            else:
                done = [g if g is not None else ScadRun(RunStatus.STALLED, log=KILLED) for g in got]
                if on_chunk is not None:
                    on_chunk(lo, done)
            return done

        spans = [(k, min(k + size, len(programs))) for k in range(0, len(programs), size)]
        out: list[ScadRun] = []
        for part in await asyncio.gather(*(chunk(lo, hi) for lo, hi in spans)):
            out += part
        return out

    def _remember(self, key: str, solid: Solid) -> Solid:
        self._targets[key] = solid
        while len(self._targets) > TARGET_CACHE:  # generated tasks never repeat: keep the newest only
            self._targets.pop(next(iter(self._targets)))
        return solid

    async def target(self, task: Task) -> Solid:
        """The task's target solid (cached); MeshError when it has none or it is unusable."""
        meta = task.meta
        if meta.get("target_part") is not None:
            key = "part:" + repr(meta["target_part"])
            got = self._targets.get(key)
            return got if got is not None else self._remember(
                key, cad_parts.part_solid(cad_parts.part_from_dict(meta["target_part"])))
        own = mesh_from_task_meta(meta, Path(meta["base_dir"]) if isinstance(meta.get("base_dir"), str) else None)
        if own is not None:
            data, fmt = own
            key = f"mesh:{fmt}:" + hashlib.sha256(data).hexdigest()
            got = self._targets.get(key)
            return got if got is not None else self._remember(key, load_mesh(data, fmt))
        program = meta.get("target_scad") if isinstance(meta.get("target_scad"), str) else task.answer
        if not program:
            raise MeshError(f"task {task.id!r}: no target (meta target_part / target_mesh / target_scad, or an answer)")
        program = extract_program(program)
        key = "scad:" + hashlib.sha256(program.encode()).hexdigest()
        got = self._targets.get(key)
        if got is not None:
            return got
        (run,) = await self._runs([program])
        if run.status is not RunStatus.OK:
            raise MeshError(f"task {task.id!r}: the target program did not render ({run.status.value}): {run.log[-200:]}")
        return self._remember(key, load_mesh(run.mesh, "stl"))

    def regions(self, task: Task) -> list[Any]:
        """The boxes around a `target_part`'s features (cached), where the solid must match locally too; none for
        other targets (a mesh has no features to name)."""
        part = task.meta.get("target_part")
        if part is None:
            return []
        key = repr(part)
        got = self._regions.get(key)
        if got is None:
            got = self._regions[key] = cad_parts.feature_regions(cad_parts.part_from_dict(part))
            while len(self._regions) > TARGET_CACHE:
                self._regions.pop(next(iter(self._regions)))
        return got

    def _judge(self, task: Task, target: Solid, run: ScadRun) -> Verdict:
        if run.status is RunStatus.UNAVAILABLE:
            return Verdict(0.0, False, VerdictStatus.ERROR, details="could not run OpenSCAD (install it: "
                           f"scripts/system-deps.sh): {run.log.strip()[-200:]}", info=_info(run))
        if run.status is RunStatus.STALLED:  # the machine's load, not the program: counted apart, never a 0
            return Verdict(0.0, False, VerdictStatus.TIMEOUT, details=f"OpenSCAD stalled (the machine, not the program): "
                           f"{run.log.strip()[-200:]}", info=_info(run))
        if run.status is not RunStatus.OK:
            why = {RunStatus.TIMEOUT: f"OpenSCAD ran past {self.timeout_s:g} CPU seconds", RunStatus.REFUSED: run.log,
                   RunStatus.TOO_BIG: "the mesh is over the size cap"}.get(run.status, "OpenSCAD failed")
            log = "" if run.status is RunStatus.REFUSED else f": {_info(run)['log'][-200:]}"
            return Verdict(0.0, False, details=f"{why}{log}", info=_info(run), breakdown=dict.fromkeys(PARTS, 0.0))
        try:
            solid = load_mesh(run.mesh, "stl")
        except MeshError as exc:
            return Verdict(0.0, False, details=str(exc), info=_info(run, {"mesh": str(exc)}),
                           breakdown=dict.fromkeys(PARTS, 0.0))
        c = compare(solid, target)
        local = local_ious(solid, target, self.regions(task))
        worst = min(local, default=c.iou)
        need = float(task.meta.get("pass_iou", self.pass_iou))
        ok = c.watertight == 1.0 and c.iou >= need and worst >= need
        size = "x".join(f"{s:g}" for s in (round(x, 3) for x in solid.size))
        details = f"IoU {c.iou:.4f} (pass {need:g}); volume {c.got_volume:.4g} vs {c.target_volume:.4g}; size {size}" \
            + (f"; worst feature IoU {worst:.4f} (feature {local.index(worst) + 1})" if local else "") \
            + ("" if solid.watertight else f"; {solid.why}")
        info = _info(run, {"iou": c.iou, "feature_ious": local, "size": list(solid.size), "bbox": list(solid.bbox),
                           "volume": c.got_volume, "target_volume": c.target_volume, "watertight": solid.watertight})
        return Verdict(1.0 if ok else min(c.iou, worst), ok, details=details, breakdown={**c.breakdown(), "features": worst},
                       info=info)

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(tasks)
        targets: list[Solid | None] = [None] * len(tasks)
        todo: list[tuple[int, str]] = []
        for i, (task, response) in enumerate(zip(tasks, responses)):
            try:
                targets[i] = await self.target(task)
            except MeshError as exc:
                out[i] = Verdict(0.0, False, VerdictStatus.ERROR, details=str(exc))
                continue
            except RuntimeError as exc:  # the sandbox failed
                out[i] = Verdict(0.0, False, VerdictStatus.ERROR, details=str(exc))
                continue
            program = extract_program(response)
            allowed = tuple(task.meta.get("workspace_files", ()))
            why = (f"the program is {len(program)} characters, over the {self.max_program_chars} cap"
                   if len(program) > self.max_program_chars else unsafe_reason(program, allowed))
            if why is not None:
                out[i] = self._judge(task, targets[i], ScadRun(RunStatus.REFUSED, log=why))  # type: ignore[arg-type]
                continue
            todo.append((i, program))
        if todo:
            # identical programs (common in a sampled group) run once, and a program run before not again
            waiting: dict[str, list[int]] = {}
            for i, program in todo:
                waiting.setdefault(program, []).append(i)

            def judge(programs: list[str], runs: list[ScadRun]) -> None:
                for program, run in zip(programs, runs):
                    self._keep_run(program, run)
                    for i in waiting.pop(program, []):
                        out[i] = self._judge(tasks[i], targets[i], run)  # type: ignore[arg-type]

            known = [p for p in waiting if p in self._ran]
            judge(known, [self._ran[p] for p in known])
            fresh = list(waiting)
            try:
                ran = await self._runs(fresh, on_chunk=lambda lo, runs: judge(fresh[lo:lo + len(runs)], runs))
                judge(fresh, ran)  # what no chunk reported (an item run again alone)
            except RuntimeError as exc:
                for i in [i for left in waiting.values() for i in left]:
                    out[i] = Verdict(0.0, False, VerdictStatus.ERROR, details=str(exc))
        return [v if v is not None else Verdict(0.0, False, VerdictStatus.ERROR, details="no verdict") for v in out]


@register_verifier("cad")
def _cad(**params: Any) -> CadVerifier:
    if isinstance(params.get("render"), dict):
        params["render"] = RenderSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in params["render"].items()})
    return CadVerifier(**params)

