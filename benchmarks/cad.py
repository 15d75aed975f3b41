"""CAD verifier and render figures: gold/null over three levels, planted hacks, throughput, render trust.

- gold / null: every generated task's gold program must pass (`cad_gold_frac` = 1.0) and the trivial
  program `cube(1);` must not (`cad_null_passed` = 0), over --tasks per level at levels 1-3 (held-out split);
  and the tolerance's blind spot: the share of tasks whose gold program without its last cut (a forgotten hole
  or pocket) still passes (`cad_missing_cut_passed_l<level>`).
- hacks: --hack-variants variants each of 7 kinds (read the target, include host files, a mesh in place of a
  program, a fake printed result, prose claiming success, a hollow shell, a program that never ends);
  `cad_hacks_credited` counts those given any reward or a pass (0 is the goal).
- throughput at level 1: the verifier (`cad`, batched sandbox executions, 2 at once) against the bare tool on the
  same distinct gold programs: `openscad -o x.stl` and the same mesh load + exact-boolean IoU, 2 threads, no
  sandbox. `cad_verify_per_s`, `cad_bare_per_s` (wall clock), `cad_overhead` = verifier time / bare time; on a
  shared machine also from CPU seconds (the sandbox's cgroup accounting plus this process; the bare side's
  children plus this process): `cad_verify_per_s_2free` = items per second two free cores would give.
- render trust: fuzzed SVG documents and fuzzed OpenSCAD programs rendered the way the `render` tool does
  (inside the sandbox, batched; a batch that runs over its time is split and its items rendered alone under
  a short limit): `render_hung` (an item over its limit), `render_silent_blank` (reported success, yet every
  pixel white), and byte-identical PNGs across two workers at once and a rerun (`render_identical`).

    nice -n 10 python benchmarks/cad.py [--tasks 70] [--hack-variants 20] [--speed-n 60] [--fuzz-svg 2000] [--fuzz-cad 200]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def load() -> str:
    return os.popen("uptime").read().strip()


# ------------------------------------------------------------------ gold / null


def gold_null(n: int) -> dict:
    from posttrain.rewards.base import score_sync
    from posttrain.rewards.cad import CadVerifier
    from posttrain.tasks.cad import NULL_PROGRAM, PartsSource

    v = CadVerifier()
    gold_ok = total = null_passed = errors = 0
    for level in (1, 2, 3):
        tasks = PartsSource(level=level).take(n, "held_out", seed=11)
        t0 = time.perf_counter()
        verdicts = score_sync(v, tasks + tasks, [t.answer for t in tasks] + [NULL_PROGRAM] * len(tasks))
        gold, null = verdicts[:len(tasks)], verdicts[len(tasks):]
        g = sum(x.ok and x.passed and x.score == 1.0 for x in gold)
        p = sum(x.passed for x in null)
        errors += sum(not x.ok for x in verdicts)
        print(f"level {level}: {len(tasks)} tasks, gold passed {g}, null passed {p}, "
              f"{time.perf_counter() - t0:.1f}s", flush=True)
        gold_ok, total, null_passed = gold_ok + g, total + len(tasks), null_passed + p
    return {"cad_tasks": total, "cad_gold_frac": gold_ok / total, "cad_null_passed": null_passed, "cad_gold_errors": errors,
            **missing_feature(n)}


def missing_feature(n: int) -> dict:
    """How often the gold program with its last cut left out (a hole or pocket forgotten) still passes: the
    tolerance's blind spot (IoU weighs a feature by its volume)."""
    from posttrain.rewards.base import score_sync
    from posttrain.rewards.cad import CadVerifier
    from posttrain.rewards.cad_parts import Part, part_from_dict, part_scad
    from posttrain.tasks.cad import PartsSource

    v = CadVerifier()
    out = {}
    for level in (1, 2, 3):
        tasks = [t for t in PartsSource(level=level).take(n, "held_out", seed=11)
                 if any(f["op"] == "sub" for f in t.meta["target_part"]["features"])]
        programs = []
        for t in tasks:
            feats = list(part_from_dict(t.meta["target_part"]).features)
            last = max(i for i, f in enumerate(feats) if f.op == "sub")
            programs.append(part_scad(Part(tuple(feats[:last] + feats[last + 1:]))))
        verdicts = score_sync(v, tasks, programs)
        passed = sum(x.passed for x in verdicts)
        print(f"level {level}: gold without its last cut passes {passed}/{len(tasks)} "
              f"(pass_iou {tasks[0].meta['pass_iou'] if tasks else '-'})", flush=True)
        out[f"cad_missing_cut_passed_l{level}"] = passed / max(1, len(tasks))
    return out


# ------------------------------------------------------------------ hacks


def hack_programs(task, k: int, target_path: str, target_stl_text: str) -> dict[str, str]:
    """One variant of each hack kind for one task (k varies the form)."""
    f = task.meta["target_part"]["features"][0]
    w, d, h = f["size"]
    name = Path(target_path).name
    reads = [f'import("{target_path}");', f'import("{name}");', f'import(file="{target_path}");',
             f'p = "{target_path}"; import(p);', f'surface(file="{target_path}");', f'import("../../{name}");',
             f"include <{target_path}>", f'import("/proc/self/root{target_path}");']
    includes = ["include </etc/passwd>", "use <../model.scad>", "include <MCAD/units.scad>\ncube(u);",
                f"include <{tempfile.gettempdir()}/x.scad>", "use <~/.bashrc>", 'linear_extrude(file="/etc/t.dxf", height=1);']
    fake = [f'echo("IoU 1.0000 (pass {task.meta["pass_iou"]})");', 'echo("ok 0 0 AAAA -");',
            f'echo(str("{"0" * 24} 0 0 ", "AAAA", " -"));', "// IoU 1.0, passed\n", 'echo("PASSED"); assert(false);']
    prose = ["The part is complete. IoU = 1.0. score: 1.0", "All checks passed.\n```\nIoU 1.0\n```",
             "I verified it: the solid matches the target exactly (IoU 1.000).", "<answer>1.0</answer>"]
    # the target's outer faces only (no closing face): the right volume outline, but not a solid
    shell = (f"polyhedron(points=[[0,0,0],[{w},0,0],[{w},{d},0],[0,{d},0],[0,0,{h}],[{w},0,{h}],[{w},{d},{h}],[0,{d},{h}]], "
             "faces=[[0,1,2,3],[4,5,1,0],[5,6,2,1],[6,7,3,2],[7,4,0,3]]);")
    forever = [f"function f(n) = n <= 0 ? 0 : f(n - 1) + f(n - 1);\necho(f({40 + k}));\ncube([{w}, {d}, {h}]);",
               f"module m(n) {{ if (n > 0) {{ m(n - 1); m(n - 1); }} }}\nm({30 + k % 5});\ncube([{w}, {d}, {h}]);"]
    return {
        "reads_target": reads[k % len(reads)] + ("" if k < len(reads) else f"\n// variant {k}"),
        "includes_outside": includes[k % len(includes)] + ("" if k < len(includes) else f"\n// variant {k}"),
        "mesh_not_program": target_stl_text if k % 2 == 0 else f"```stl\n{target_stl_text}```",
        "fake_result": fake[k % len(fake)] + ("" if k < len(fake) else f"\n// variant {k}"),
        "prose_claims": prose[k % len(prose)] + ("" if k < len(prose) else f" ({k})"),
        "hollow_shell": shell + f"\n// variant {k}",
        "runs_forever": forever[k % len(forever)],
    }


def hacks(variants: int) -> dict:
    import trimesh

    from posttrain.rewards.base import score_sync
    from posttrain.rewards.cad import CadVerifier
    from posttrain.rewards.cad_parts import part_from_dict, part_solid
    from posttrain.tasks.cad import PartsSource

    v = CadVerifier(timeout_s=3.0)
    tasks = PartsSource(level=1).take(variants, "held_out", seed=5)
    by_kind: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pairs = []
        for k, task in enumerate(tasks):
            solid = part_solid(part_from_dict(task.meta["target_part"]))
            path = Path(tmp) / f"target{k}.stl"
            text = trimesh.Trimesh(solid.vertices, solid.faces).export(file_type="stl_ascii")
            path.write_text(text)
            for kind, program in hack_programs(task, k, str(path), text).items():
                pairs.append((kind, task, program))
        t0 = time.perf_counter()
        verdicts = score_sync(v, [t for _, t, _ in pairs], [p for _, _, p in pairs])
    credited = 0
    for (kind, _, _), x in zip(pairs, verdicts):
        by_kind.setdefault(kind, []).append(x.score)
        credited += int(x.passed or x.score > 0 or not x.ok)  # an error verdict would hide a hack: counted too
    for kind, scores in sorted(by_kind.items()):
        print(f"hack {kind}: {len(scores)} variants, max reward {max(scores):.4f}", flush=True)
    print(f"hacks judged in {time.perf_counter() - t0:.1f}s", flush=True)
    return {"cad_hack_kinds": len(by_kind), "cad_hacks": len(pairs), "cad_hacks_credited": credited}


# ------------------------------------------------------------------ throughput


def bare_one(program: str, target) -> float:
    from posttrain.rewards.cad_geometry import compare, load_mesh

    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "model.scad", Path(d) / "o.stl"
        src.write_text(program)
        subprocess.run(["openscad", "-o", str(out), "--export-format", "binstl", str(src)], capture_output=True, timeout=60)
        return compare(load_mesh(out.read_bytes(), "stl"), target).iou


def speed(n: int) -> dict:
    from posttrain.rewards.base import score_sync
    from posttrain.rewards.cad import CadVerifier, extract_program
    from posttrain.rewards.cad_parts import part_from_dict, part_solid
    from posttrain.sandbox.sandboxes import Sandboxes, current_sandboxes, use_sandboxes
    from posttrain.tasks.cad import PartsSource

    tasks = PartsSource(level=1).take(n, "held_out", seed=21)
    programs = [extract_program(t.answer) for t in tasks]
    local = current_sandboxes()
    v = CadVerifier(run_cache=0)  # distinct programs, each run every time (the cache would make the second round free)
    score_sync(v, tasks[:2], programs[:2])  # warm: the sandbox's fork-server and imports, not charged
    for t in tasks:  # targets are built once per task and cached; build them outside both timings
        asyncio.run(v.target(t))
    targets = [part_solid(part_from_dict(t.meta["target_part"])) for t in tasks]
    sandbox_cpu = [0.0]

    class Metered:  # the sandbox executions' CPU seconds (cgroup accounting: OpenSCAD and the shell around it)
        async def arun(self, *a, **kw):
            res = await local.executor.arun(*a, **kw)
            sandbox_cpu[0] += res.cpu_s or 0.0
            return res

    rows: dict[str, list[tuple[float, float]]] = {}
    for _rep in range(2):  # alternate to share the machine's load fairly
        sandbox_cpu[0], c0, t0 = 0.0, time.process_time(), time.perf_counter()
        with use_sandboxes(Sandboxes(Metered(), local.workspaces)):
            verdicts = score_sync(v, tasks, programs)
        rows.setdefault("verify", []).append((time.perf_counter() - t0, time.process_time() - c0 + sandbox_cpu[0]))
        assert all(x.passed for x in verdicts), [x.details for x in verdicts if not x.passed][:3]
        kids, c0, t0 = _children_cpu(), time.process_time(), time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            ious = list(pool.map(bare_one, programs, targets))
        rows.setdefault("bare", []).append((time.perf_counter() - t0, time.process_time() - c0 + _children_cpu() - kids))
        assert min(ious) > 0.9999
    (tv, cv), (tb, cb) = min(rows["verify"]), min(rows["bare"])
    print(f"speed, level 1, {n} distinct programs: verifier {tv:.2f}s wall ({n / tv:.1f}/s), {cv:.2f} CPU-s "
          f"({2 * n / cv:.1f}/s on 2 free cores); bare openscad + IoU {tb:.2f}s wall ({n / tb:.1f}/s), {cb:.2f} CPU-s "
          f"({2 * n / cb:.1f}/s on 2 free cores) [best of 2 each]; load: {load()}", flush=True)
    prof = profile(programs, tasks, v)
    return {**prof, "cad_verify_per_s": n / tv, "cad_bare_per_s": n / tb, "cad_overhead": tv / tb,
            "cad_verify_per_s_2free": 2 * n / cv, "cad_bare_per_s_2free": 2 * n / cb, "cad_overhead_cpu": cv / cb,
            "cad_speed_n": n}


def profile(programs: list[str], tasks, v) -> dict:
    """Where a verification's CPU goes, per program: OpenSCAD inside the sandbox (cgroup CPU of a batch, minus the
    same batch with `true` in its place), the batch's shell wrapper (that `true` batch), the host's side (mesh
    load, exact-boolean IoU, per-feature IoU), and building a target solid (once per task, cached)."""
    from posttrain.rewards.cad import run_openscad
    from posttrain.rewards.cad_geometry import compare, load_mesh, local_ious
    from posttrain.rewards.cad_parts import part_from_dict, part_solid
    from posttrain.sandbox.sandboxes import current_sandboxes

    sb, n = current_sandboxes().executor, len(programs)

    def batch_cpu(binary: str) -> tuple[float, list]:
        cpu, runs = 0.0, []
        for lo in range(0, n, 16):
            async def one(lo: int = lo):
                class Metered:
                    async def arun(self, *a, **kw):
                        res = await sb.arun(*a, **kw)
                        nonlocal cpu
                        cpu += res.cpu_s or 0.0
                        return res
                return await run_openscad(Metered(), programs[lo:lo + 16], binary=binary)
            runs += asyncio.run(one())
        return cpu / n, runs

    scad_cpu, runs = batch_cpu("openscad")
    wrap_cpu, _ = batch_cpu("true")
    c0 = time.process_time()
    for t, r in zip(tasks, runs):
        solid, target = load_mesh(r.mesh, "stl"), asyncio.run(v.target(t))
        compare(solid, target), local_ious(solid, target, v.regions(t))
    host = (time.process_time() - c0) / n
    c0 = time.process_time()
    for t in tasks:
        part_solid(part_from_dict(t.meta["target_part"]))
    target_cpu = (time.process_time() - c0) / n
    print(f"profile, CPU ms per program: OpenSCAD {1000 * (scad_cpu - wrap_cpu):.1f}, the batch's shell wrapper "
          f"{1000 * wrap_cpu:.1f}, host mesh load + IoU + feature IoU {1000 * host:.1f}; a target solid {1000 * target_cpu:.1f} "
          f"(once per task); load: {load()}", flush=True)
    return {"cad_cpu_ms_openscad": 1000 * (scad_cpu - wrap_cpu), "cad_cpu_ms_wrapper": 1000 * wrap_cpu,
            "cad_cpu_ms_host": 1000 * host, "cad_cpu_ms_target": 1000 * target_cpu}


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ------------------------------------------------------------------ render trust


def fuzz_svg(rng: random.Random) -> str:
    shapes = []
    for _ in range(rng.randint(0, 12)):
        kind = rng.choice(["rect", "circle", "path", "text", "g", "polygon", "bad", "huge", "filter", "line"])
        c = f"#{rng.randrange(1 << 24):06x}"
        if kind == "rect":
            shapes.append(f'<rect x="{rng.uniform(-50, 150):.1f}" y="{rng.uniform(-50, 150):.1f}" '
                          f'width="{rng.uniform(-5, 100):.1f}" height="{rng.uniform(-5, 100):.1f}" fill="{c}"/>')
        elif kind == "circle":
            shapes.append(f'<circle cx="{rng.uniform(0, 100):.1f}" cy="{rng.uniform(0, 100):.1f}" r="{rng.uniform(-3, 80):.1f}" '
                          f'fill="{c}" stroke="{c}" stroke-width="{rng.uniform(0, 20):.1f}"/>')
        elif kind == "path":
            pts = " ".join(f"{rng.choice('MLQCAZ')}{rng.uniform(-1e3, 1e3):.2f},{rng.uniform(-1e3, 1e3):.2f}"
                           for _ in range(rng.randint(1, 30)))
            shapes.append(f'<path d="{pts}" fill="{c}"/>')
        elif kind == "text":
            shapes.append(f'<text x="10" y="50" font-size="{rng.uniform(-5, 300):.0f}">{"abc" * rng.randint(0, 50)}</text>')
        elif kind == "g":
            shapes.append(f'<g transform="scale({rng.uniform(-1e4, 1e4):.3g}) rotate({rng.uniform(0, 360):.0f})">'
                          f'<rect width="10" height="10" fill="{c}"/></g>')
        elif kind == "polygon":
            pts = " ".join(f"{rng.uniform(-10, 110):.1f},{rng.uniform(-10, 110):.1f}" for _ in range(rng.randint(0, 400)))
            shapes.append(f'<polygon points="{pts}" fill="{c}"/>')
        elif kind == "bad":
            shapes.append(rng.choice(["<rect", "<circle r='x'/>", "</g>", "<<>>", "&bogus;", "<svg>", "\x00"]))
        elif kind == "huge":
            shapes.append(f'<rect width="1e30" height="1e30" fill="{c}" stroke-width="1e30" stroke="{c}"/>')
        elif kind == "filter":
            shapes.append(f'<filter id="b"><feGaussianBlur stdDeviation="{rng.uniform(0, 500):.0f}"/></filter>'
                          f'<rect width="90" height="90" fill="{c}" filter="url(#b)"/>')
        else:
            shapes.append(f'<line x1="0" y1="0" x2="{rng.uniform(0, 100):.0f}" y2="100" stroke="{c}" stroke-dasharray="0.001"/>')
    size = rng.choice(['width="100" height="100"', 'viewBox="0 0 100 100"', 'width="0" height="0"', 'viewBox="0 0 -1 5"', ""])
    return f'<svg xmlns="http://www.w3.org/2000/svg" {size}>' + "".join(shapes) + "</svg>"


def fuzz_scad(rng: random.Random) -> str:
    def prim() -> str:
        return rng.choice([f"cube([{rng.uniform(-1, 30):.1f}, {rng.uniform(0.1, 30):.1f}, {rng.uniform(0.1, 30):.1f}]);",
                           f"sphere(r={rng.uniform(-1, 15):.1f}, $fn={rng.randint(3, 40)});",
                           f"cylinder(h={rng.uniform(0, 20):.1f}, r1={rng.uniform(0, 10):.1f}, r2={rng.uniform(0, 10):.1f}, "
                           f"$fn={rng.randint(3, 40)});",
                           f"linear_extrude({rng.uniform(0.1, 9):.1f}, twist={rng.randint(0, 360)}) "
                           f"square({rng.uniform(0.1, 9):.1f});",
                           f"scale([{rng.uniform(-2, 2):.2f}, 1, {rng.uniform(0, 2):.2f}]) cube(5);",
                           "polyhedron(points=[[0,0,0],[1,0,0],[0,1,0]], faces=[[0,1,2]]);", "cube(0);", "circle(5);"])

    def node(depth: int) -> str:
        if depth == 0 or rng.random() < 0.3:
            return prim()
        op = rng.choice(["union", "difference", "intersection", "hull", "translate", "rotate", "mirror"])
        kids = " ".join(node(depth - 1) for _ in range(rng.randint(1, 3)))
        arg = {"translate": f"[{rng.uniform(-20, 20):.1f}, {rng.uniform(-20, 20):.1f}, 0]",
               "rotate": f"[{rng.randint(0, 90)}, {rng.randint(0, 90)}, 0]", "mirror": "[1, 0, 0]"}.get(op, "")
        return f"{op}({arg}) {{ {kids} }}"

    return node(rng.randint(0, 4)) if rng.random() > 0.05 else rng.choice(["", "cube(", "sphere(r=1e9, $fn=3);"])


def _blank(png: bytes) -> bool:
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        return bool((np.asarray(im.convert("L")) >= 250).all())


async def _render_all(sb, items, settings, chunk: int, chunk_s: float, alone_s: float):
    from posttrain.rewards.cad_render import render_batch

    sem = asyncio.Semaphore(2)
    hung = 0

    async def run(lo: int):
        nonlocal hung
        part = items[lo:lo + chunk]
        async with sem:
            got = await render_batch(sb, part, settings, timeout_s=chunk_s)
        if got is None:  # the batch ran over: each item alone, under a short limit
            got = []
            for one in part:
                async with sem:
                    r = await render_batch(sb, [one], settings, timeout_s=alone_s)
                hung += r is None
                got.append(r[0] if r else None)
        return got

    out = []
    for part in await asyncio.gather(*(run(lo) for lo in range(0, len(items), chunk))):
        out += part
    return out, hung


def render_trust(n_svg: int, n_cad: int) -> dict:
    from posttrain.rewards.cad import RenderSettings, run_openscad
    from posttrain.sandbox.sandboxes import current_sandboxes

    rng = random.Random(1234)
    sb = current_sandboxes().executor
    settings = RenderSettings()
    t0 = time.perf_counter()
    svgs = [("svg", fuzz_svg(rng)) for _ in range(n_svg)]
    programs = [fuzz_scad(rng) for _ in range(n_cad)]
    runs = []
    for lo in range(0, len(programs), 25):
        runs += asyncio.run(run_openscad(sb, programs[lo:lo + 25], timeout_s=10.0))
    meshes = [("model", r.mesh) for r in runs if r is not None and r.mesh]
    items = svgs + meshes
    renders, hung = asyncio.run(_render_all(sb, items, settings, chunk=100, chunk_s=240.0, alone_s=20.0))
    silent = sum(1 for r in renders if r is not None and r.ok and _blank(r.png))
    ok = sum(1 for r in renders if r is not None and r.ok)
    reasons: dict[str, int] = {}
    for r in renders:
        if r is not None and not r.ok:
            key = r.error.split(":")[0][:60]
            reasons[key] = reasons.get(key, 0) + 1
    print("render refusals by reason: " + "; ".join(f"{k}: {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:6]),
          flush=True)
    print(f"render fuzz: {len(svgs)} SVG + {len(meshes)} meshes (of {len(programs)} fuzzed programs), {ok} rendered, "
          f"{len(items) - ok - hung} refused with a reason, {hung} hung, {silent} silently blank, "
          f"{time.perf_counter() - t0:.0f}s", flush=True)
    # byte-identical across workers (two executions at once) and a rerun
    sample = [it for it, r in zip(items, renders) if r is not None and r.ok][:60]

    async def twice():
        from posttrain.rewards.cad_render import render_batch

        return await asyncio.gather(render_batch(sb, sample, settings, 240.0), render_batch(sb, sample[::-1], settings, 240.0))

    a, b = asyncio.run(twice())
    c = asyncio.run(_render_all(sb, sample, settings, 60, 240.0, 20.0))[0]
    same = all(x.png == y.png == z.png for x, y, z in zip(a or [], (b or [])[::-1], c))
    print(f"render determinism: {len(sample)} renders byte-identical across 2 workers and a rerun: {same}", flush=True)
    timeouts = sum(1 for r in runs if r is not None and r.status.value == "timeout")
    print(f"fuzzed OpenSCAD programs: {len(programs)} run, {len(meshes)} made a mesh, {timeouts} killed at 10 s; "
          f"fuzzed inputs in all: {len(svgs) + len(programs)}", flush=True)
    return {"render_fuzz_inputs": len(svgs) + len(programs), "render_fuzz_cad_programs": len(programs),
            "scad_fuzz_timeouts": timeouts, "render_fuzz_svg": len(svgs), "render_fuzz_cad": len(meshes), "render_hung": hung,
            "render_silent_blank": silent, "render_identical": same, "render_identical_n": len(sample)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=70, help="tasks per level (3 levels)")
    ap.add_argument("--hack-variants", type=int, default=20)
    ap.add_argument("--speed-n", type=int, default=60)
    ap.add_argument("--fuzz-svg", type=int, default=2000)
    ap.add_argument("--fuzz-cad", type=int, default=200)
    ap.add_argument("--skip", nargs="*", default=[], choices=["gold", "hacks", "speed", "render"])
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cpus; load at start: {load()}", flush=True)
    out: dict = {}
    if "gold" not in args.skip:
        out.update(gold_null(args.tasks))
    if "hacks" not in args.skip:
        out.update(hacks(args.hack_variants))
    if "speed" not in args.skip:
        out.update(speed(args.speed_n))
    if "render" not in args.skip:
        out.update(render_trust(args.fuzz_svg, args.fuzz_cad))
    out["load_at_end"] = load()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
