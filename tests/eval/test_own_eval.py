"""`posttrain eval --model RUN`: a run evaluated on its own domains, verifiers and splits; RUN@STEP on the
selection half gives that step's in-training held-out figure exactly."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.eval.records import EvalDir
from posttrain.rl.build import build
from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore

runner = CliRunner()


def _with(cfg, **sections):
    return cfg.model_copy(update={k: getattr(cfg, k).model_copy(update=v) for k, v in sections.items()})


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """Two steps of a tiny run on a JSONL file graded `numeric` (tolerance 4: a random model earns some rewards),
    evaluated and checkpointed at every step."""
    from posttrain.config import load_config

    root = tmp_path_factory.mktemp("own")
    tasks = root / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"s{a}-{b}", "prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                             for a in range(10) for b in range(10)))
    cfg = load_config(None, [
        f"model.path='{tiny_model_dir}'", f"run_dir='{root / 'runs'}'", "name='own'", f"tasks.source='{tasks}'",
        "tasks.held_out_fraction=0.4", "reward.verifier='numeric'", "reward.tolerance=4.0", "sampling.n=4",
        "sampling.max_tokens=4", "train.steps=2", "train.prompts_per_step=4", "eval.every=1",
        "eval.size=40", "train.checkpoint_every=1", "tensorboard=false",
    ])
    trainer = Trainer(cfg)
    trainer.run()
    trainer.close()
    return cfg, tasks


def _eval(*args):
    res = runner.invoke(app, ["eval", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("step", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_run_at_step_on_the_selection_half_reproduces_the_in_training_figure(trained, tmp_path, step):
    cfg, _ = trained
    out = tmp_path / f"sel{step}"
    got = _eval("--model", f"{cfg.path}@{step}", "--split", "selection", "--out", str(out))
    with RunStore(cfg.path / "run.sqlite") as store:
        metrics = {s: m for s, name, m in store.evals("held_out")}[step]
        stored = {r["task_id"]: r["response"] for r in store.eval_samples("held_out", step)}
        verifier = store.info()["verifier"]
    assert got["split"] == "selection" and got["verifier"] == verifier and got["verifier_source"] == "run"
    assert got["pass@1"] == metrics["pass@1"] and got["n_tasks"] == metrics["n_tasks"]
    mine = {r.task_id: r.response for r in EvalDir(out).records()}
    assert mine == stored  # every greedy response, not just the rate


@pytest.mark.slow
def test_a_run_without_a_suite_is_graded_by_its_verifier_on_its_reporting_half(trained, tmp_path):
    cfg, tasks = trained
    parts = build(cfg, store=False)
    reporting = {t.id for t in parts.reporting[0].tasks}
    # the case: --suite names the run's own task file, and the run's numeric verifier grades it, held out
    for args in ([], ["--suite", str(tasks)]):
        got = _eval("--model", str(cfg.path), "--out", str(tmp_path / f"r{len(args)}"), *args)
        assert got["split"] == "reporting" and "numeric" in got["verifier"] and got["n_tasks"] == len(reporting)
        assert {t["task_id"] for t in got["tasks"]} == reporting
    train = _eval("--model", str(cfg.path), "--split", "train", "--out", str(tmp_path / "t"))
    held = {t.id for t in parts.domains[0].held_out(1000)}
    assert train["split"] == "train" and not {t["task_id"] for t in train["tasks"]} & held
    exact = _eval("--model", str(cfg.path), "--verifier", "exact", "--out", str(tmp_path / "x"))
    assert exact["verifier_source"] == "--verifier" and "exact" in exact["verifier"] and "numeric" not in exact["verifier"]


def test_bad_split_and_split_without_a_run_are_one_line_errors(trained, tmp_path):
    cfg, tasks = trained
    for args, message in ((["--model", str(cfg.path), "--split", "bogus"], "expected one of selection"),
                          (["--model", "builtin", "--suite", str(tasks), "--split", "train"], "--split applies to")):
        res = runner.invoke(app, ["eval", *args, "--out", str(tmp_path / "e")])
        assert res.exit_code == 2 and message in res.output and res.output.count("error:") == 1, res.output


def test_a_run_whose_stored_config_no_longer_validates_is_one_line(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    with RunStore(old / "run.sqlite") as store:
        store.set_info(config={"sampling": {"n": 1}})  # trained before `sampling.n = 1` was refused
    res = runner.invoke(app, ["eval", "--model", str(old)])
    assert res.exit_code == 2 and "does not validate today" in res.output and res.output.count("error:") == 1, res.output


def test_the_runs_eval_section_sets_the_sampling_and_each_flag_overrides_its_field(trained, tmp_path):
    """A run whose `[eval]` asks for 2 samples at temperature 1, pass@1,2, on its selection half: `posttrain eval
    --model RUN` samples so (its own domains and another suite alike); the flags given win over the section."""
    import shutil

    cfg, _ = trained
    run = tmp_path / "sampled"
    shutil.copytree(cfg.path, run)
    section = {"samples": 2, "temperature": 1.0, "ks": [2, 1], "split": "selection", "seed": 3}
    with RunStore(run / "run.sqlite") as store:
        stored = store.info()["config"]
        store.set_info(config={**stored, "eval": {**stored["eval"], **section}})
    got = _eval("--model", str(run), "--out", str(tmp_path / "a"))
    assert got["split"] == "selection" and got["n_samples"] == 2 * got["n_tasks"] and "pass@2" in got
    assert EvalDir(tmp_path / "a").meta()["seed"] == 3
    other = _eval("--model", str(run), "--suite", "arith:add", "--limit", "3", "--out", str(tmp_path / "b"))
    assert other["n_samples"] == 6 and "pass@2" in other
    flags = _eval("--model", str(run), "-n", "1", "-t", "0", "-k", "1", "--split", "reporting", "--seed", "0",
                  "--out", str(tmp_path / "c"))
    plain = _eval("--model", str(cfg.path), "--out", str(tmp_path / "d"))  # the run with the default section
    assert flags["split"] == "reporting" and flags["n_samples"] == flags["n_tasks"] and "pass@2" not in flags
    assert flags["pass@1"] == plain["pass@1"] and flags["n_tasks"] == plain["n_tasks"]
