"""The built-in CAD base (`model.base.family = "cad:parts"`): pre-trained on the brief level's gold programs in a
256-position model, its band checked by the sandboxed `cad` verifier, its level bounded, its key its own."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from posttrain.config import BaseModelConfig
from posttrain.models import load_model
from posttrain.recipes.builtin import base_key, base_task_source, ensure_base

TINY = dict(hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, batch_size=4, max_steps=2,
            eval_every=2, eval_size=16)


def test_the_cad_family_defaults_and_its_level_bound():
    cfg = BaseModelConfig(family="cad:parts")
    assert (cfg.digits, cfg.target_low, cfg.target_high, cfg.eval_size) == (1, 0.30, 0.60, 64)
    assert base_key(cfg).startswith("cad-parts-l1-s0-") and base_key(cfg) != base_key(BaseModelConfig(family="cad:parts", seed=1))
    source = base_task_source(cfg)
    assert source.brief and source.level == 1
    with pytest.raises(ValidationError, match="CAD level"):
        BaseModelConfig(family="cad:parts", digits=4)


@pytest.mark.slow
def test_a_cad_base_is_built_and_checked_by_the_cad_verifier(tmp_path, monkeypatch):
    import posttrain.recipes.builtin as builtin

    judged = []
    real = builtin.evaluate_accuracy

    def spy(engine, tasks, verifier, max_tokens, **kw):
        judged.append((type(verifier).__name__, len(tasks), max_tokens, tasks[0].prompt))
        return real(engine, tasks, verifier, max_tokens, **kw)

    monkeypatch.setattr(builtin, "evaluate_accuracy", spy)
    build = ensure_base(BaseModelConfig(family="cad:parts", cache_dir=str(tmp_path), **TINY))
    assert judged and judged[0][0] == "CadVerifier" and judged[0][1] == 16
    assert 80 <= judged[0][2] <= 100 and judged[0][3].startswith("OpenSCAD part, $fn=32: ")  # brief, gold <= ~80 chars
    assert load_model(build.path)[0].config.max_position_embeddings == 256
    meta = json.loads((build.path / "base.json").read_text())
    assert meta["config"]["family"] == "cad:parts" and not build.in_band  # 2 steps: far below its band, said so


def _planted(monkeypatch, holed_pass: float):
    """The band check, planted: every block passes, and the first `holed_pass` share of the holed parts."""
    import posttrain.recipes.builtin as builtin
    from posttrain.eval.accuracy import AccuracyResult

    def check(engine, tasks, verifier, max_tokens, **kw):
        holed = [t for t in tasks if builtin.part_kind(t) == "2"]
        passed = {t.id: 1.0 if builtin.part_kind(t) == "1" else 0.0 for t in tasks}
        for t in holed[: round(holed_pass * len(holed))]:
            passed[t.id] = 1.0
        return AccuracyResult(accuracy=sum(passed.values()) / len(tasks), n_tasks=len(tasks), n_samples=len(tasks),
                              n_errors=0, per_task=passed)

    monkeypatch.setattr(builtin, "evaluate_accuracy", check)


def test_the_band_counts_each_part_kind(tmp_path, monkeypatch):
    from posttrain.recipes.builtin import band_ok

    cfg = BaseModelConfig(family="cad:parts")
    assert cfg.kind_floor == 0.15 and BaseModelConfig().kind_floor is None
    assert band_ok(cfg, 0.5, {"1": 0.6, "2": 0.4}) and not band_ok(cfg, 0.5, {"1": 1.0, "2": 0.0})
    assert not band_ok(cfg, 0.7, {"1": 0.8, "2": 0.6})  # the overall band still holds
    assert band_ok(BaseModelConfig(family="cad:parts", kind_floor=None), 0.5, {"1": 1.0, "2": 0.0})
    assert base_key(cfg) != base_key(BaseModelConfig(family="cad:parts", kind_floor=0.3))
    tiny = dict(TINY, max_steps=4, hidden_size=8, intermediate_size=8, target_low=0.1, target_high=0.9)
    # blocks all pass, holed parts none: inside the overall band (10-90% here), yet out of band; it trains to its cap
    _planted(monkeypatch, 0.0)
    build = ensure_base(BaseModelConfig(family="cad:parts", cache_dir=str(tmp_path / "a"), **tiny))
    assert 0.1 <= build.accuracy <= 0.9 and build.by_kind == {"1": 1.0, "2": 0.0}
    assert not build.in_band and build.steps == 4
    meta = json.loads((build.path / "base.json").read_text())
    assert "per part kind" in meta["warning"] and [c[0] for c in meta["checks"]] == [2, 4]
    # a third of the holed parts pass as well: in band at the first check
    _planted(monkeypatch, 1 / 3)
    build = ensure_base(BaseModelConfig(family="cad:parts", cache_dir=str(tmp_path / "b"), **tiny))
    assert build.in_band and build.steps == 2 and build.by_kind["2"] >= 0.15


def test_the_band_check_grades_a_spoiled_verdict_again(monkeypatch):
    """A response whose verdict the machine spoiled (a stalled OpenSCAD run: a TIMEOUT verdict) is graded again,
    not read as the model's failure, so the stop does not depend on the machine's load (issue 42)."""
    import posttrain.recipes.builtin as builtin
    from posttrain.eval.accuracy import AccuracyResult
    from posttrain.types import Verdict, VerdictStatus

    cfg = BaseModelConfig(family="cad:parts", **TINY)
    tasks = builtin.stopping_set(cfg)[:4]
    spoiled = {t.id: t.answer for t in tasks[:2]}  # two right answers the first grading could not judge

    def check(engine, tasks, verifier, max_tokens, **kw):
        per_task = {t.id: 0.0 if t.id in spoiled else 1.0 for t in tasks}
        return AccuracyResult(0.5, len(tasks), len(tasks), len(spoiled), per_task, dict(spoiled))

    graded: list[int] = []

    def regrade(verifier, tasks, responses, timeout=None):
        graded.append(len(tasks))
        if len(graded) == 1:  # still stalled the second time, judged the third
            return [Verdict(0.0, False, VerdictStatus.TIMEOUT) for _ in tasks]
        return [Verdict(1.0, r == t.answer) for t, r in zip(tasks, responses)]

    monkeypatch.setattr(builtin, "evaluate_accuracy", check)
    monkeypatch.setattr("posttrain.rewards.base.score_sync", regrade)
    result = builtin.band_accuracy(None, tasks, None, 96)
    assert result.accuracy == 1.0 and result.n_errors == 0 and not result.errored and graded == [2, 2]
    graded.clear()
    monkeypatch.setattr(builtin, "REGRADE_TRIES", 2)  # never judged: a failure, with a warning
    with pytest.warns(UserWarning, match="2 of 4 responses still unjudged"):
        result = builtin.band_accuracy(None, tasks, None, 96)
    assert result.accuracy == 0.5 and result.n_errors == 2


@pytest.mark.slow
def test_pre_training_does_not_depend_on_the_string_hash_seed(tmp_path):
    """Two processes with different PYTHONHASHSEED build the same tiny CAD base, bit for bit (the band check
    stubbed: its verdicts need OpenSCAD and do not steer training below the band)."""
    import os
    import subprocess
    import sys

    script = (
        "import sys, types, hashlib, torch\n"
        "import posttrain.recipes.builtin as b\n"
        "from posttrain.config import BaseModelConfig\n"
        "b.evaluate_accuracy = lambda *a, **k: types.SimpleNamespace(accuracy=0.0, per_task={}, errored={}, n_tasks=0,"
        " n_samples=0, n_errors=0)\n"
        "b.band_accuracy = lambda *a, **k: b.evaluate_accuracy()\n"
        f"cfg = BaseModelConfig(family='cad:parts', **{dict(TINY, max_steps=3, eval_every=100)!r})\n"
        "b.pretrain_base(cfg, __import__('pathlib').Path(sys.argv[1]))\n"
        "print(hashlib.sha256(open(sys.argv[1] + '/model.safetensors', 'rb').read()).hexdigest())\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / seed)], text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=dict(os.environ, PYTHONHASHSEED=seed, OMP_NUM_THREADS="1"))
             for seed in ("0", "1")]  # the two builds are independent: side by side, one core each
    digests = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            digests.append(out.split()[-1])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert digests[0] == digests[1]


@pytest.mark.slow
def test_a_correcting_base_runs_its_tail_after_the_band_and_from_a_first_phase(tmp_path, monkeypatch):
    """`cad_agent:parts`: programs plus correction episodes until the band, then the correction tail (episodes run as
    greedy episodes at its checks), and the same tail from a first phase's saved weights (`first_phase`)."""
    import posttrain.recipes.builtin as builtin

    monkeypatch.setattr(builtin, "CAD_TAIL_STEPS", 2)
    monkeypatch.setattr(builtin, "CAD_TAIL_CHECK_EVERY", 2)
    monkeypatch.setattr(builtin, "CAD_TAIL_CHECK_PARTS", 2)
    monkeypatch.setattr(builtin, "CAD_EPISODES", 2)
    monkeypatch.setattr(builtin, "CAD_TAIL_EPISODES", 2)
    monkeypatch.setattr(builtin, "CAD_TAIL_PROGRAMS", 2)
    tiny = dict(TINY, hidden_size=8, intermediate_size=8, target_low=0.1, target_high=0.9)
    _planted(monkeypatch, 1 / 3)  # in band at the first check
    build = ensure_base(BaseModelConfig(family="cad_agent:parts", cache_dir=str(tmp_path / "a"), **tiny))
    meta = json.loads((build.path / "base.json").read_text())
    assert build.path.name.startswith("cad-agent-parts-l1-s0-")
    assert load_model(build.path)[0].config.max_position_embeddings == 1024
    assert [t[0] for t in meta["tail"]] == [2] and 0.0 <= meta["tail"][0][1] <= 1.0  # a tiny model: format errors
    assert [c[0] for c in meta["checks"]] == [2, "tail 2"] and build.steps == 4
    again = ensure_base(BaseModelConfig(family="cad_agent:parts", cache_dir=str(tmp_path / "b"), **tiny), first_phase=build.path)
    meta = json.loads((again.path / "base.json").read_text())
    assert meta["started_from"] == build.path.name and again.steps == 6 and [t[0] for t in meta["tail"]] == [2]
    with pytest.raises(ValueError, match="first_phase"):
        ensure_base(BaseModelConfig(family="cad:parts", cache_dir=str(tmp_path / "c"), **tiny), first_phase=build.path)
