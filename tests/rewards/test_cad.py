"""The CAD verifier: OpenSCAD in the sandbox, IoU by exact booleans, partial credit, targets a task brings,
and planted hacks (reading the target, files outside the workspace, a mesh or a fake result in place of a
program, programs that never end) that must earn nothing."""

from __future__ import annotations

import asyncio
import base64

import pytest

from posttrain.rewards.base import score_sync, verifier_version
from posttrain.rewards.cad import CadVerifier, RenderSettings, RunStatus, extract_program, run_openscad, unsafe_reason
from posttrain.rewards.cad_geometry import MeshError, load_mesh, mesh_from_task_meta
from posttrain.rewards.cad_parts import part_from_dict, part_scad, part_solid
from posttrain.sandbox import ExecResult, ExecStatus
from posttrain.sandbox.sandboxes import current_sandboxes, use_sandboxes
from posttrain.types import Task, VerdictStatus

PART = {"features": [{"op": "add", "shape": "box", "at": [0, 0, 0], "size": [20, 10, 5]},
                     {"op": "sub", "shape": "cyl", "at": [10, 5, -1], "r": 2, "h": 7, "axis": "z", "fn": 32}]}
GOLD = part_scad(part_from_dict(PART))
TASK = Task("plate", "a plate with a hole", f"```openscad\n{GOLD}```", {"target_part": PART, "pass_iou": 0.95})
CUBE_OBJ = "\n".join(["v 0 0 0", "v 1 0 0", "v 1 1 0", "v 0 1 0", "v 0 0 1", "v 1 0 1", "v 1 1 1", "v 0 1 1",
                      "f 1 3 2", "f 1 4 3", "f 5 6 7", "f 5 7 8", "f 1 2 6", "f 1 6 5", "f 2 3 7", "f 2 7 6",
                      "f 3 4 8", "f 3 8 7", "f 4 1 5", "f 4 5 8"]) + "\n"


@pytest.fixture(scope="module")
def verifier():
    return CadVerifier()


def judge(v, task, *responses):
    return score_sync(v, [task] * len(responses), list(responses))


def test_gold_scores_full_marks_and_a_missing_hole_gets_partial_credit(verifier):
    gold, no_hole, shifted, tiny = judge(verifier, TASK, TASK.answer, "cube([20, 10, 5]);",
                                         GOLD.replace("translate([10, 5, -1])", "translate([4, 5, -1])"), "cube(1);")
    assert gold.ok and gold.passed and gold.score == 1.0 and gold.breakdown["iou"] > 0.9999
    assert set(gold.breakdown) == {"iou", "volume", "bbox", "watertight", "features"}
    assert gold.breakdown["watertight"] == 1.0 and gold.breakdown["features"] > 0.9999
    # a block without its hole: IoU = (block - hole) / block; around the hole (an 8 x 8 box) (64 - 4 pi) / 64
    expect = part_solid(part_from_dict(PART)).volume / 1000.0
    assert not no_hole.passed and no_hole.breakdown["iou"] == pytest.approx(expect, abs=1e-6)
    assert no_hole.breakdown["features"] == pytest.approx(1 - 0.25 * 3.1214 / 4, abs=1e-3)  # the 32-gon's area
    assert no_hole.score == no_hole.breakdown["features"] and no_hole.breakdown["bbox"] == 1.0
    assert not shifted.passed and 0.3 < shifted.score < 1.0 and shifted.info["feature_ious"][1] == shifted.score
    assert not tiny.passed and tiny.score < 0.01 and tiny.info["run"] == "ok"
    # a looser tolerance passes the block without its hole
    loose = Task("loose", "", None, {**TASK.meta, "pass_iou": 0.8})
    (v,) = judge(verifier, loose, "cube([20, 10, 5]);")
    assert v.passed and v.score == 1.0


def test_a_call_openscad_ignores_with_a_warning_scores_zero(verifier):
    """An unknown module (a garbled `cylinder`) or an argument given twice: OpenSCAD warns, drops the call and
    renders the rest, here the block without its hole, which earned that block's partial credit until warnings
    became errors (RL learnt to write such calls in place of a hole: issue 42). `hard_warnings = False` keeps
    OpenSCAD's own leniency."""
    garbled = "difference(){cube([20,10,5]);translate([10,5,-1])cyr(h=7,2,$fn=32);}"
    twice = "difference(){cube([20,10,5]);translate([10,5,-1])cylinder(h=7,r=2,$fn=32,$fn=8);}"
    no_hole, bad, doubled = judge(verifier, TASK, "cube([20, 10, 5]);", garbled, twice)
    assert no_hole.ok and 0.5 < no_hole.score < 1.0
    for v, why in ((bad, "unknown module 'cyr'"), (doubled, "supplied more than once")):
        assert v.ok and not v.passed and v.score == 0.0 and v.info["run"] == "error" and why in v.info["log"]
    lenient = CadVerifier(hard_warnings=False)
    bad, doubled = judge(lenient, TASK, garbled, twice)
    assert bad.info["run"] == "ok" and bad.score == pytest.approx(no_hole.score)
    assert doubled.info["run"] == "ok" and doubled.passed  # the second $fn is ignored: the hole is there
    assert verifier_version(lenient) != verifier_version(verifier)


def test_the_verifier_spec_is_json_and_rebuilds_it():
    """The scheduler's failure bank stores each failed task's verifier spec as JSON: the `render` settings record
    made `train.curriculum = "scheduler"` crash at its first step on `cad:parts` (issue 42, ninth session)."""
    import json

    from posttrain.rewards.registry import make_verifier, spec_of

    for v in (CadVerifier(), CadVerifier(hard_warnings=False, render=RenderSettings(size=320, views=("top", "front")))):
        spec = json.loads(json.dumps(spec_of(v)))
        assert spec["type"] == "cad" and make_verifier(spec) == v


def test_a_forgotten_small_hole_fails_although_the_global_iou_passes(verifier):
    """IoU weighs a feature by its volume: a 1 mm hole in a 60 x 40 plate is 0.13 % of it. The feature's own box
    catches it; a mesh target (no features known) is judged by the global IoU alone."""
    part = {"features": [{"op": "add", "shape": "box", "at": [0, 0, 0], "size": [60, 40, 3]},
                         {"op": "sub", "shape": "cyl", "at": [30, 20, -1], "r": 1, "h": 5, "axis": "z", "fn": 32}]}
    task = Task("small", "", None, {"target_part": part, "pass_iou": 0.99})
    gold, forgot = judge(verifier, task, part_scad(part_from_dict(part)), "cube([60, 40, 3]);")
    assert gold.passed and forgot.breakdown["iou"] > 0.998 and not forgot.passed and forgot.score < 0.85
    as_mesh = Task("small-mesh", "", None, {"target_scad": part_scad(part_from_dict(part)), "pass_iou": 0.99})
    (v,) = judge(verifier, as_mesh, "cube([60, 40, 3]);")
    assert v.passed and v.breakdown["features"] == v.breakdown["iou"]


def test_an_open_mesh_is_not_a_solid_and_scores_zero(verifier):
    open_box = ("polyhedron(points=[[0,0,0],[20,0,0],[20,10,0],[0,10,0],[0,0,5],[20,0,5],[20,10,5],[0,10,5]], "
                "faces=[[0,1,2,3],[4,5,1,0],[5,6,2,1],[6,7,3,2],[7,4,0,3]]);")  # no top face
    (v,) = judge(verifier, TASK, open_box)
    assert v.ok and not v.passed and v.score == 0.0 and v.breakdown["watertight"] == 0.0


def test_targets_a_task_brings_mesh_text_b64_path_and_program(verifier, tmp_path):
    stl = asyncio.run(run_openscad(current_sandboxes().executor, ["cube([1, 1, 1]);"]))[0].mesh
    (tmp_path / "t.stl").write_bytes(stl)
    (tmp_path / "t.obj").write_text(CUBE_OBJ)
    metas = [{"target_mesh_text": CUBE_OBJ, "target_mesh_format": "obj"}, {"target_mesh_b64": base64.b64encode(stl).decode()},
             {"target_mesh": str(tmp_path / "t.stl")}, {"target_mesh": "t.obj", "base_dir": str(tmp_path)},
             {"target_scad": "cube(1);"}]
    for meta in metas:
        t = Task("own", "", None, {**meta, "pass_iou": 0.99})
        right, wrong = judge(verifier, t, "cube(1);", "cube([1, 1, 2]);")
        assert right.passed and right.score == 1.0, meta
        assert not wrong.passed and wrong.score == pytest.approx(0.5, abs=1e-6), meta
    # an answer is a target too; a task with nothing to compare with is an ERROR, never a 0
    (v,) = judge(verifier, Task("ans", "", "cube(2);"), "cube(2);")
    assert v.passed
    (v,) = judge(verifier, Task("none", ""), "cube(1);")
    assert v.status is VerdictStatus.ERROR and "no target" in v.details
    (v,) = judge(verifier, Task("gone", "", None, {"target_mesh": str(tmp_path / "nope.stl")}), "cube(1);")
    assert v.status is VerdictStatus.ERROR


def test_mesh_loading_errors_are_one_line():
    with pytest.raises(MeshError, match="empty"):
        load_mesh(b"", "obj")
    with pytest.raises(MeshError, match="format"):
        load_mesh(b"x", "step")
    with pytest.raises(MeshError, match="base64"):
        mesh_from_task_meta({"target_mesh_b64": "!!"})
    with pytest.raises(MeshError, match="first feature"):
        part_from_dict({"features": [{"op": "sub", "shape": "box", "at": [0, 0, 0], "size": [1, 1, 1]}]})


def test_extract_program_and_refusals():
    assert extract_program("text\n```scad\ncube(1);\n```\nmore ```openscad\ncube(2);\n```") == "cube(2);\n"
    assert extract_program("cube(3);") == "cube(3);"
    for bad in ('import("target.stl");', "include </etc/passwd>", "use <../x.scad>", 'surface(file="/t.dat");',
                'f = "/t.stl"; import(f);', 'linear_extrude(file="a.dxf", height=1);', "include <MCAD/units.scad>",
                'import /* x */ ("/t.stl");',
                'import\n("/t.stl");', "include\t</etc/passwd>"):
        assert unsafe_reason(bad) is not None, bad
    assert unsafe_reason('import("part.stl");', allowed=("part.stl",)) is None
    assert unsafe_reason('import("../part.stl");', allowed=("../part.stl",)) is not None
    assert unsafe_reason(GOLD) is None


HACKS = {
    "reads the target": 'import("/work/target.stl");',
    "includes a host file": "include </root/target.scad>",
    "writes the mesh itself": "solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex 1 0 0\nvertex 0 1 0\n"
                              "endloop\nendfacet\nendsolid x\n",
    "prints a fake result": 'echo("IoU 1.0000 (pass 0.95)"); echo("ok 0 0 AAAA -");',
    "claims success in prose": "The IoU is 1.0, all checks passed. score: 1.0",
    "empty program": "// nothing\n",
}


@pytest.mark.parametrize("kind", sorted(HACKS))
def test_planted_hacks_earn_nothing(verifier, kind):
    (v,) = judge(verifier, TASK, HACKS[kind])
    assert v.ok and not v.passed and v.score == 0.0, (kind, v.details)


def test_a_program_that_runs_forever_is_killed_and_scores_zero():
    v = CadVerifier(timeout_s=1.5)
    forever = "function f(n) = n <= 0 ? 0 : 1 + f(n - 1) * 0 + f(n - 1) * 0;\necho(f(60));\ncube(1);"
    (r,) = judge(v, TASK, forever)
    assert r.ok and r.score == 0.0 and r.info["run"] == "timeout" and "ran past" in r.details


def test_the_sandbox_hides_host_files_even_without_the_static_check(tmp_path):
    """Defence in depth: a file reference that slipped past `unsafe_reason` finds nothing in the sandbox."""
    secret = tmp_path / "target.stl"
    secret.write_bytes(asyncio.run(run_openscad(current_sandboxes().executor, ["cube(1);"]))[0].mesh)
    (run,) = asyncio.run(run_openscad(current_sandboxes().executor, [f'import("{secret}");']))
    assert run.status is not RunStatus.OK or not run.mesh


def test_a_sandbox_failure_is_an_error_verdict_never_a_zero(verifier):
    class Broken:
        async def arun(self, *args, **kwargs):
            return ExecResult(ExecStatus.SANDBOX_ERROR, error="no namespaces")

    with use_sandboxes(current_sandboxes().with_executor(Broken())):
        (v,) = judge(CadVerifier(), TASK, "cube([20, 10, 5]);")
    assert v.status is VerdictStatus.ERROR and "no namespaces" in v.details


def test_identical_programs_in_a_batch_run_once_and_each_get_a_verdict():
    ran: list[str] = []
    real = current_sandboxes().executor

    class Spy:
        async def arun(self, *args, **kwargs):
            ran.extend(kwargs["files"].values())
            return await real.arun(*args, **kwargs)

    with use_sandboxes(current_sandboxes().with_executor(Spy())):
        verdicts = judge(CadVerifier(), TASK, GOLD, "cube(1);", GOLD, "cube(1);", "syntax(")
    assert sorted(ran) == sorted([GOLD, "cube(1);", "syntax("])
    assert [v.passed for v in verdicts] == [True, False, True, False, False]
    verdicts[0].info["log"] = "edited"
    assert verdicts[2].info["log"] != "edited"


def test_render_settings_and_tolerance_enter_the_version_hash():
    base = verifier_version(CadVerifier())
    assert verifier_version(CadVerifier()) == base
    assert verifier_version(CadVerifier(render=RenderSettings(size=512))) != base
    assert verifier_version(CadVerifier(pass_iou=0.9)) != base


def test_the_target_cache_keeps_the_newest_only(monkeypatch):
    import posttrain.rewards.cad as cad

    monkeypatch.setattr(cad, "TARGET_CACHE", 2)
    v = CadVerifier()
    tasks = [Task(f"t{k}", "", None, {"target_scad": f"cube({k + 1});"}) for k in range(3)]
    verdicts = score_sync(v, tasks, ["cube(1);"] * 3)
    assert verdicts[0].passed and not verdicts[2].passed and len(v._targets) == 2


def test_a_missing_extra_names_it(monkeypatch):
    import sys

    from posttrain.engine.extras import MissingExtraError
    from posttrain.rewards import cad_geometry

    monkeypatch.setitem(sys.modules, "manifold3d", None)
    cad_geometry.require_cad.cache_clear()
    try:
        with pytest.raises(MissingExtraError, match=r"posttrain\[cad\]"):
            CadVerifier()
    finally:
        cad_geometry.require_cad.cache_clear()


def test_openscad_missing_is_an_error_verdict_never_a_zero():
    (v,) = judge(CadVerifier(binary="openscad-not-installed"), TASK, GOLD)
    assert v.status is VerdictStatus.ERROR and "system-deps" in v.details


def test_a_program_run_before_is_judged_again_without_running_it():
    ran: list[str] = []

    class Spy:
        async def arun(self, *args, **kwargs):
            ran.extend(kwargs["files"].values())
            return await base.arun(*args, **kwargs)

    base = current_sandboxes().executor
    with use_sandboxes(current_sandboxes().with_executor(Spy())):
        v, fresh = CadVerifier(), CadVerifier(run_cache=0)
        first = judge(v, TASK, GOLD, "syntax(", "cube([20, 10, 5]);")
        again = judge(v, TASK, "syntax(", GOLD, "cube(2);")
        assert sorted(ran) == sorted([GOLD, "syntax(", "cube([20, 10, 5]);", "cube(2);"])  # only the new one ran
        assert [x.passed for x in again] == [False, True, False] and again[1].score == first[0].score == 1.0
        assert again[0].info["run"] == first[1].info["run"] == "error" and again[1].details == first[0].details
        ran.clear()
        judge(fresh, TASK, GOLD)
        judge(fresh, TASK, GOLD)
        assert ran == [GOLD, GOLD]  # run_cache=0: every time


def test_the_run_cache_keeps_only_what_the_program_decides_within_its_budget(monkeypatch):
    import posttrain.rewards.cad as cad
    from posttrain.rewards.cad import ScadRun

    v = CadVerifier(run_cache=2)
    for status, log in [(RunStatus.TIMEOUT, ""), (RunStatus.UNAVAILABLE, ""), (RunStatus.STALLED, cad.KILLED),
                        (RunStatus.STALLED, "")]:
        v._keep_run(f"{status}{log}", ScadRun(status, log=log))
    assert not v._ran  # the machine's doing (load, a lost item, no OpenSCAD), not the program's
    for k in range(3):
        v._keep_run(f"cube({k});", ScadRun(RunStatus.OK, b"x" * 10))
    assert list(v._ran) == ["cube(1);", "cube(2);"] and v._ran_bytes == 20
    monkeypatch.setattr(cad, "RUN_CACHE_BYTES", 15)
    v._keep_run("cube(9);", ScadRun(RunStatus.OK, b"y" * 10))
    assert list(v._ran) == ["cube(9);"] and v._ran_bytes == 10


def test_each_execution_is_handed_over_as_it_comes_back():
    """`_runs` reports every execution's runs when they return (`verify_batch` judges them while the rest run)."""
    v = CadVerifier(batch_size=2, max_concurrency=1)
    programs = [f"cube({k + 1});" for k in range(5)]
    seen: list[tuple[int, int]] = []
    runs = asyncio.run(v._runs(programs, on_chunk=lambda lo, got: seen.append((lo, len(got)))))
    assert seen == [(0, 2), (2, 2), (4, 1)] and all(r.status is RunStatus.OK for r in runs)


def test_a_slow_machine_is_not_a_slow_program():
    """The per-program limit counts CPU seconds: a run that waits (here `sleep`, as a niced run on a loaded machine
    waits for a core) past the limit's wall time is still judged on its mesh. Under a wall-clock limit it scored 0,
    and the same CAD base read 0.203 and 0.500 at one step in two sessions (issue 42, benchmarks/RESULTS.md)."""
    waits = "sh -c 'sleep 2.5; exec openscad \"$@\"' openscad"
    (r,) = judge(CadVerifier(timeout_s=1, binary=waits), TASK, GOLD)
    assert r.ok and r.passed, r.details


def test_every_limit_of_a_run_is_set():
    """The run's own limits, as the program sees them: CPU seconds soft and hard, and memory. Setting the hard CPU
    limit first failed in dash (`error setting limit`: under the soft one, still unlimited), so the hard limit was
    never set and only the log said so."""
    shows = "sh -c 'echo limits $(ulimit -S -t) $(ulimit -H -t) $(ulimit -v); exit 1' openscad"
    (r,) = judge(CadVerifier(timeout_s=2, memory_mb=512, binary=shows), TASK, GOLD)
    log = r.info["log"]
    assert "limits 2 3 524288" in log and "error setting limit" not in log, log


def test_a_stalled_run_is_counted_apart_never_a_zero():
    """Past the wall-clock backstop (or lost with its batch) is the machine's failure: a TIMEOUT verdict, excluded
    from advantages and graded again by a base's band check, not a wrong program."""
    from posttrain.rewards.cad import KILLED, ScadRun, _batch_script, _parse_batch

    assert "ulimit -S -t 10; ulimit -H -t 11\n" in _batch_script(1, "n", 10.0, 1 << 20, 1 << 20)
    line = "n 0 {rc} - " + base64.b64encode(b"log").decode()
    assert _parse_batch(line.format(rc=152), "n", 1)[0].status is RunStatus.TIMEOUT  # SIGXCPU: the program's own
    for rc in (124, 137):
        assert _parse_batch(line.format(rc=rc), "n", 1)[0].status is RunStatus.STALLED
    for run in (ScadRun(RunStatus.STALLED, log="log"), ScadRun(RunStatus.STALLED, log=KILLED)):
        v = CadVerifier()._judge(TASK, None, run)  # type: ignore[arg-type]  # a stall never reads the target
        assert v.status is VerdictStatus.TIMEOUT and not v.ok and "stalled" in v.details
