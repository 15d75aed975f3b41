"""The CLI's user-facing contract: clear one-line errors with exit code 2, JSON on stdout."""

import json

from typer.testing import CliRunner

from posttrain.cli import app

runner = CliRunner()


def test_config_show_prints_resolved_json():
    res = runner.invoke(app, ["config", "--set", "rl.lr=0.001"])
    assert res.exit_code == 0
    assert json.loads(res.stdout)["rl"]["lr"] == 0.001


def test_bad_config_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[train]\nsteps = 'lots'\n")
    res = runner.invoke(app, ["train", str(cfg)])
    assert res.exit_code == 2
    assert "train.steps" in res.output and "Traceback" not in res.output


def test_unknown_key_exit_2(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[trian]\nsteps = 3\n")
    res = runner.invoke(app, ["train", str(cfg)])
    assert res.exit_code == 2 and "unknown key 'trian'" in res.output


def test_train_smoke_and_resume(tiny_model_dir, tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
name = "cli"
run_dir = "{tmp_path / 'runs'}"
tensorboard = false
[model]
path = "{tiny_model_dir}"
[tasks]
digits = 1
[reward]
verifier = "numeric"
tolerance = 4.0
[sampling]
n = 4
max_tokens = 4
[train]
steps = 4
prompts_per_step = 2
eval_size = 10
checkpoint_every = 2
"""
    )
    res = runner.invoke(app, ["train", str(cfg)])
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert (tmp_path / "runs" / "cli" / "final" / "model.safetensors").exists()
    assert last["final_model"].endswith("final")
    again = runner.invoke(app, ["train", str(cfg)])
    assert again.exit_code == 2 and "--resume" in again.output
    more = runner.invoke(app, ["train", str(cfg), "--resume", "--set", "train.steps=6"])
    assert more.exit_code == 0, more.output


def test_bad_task_file_is_reported_with_line(tiny_model_dir, tmp_path):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"prompt": "1+1=", "answer": "2"}\n{oops\n')
    res = runner.invoke(
        app,
        ["train", "--help"],
    )
    assert res.exit_code == 0
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'run_dir = "{tmp_path}"\n[model]\npath = "{tiny_model_dir}"\n[tasks]\nsource = "{tasks}"\n')
    res = runner.invoke(app, ["train", str(cfg)])
    assert res.exit_code == 2
    assert "t.jsonl:2: invalid JSON" in res.output


def test_base_command_prints_cached_path(tmp_path):
    args = ["base", "--seed", "1"]
    for o in [
        "model.base.hidden_size=16", "model.base.num_layers=1", "model.base.intermediate_size=32",
        "model.base.num_heads=2", "model.base.digits=1", "model.base.batch_size=8", "model.base.max_steps=2",
        "model.base.eval_every=1", "model.base.eval_size=16", f"model.base.cache_dir='{tmp_path}'",
    ]:
        args += ["--set", o]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    path = res.stdout.strip().splitlines()[-1]
    assert path.startswith(str(tmp_path)) and (tmp_path / "base").exists()
    again = runner.invoke(app, args)
    assert again.stdout.strip().splitlines()[-1] == path and "cached" in again.output


def test_bad_task_source_is_one_line_exit_2(tiny_model_dir, tmp_path):
    res = runner.invoke(app, ["train", str(_write_min_config(tmp_path, tiny_model_dir)), "--set", "tasks.source=arith:div"])
    assert res.exit_code == 2 and "unknown arithmetic family" in res.output and "Traceback" not in res.output


def _write_min_config(tmp_path, model_dir):
    cfg = tmp_path / "min.toml"
    cfg.write_text(f'run_dir = "{tmp_path}"\n[model]\npath = "{model_dir}"\n')
    return cfg
