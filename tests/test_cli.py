"""The CLI's user-facing contract: clear one-line errors with exit code 2, JSON on stdout."""

import json

from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.errors import UserError

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


class _BracketError(UserError):
    """A UserError subclass the CLI has never heard of."""


def test_any_user_error_in_a_command_is_one_line_exit_2(monkeypatch):
    import posttrain.config

    def fail(*_args, **_kwargs):
        raise _BracketError("install it: pip install 'posttrain[serve]'")

    monkeypatch.setattr(posttrain.config, "load_config", fail)
    res = runner.invoke(app, ["config"])
    assert res.exit_code == 2
    assert res.stdout == ""  # stdout stays clean for --json readers
    assert res.stderr.strip().splitlines() == ["error: install it: pip install 'posttrain[serve]'"]  # text, not markup


def test_friendly_turns_user_errors_and_interrupts_into_exit_codes():
    import typer

    from posttrain.cli.common import friendly

    probe = typer.Typer()

    @probe.command()
    def boom(kind: str) -> None:
        with friendly("partial results are kept"):
            if kind == "user":
                raise UserError("bad input")
            if kind == "interrupt":
                raise KeyboardInterrupt
            raise RuntimeError("a bug")

    res = runner.invoke(probe, ["user"])
    assert (res.exit_code, res.stderr.strip()) == (2, "error: bad input")
    res = runner.invoke(probe, ["interrupt"])
    assert (res.exit_code, res.stderr.strip()) == (130, "interrupted: partial results are kept")
    res = runner.invoke(probe, ["bug"])  # not a user error: it propagates (a traceback for a bug report)
    assert isinstance(res.exception, RuntimeError)


def test_resume_without_a_checkpoint_is_one_line_exit_2(tiny_model_dir, tmp_path):
    res = runner.invoke(app, ["train", str(_write_min_config(tmp_path, tiny_model_dir)), "--resume"])
    assert res.exit_code == 2, res.output
    assert "no checkpoint to resume from" in res.stderr and "Traceback" not in res.output
    last = res.stderr.strip().splitlines()[-1]  # after the progress bar the run had started
    assert last.startswith("error: ") and last.endswith("no checkpoint to resume from (checkpoint_every = 100)")


def test_sandbox_file_that_is_not_there_is_one_line_exit_2(tmp_path):
    res = runner.invoke(app, ["sandbox", "run", "--file", f"x={tmp_path / 'missing'}", "--", "true"])
    assert res.exit_code == 2 and res.stderr.strip() == f"error: --file {tmp_path / 'missing'}: No such file or directory"


def test_python_dash_m_runs_the_app():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "posttrain.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "quickstart" in res.stdout and "sandbox" in res.stdout
