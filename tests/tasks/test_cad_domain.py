"""The `cad:parts` domain: gold programs pass and a trivial program fails at every level, knobs, drawings,
bad options, and a JSONL task that brings its own target mesh."""

from __future__ import annotations

import json
import re

import pytest

from posttrain.rewards.base import score_sync
from posttrain.rewards.cad import extract_program
from posttrain.rewards.cad_parts import part_from_dict, part_solid
from posttrain.tasks import TaskFileError
from posttrain.tasks.cad import NULL_PROGRAM, PASS_IOU, PartsSource, drawing_svg
from posttrain.tasks.domains import load_domain
from posttrain.tasks.validate import validate_suite


# level 1 stays in the fast subset; 2 and 3 (several seconds each) run in the whole suite
@pytest.mark.parametrize("level", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_gold_passes_and_the_trivial_program_fails_at_every_level(level):
    report = validate_suite(load_domain("cad:parts", level=level, limit=6).suite())
    assert report.ok and report.passed == report.total == 6 and not report.null_failures, report.to_dict()
    assert all(r.null_score < 0.5 for r in report.rows)


def test_a_wrong_gold_program_would_be_caught():
    """The target is built from the feature list, not from the gold program: a gold that drifts fails."""
    domain = load_domain("cad:parts", level=2, limit=3)
    task = domain.suite().tasks[0]
    drifted = task.answer.replace("cube([", "cube([10 + ", 1)
    (v,) = score_sync(domain.verifier, [task], [drifted])
    assert v.ok and not v.passed


def test_levels_grow_and_knobs_apply():
    feats = {lvl: max(len(t.meta["target_part"]["features"]) for t in PartsSource(level=lvl).take(30)) for lvl in (1, 2, 3)}
    assert feats[1] <= 2 < feats[3]
    more = PartsSource(level=2, features=4).take(20)
    assert max(len(t.meta["target_part"]["features"]) for t in more) > max(
        len(t.meta["target_part"]["features"]) for t in PartsSource(level=2).take(20))
    assert all(t.meta["pass_iou"] == PASS_IOU[3] for t in PartsSource(level=3).take(5))
    assert all(t.meta["pass_iou"] == 0.99 for t in PartsSource(level=1, pass_iou=0.99).take(5))


def test_derive_mode_gives_the_numbers_only_in_the_drawing():
    plain = PartsSource(level=1).take(5)
    derived = PartsSource(level=1, derive=True).take(5)
    for t in plain:
        assert "```svg" not in t.prompt and re.search(r"\d+ x \d+ x \d+", t.prompt)
    for t in derived:
        text = t.prompt.split("```svg")[0]
        assert "```svg" in t.prompt and not re.search(r"\d+ x \d+", text) and t.meta["drawing_svg"] in t.prompt
        size = t.meta["target_part"]["features"][0]["size"]
        assert "x".join(f"{v:g}" for v in size) in t.meta["drawing_svg"]


def test_drawings_are_svg_with_three_views():
    t = PartsSource(level=3).take(1)[0]
    svg = t.meta["drawing_svg"]
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert all(f">{v}</text>" in svg for v in ("top", "front", "right"))
    assert "stroke-dasharray" in svg  # removed features dashed
    assert drawing_svg(part_from_dict(t.meta["target_part"])) == svg


def test_splits_are_disjoint_and_ids_stable():
    src = PartsSource(level=2)
    train = {t.meta["split_key"] for t in src.take(60, "train")}
    held = {t.meta["split_key"] for t in src.take(30, "held_out")}
    assert train and held and not train & held
    assert [t.id for t in src.take(5)] == [t.id for t in PartsSource(level=2).take(5)]


@pytest.mark.parametrize("options, message", [
    ({"level": 4}, "level must be 1, 2 or 3"), ({"features": -1}, "features"), ({"pass_iou": 2}, "pass_iou"),
    ({"derive": "yes"}, "derive"), ({"colour": "red"}, "unknown option"),
])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(TaskFileError, match=message):
        load_domain("cad:parts", **options)
    with pytest.raises(TaskFileError, match="families are: parts"):
        load_domain("cad:gears")


def test_a_jsonl_task_brings_its_own_target_mesh(tmp_path):
    solid = part_solid(part_from_dict({"features": [{"op": "add", "shape": "box", "at": [0, 0, 0], "size": [4, 3, 2]}]}))
    import trimesh

    trimesh.Trimesh(solid.vertices, solid.faces).export(tmp_path / "block.stl")
    rows = [{"id": "block", "prompt": "A 4 x 3 x 2 block at the origin.", "answer": "cube([4, 3, 2]);",
             "meta": {"verifier": "cad", "target_mesh": str(tmp_path / "block.stl"), "pass_iou": 0.99}}]
    path = tmp_path / "parts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    domain = load_domain(str(path))
    report = validate_suite(domain.suite())
    assert report.ok
    (task,) = domain.suite().tasks
    good, bad = score_sync(domain.verifier, [task, task], ["cube([4, 3, 2]);", NULL_PROGRAM])
    assert good.passed and not bad.passed and bad.score == pytest.approx(1 / 24, abs=1e-6)
    assert extract_program(task.answer) == "cube([4, 3, 2]);"


def test_posttrain_tasks_validate_cad_parts():
    from typer.testing import CliRunner

    from posttrain.cli import app

    res = CliRunner().invoke(app, ["tasks", "validate", "cad:parts", "-o", "level=2", "--limit", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["ok"] and out["passed"] == out["total"] == 2 and out["verifier"].startswith("cad@")
    assert all(r["ok"] and r["null_status"] == "ok" for r in out["rows"])


def test_the_brief_form_gives_every_number_and_its_one_line_gold_passes():
    """`brief` (the built-in model's form): a one-line feature list, a one-line gold program for the same solid."""
    tasks = PartsSource(level=1, brief=True).take(40)
    for t in tasks:
        assert t.prompt.startswith("OpenSCAD part, $fn=32: cube [") and t.prompt.count("\n") == 1
        assert "\n" not in t.answer and " " not in t.answer and "translate([0,0,0])" not in t.answer
        for number in re.findall(r"-?\d+", t.answer.replace("$fn=32", "")):
            assert number in t.prompt  # every number of the program is given: copying, not arithmetic
    plain, brief = PartsSource(level=1), PartsSource(level=1, brief=True)
    assert all(t.meta["split_key"] == json.dumps(t.meta["target_part"], sort_keys=True) for t in tasks)
    assert [plain.split_of(t) for t in tasks] == [brief.split_of(t) for t in tasks]  # a part's split is the form's too
    with_hole = [t for t in tasks if "minus cylinder" in t.prompt][:3] + [t for t in tasks if "minus" not in t.prompt][:2]
    domain = load_domain("cad:parts", level=1, brief=True)
    verdicts = score_sync(domain.verifier, with_hole, [t.answer for t in with_hole])
    assert all(v.passed for v in verdicts), [v.details for v in verdicts]
    no_hole = [t.answer.replace("difference(){", "union(){") for t in with_hole[:3]]  # the hole filled: must fail
    assert not any(v.passed for v in score_sync(domain.verifier, with_hole[:3], no_hole))
    assert domain.sampling.max_tokens == 160 and domain.meta["brief"] is True


def test_brief_and_derive_exclude_each_other():
    with pytest.raises(TaskFileError, match="brief and derive"):
        load_domain("cad:parts", brief=True, derive=True)
    with pytest.raises(TaskFileError, match="brief"):
        load_domain("cad:parts", brief="yes")
