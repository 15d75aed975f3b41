"""The scheduler in a real (tiny) run: per-domain figures and failures stored, resume identity, and the failure
suite's round trip through `posttrain failures --export` and `posttrain eval`."""

import json

import pytest
import torch
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.config import load_config
from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore

DOMAIN_KEYS = {"pass_rate", "difficulty", "share", "informative_frac", "seconds", "tokens", "failures", "retired"}
TIMING = ("rollout_s", "learn_s", "step_s", "verifier_latency_p50", "verifier_latency_p95", "verifier_latency_max")


@pytest.fixture
def cfg(tiny_model_dir, tmp_path):
    return load_config(None, [
        f"model.path='{tiny_model_dir}'", f"run_dir='{tmp_path / 'runs'}'", "name='sched'",
        'domains=[{source="arith:add", options={digits=1}, verifier={type="numeric", abs_tol=4.0}},'
        ' {source="arith:sub", options={digits=1}, band=[1, 2]}]',
        "sampling.n=4", "sampling.max_tokens=4", "train.steps=4", "train.prompts_per_step=4", "eval.size=20",
        "eval.every=0", "train.checkpoint_every=2", "train.curriculum='scheduler'", "tensorboard=false",
        "scheduler.band_window=8",
    ])


def _run(cfg, name, stop_at=None, resume=False):
    c = cfg.model_copy(update={"name": name})
    trainer = Trainer(c, resume=resume)
    trainer.run(stop_at=stop_at)
    trainer.close()
    return trainer, c


@pytest.mark.slow
def test_the_scheduler_stores_per_domain_figures_and_categorised_failures(cfg):
    trainer, c = _run(cfg, "figures")
    with RunStore(c.path / "run.sqlite") as store:
        rows = store.domains()
        assert {s for s, _ in rows} == {1, 2, 3, 4}
        assert {r.domain for _, r in rows} == {"arith:add", "arith:sub"}
        assert all(DOMAIN_KEYS <= set(r.metrics) for _, r in rows)
        fails = store.failures()
        assert fails and all(r.category in {"wrong_answer", "format_error", "truncated"} for _, r in fails)
        assert sum(1 for _, r in fails) == sum(m["scheduler/failures"] for _, m in store.steps())
        assert store.failure_tasks()
        assert "scheduler/domains_active" in store.steps()[-1][1]


@pytest.mark.slow
def test_resume_with_scheduler_state_is_the_uninterrupted_run(cfg):
    full, full_cfg = _run(cfg, "full")
    _run(cfg, "cut", stop_at=3)
    resumed, cut_cfg = _run(cfg, "cut", resume=True)
    for (k, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), k
    assert resumed.curriculum.state_dict()["domains"] == full.curriculum.state_dict()["domains"]
    with RunStore(full_cfg.path / "run.sqlite") as s1, RunStore(cut_cfg.path / "run.sqlite") as s2:
        strip = lambda m: {k: v for k, v in m.items() if k not in TIMING}  # noqa: E731
        assert [(s, strip(m)) for s, m in s1.steps()] == [(s, strip(m)) for s, m in s2.steps()]
        tasks = "SELECT step, group_idx, task_id FROM groups ORDER BY step, group_idx"
        assert list(s1.db.execute(tasks)) == list(s2.db.execute(tasks))  # the same decisions, step by step
        cols = lambda s: [(st, r.domain, {k: v for k, v in r.metrics.items() if k not in ("seconds", "tokens")})  # noqa: E731
                          for st, r in s.domains()]
        assert cols(s1) == cols(s2)
        assert [(st, r) for st, r in s1.failures()] == [(st, r) for st, r in s2.failures()]


@pytest.mark.slow
def test_failures_export_round_trips_through_posttrain_eval(cfg, tmp_path, tiny_model_dir):
    _, c = _run(cfg, "mined")
    runner = CliRunner()
    shown = runner.invoke(app, ["failures", str(c.path), "--json"])
    assert shown.exit_code == 0, shown.output
    summary = json.loads(shown.output)
    assert summary["total"] > 0 and sum(summary["by_category"].values()) == summary["total"]
    out = tmp_path / "suite.jsonl"
    done = runner.invoke(app, ["failures", str(c.path), "--domain", "arith:add", "--export", str(out), "--json"])
    assert done.exit_code == 0, done.output
    exported = json.loads(done.output)["export"]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == exported["tasks"] > 0 and exported["without_verifier"] == 0
    # --since keeps what the late policy still fails: exactly the tasks failed from that step on
    late = tmp_path / "late.jsonl"
    assert runner.invoke(app, ["failures", str(c.path), "--domain", "arith:add", "--since", "3", "--export",
                               str(late)]).exit_code == 0
    late_lines = [json.loads(x) for x in late.read_text().splitlines()]
    with RunStore(c.path / "run.sqlite") as store:
        want = {r.task_id for s, r in store.failures("arith:add") if s >= 3}
        assert want != {r.task_id for _, r in store.failures("arith:add")}  # the filter has something to drop
    assert {x["id"] for x in late_lines} == want and all(x["meta"]["failure"]["run_step"] >= 3 for x in late_lines)
    # --min-fail-rate keeps the tasks failed in at least that share of their samples, counted here from the samples
    usual = tmp_path / "usual.jsonl"
    assert runner.invoke(app, ["failures", str(c.path), "--domain", "arith:add", "--min-fail-rate", "0.75",
                               "--export", str(usual)]).exit_code == 0
    with RunStore(c.path / "run.sqlite") as store:
        tried: dict[str, list[int]] = {}
        for task_id, passed in store.db.execute("SELECT task_id, passed FROM samples"):
            tried.setdefault(task_id, []).append(int(passed or 0))
    failed_ids = {x["id"] for x in lines}
    usually = {t for t in failed_ids if tried[t].count(0) >= 0.75 * len(tried[t])}
    assert {json.loads(x)["id"] for x in usual.read_text().splitlines()} == usually
    assert 0 < len(usually) < len(failed_ids)  # the filter keeps some failed tasks and drops others
    assert all(x["meta"]["verifier"] == {"type": "numeric", "extract": "full", "abs_tol": 4.0, "rel_tol": 0.0}
               or x["meta"]["verifier"]["type"] == "numeric" for x in lines)
    # the failing responses, re-graded by the exported suite's own verifier, fail again: the suite judges as training did
    graded = runner.invoke(app, ["eval", "--suite", str(out), "--responses", exported["responses"], "--json"])
    assert graded.exit_code == 0, graded.output
    assert json.loads(graded.output)["n_tasks"] == len(lines)
    assert json.loads(graded.output)["pass@1"] == 0.0
    # and a model runs on it as on any suite
    ran = runner.invoke(app, ["eval", "--suite", str(out), "--model", str(tiny_model_dir), "--json",
                              "--out", str(tmp_path / "ev")])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.output.strip().splitlines()[-1])["n_tasks"] == len(lines)


def test_an_unknown_category_is_a_one_line_error(cfg, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["failures", str(tmp_path), "--category", "bogus"])
    assert result.exit_code == 2 and "unknown category" in result.output
