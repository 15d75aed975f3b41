"""The CLI's user-facing contract: clear one-line errors with exit code 2, JSON on stdout."""

import json

import pytest
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


@pytest.mark.slow
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
checkpoint_every = 2
[eval]
size = 10
"""
    )
    res = runner.invoke(app, ["train", str(cfg)])
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert (tmp_path / "runs" / "cli" / "final" / "model.safetensors").exists()
    assert last["final_model"].endswith("final")
    # the end-of-run evaluation selected best/: where it is, its step and value, on stderr and in the JSON line
    assert last["best_model"].endswith("best") and (tmp_path / "runs" / "cli" / "best" / "config.json").exists()
    assert last["best_step"] == 4 and last["best_value"] == last["greedy_accuracy"]
    assert "final model:" in res.stderr and f"best model:  {last['best_model']}" in res.stderr
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_python_dash_m_runs_the_app():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "posttrain.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "quickstart" in res.stdout and "sandbox" in res.stdout


def _run_config(tmp_path, tiny_model_dir, name: str, extra: str = ""):
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f"""
name = "{name}"
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
checkpoint_every = 0
[eval]
every = 1
size = 10
{extra}
""")
    return cfg


@pytest.mark.slow
def test_train_prints_the_early_warning_once_per_alert(tiny_model_dir, tmp_path, monkeypatch):
    """A held-out series that keeps falling: each alert the run stores is one yellow line on stderr, and the
    trainer's Python warning is not printed a second time."""
    from posttrain.rl.selection import Best
    from posttrain.store import RunStore

    def falling(best, step, value, drop, patience):  # every evaluation after the first counts as a sustained drop
        if best is None:
            return Best(step, value), True, False
        return Best(best.step, best.value, best.below + 1), False, True

    monkeypatch.setattr("posttrain.rl.held_out.observe", falling)
    res = runner.invoke(app, ["train", str(_run_config(tmp_path, tiny_model_dir, "warn"))])
    assert res.exit_code == 0, res.output
    with RunStore(tmp_path / "runs" / "warn" / "run.sqlite") as store:
        alerts = store.alerts()
    lines = [line for line in res.stderr.splitlines() if line.startswith("warning: step")]
    # the first evaluation is the initial model's (step 0, eval.at_start): every later one is a drop from it
    assert len(alerts) == 4 and [a["step"] for a in alerts] == [1, 2, 3, 4]
    assert len(lines) == 4 and all("below its best" in line and "(step 0)" in line for line in lines)
    assert "UserWarning" not in res.output and "HeldOutRegression" not in res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["best_step"] == 0 and last["regressing"] == 1.0


def test_progress_shows_held_out_and_best_so_far():
    from posttrain.cli.train import HeldOut, regression_warning, step_info
    from posttrain.config import EvalConfig

    step = {"reward": 0.5, "pass_rate": 0.25, "groups_kept": 2}
    held = HeldOut("greedy_accuracy")
    assert "held-out" not in step_info(step, held)
    held.update({"greedy_accuracy": 0.4, "best": 0.45, "best_step": 30, "regressing": 0.0})
    assert step_info(step, held).endswith("held-out 0.400 (best 0.450 @ 30)")
    settings = EvalConfig()
    assert regression_warning(40, {"greedy_accuracy": 0.4, "best": 0.45, "best_step": 30, "regressing": 0.0}, settings) is None
    line = regression_warning(40, {"greedy_accuracy": 0.3, "best": 0.45, "best_step": 30, "regressing": 1.0}, settings)
    assert line is not None and "step 40" in line and "0.300" in line and "best 0.450 (step 30)" in line


def test_progress_into_a_log_file_says_each_step_as_it_comes(capsys):
    """stderr redirected to a file: rich draws a bar only when it stops, so a killed run would have left no line.
    The plain lines come as the steps do (throttled), and a terminal keeps the bar alone."""
    import io
    from types import SimpleNamespace

    from rich.console import Console
    from rich.progress import Progress

    from posttrain.cli.train import TrainingProgress
    from posttrain.config import EvalConfig

    def drive(plain):
        now = [0.0]
        bars = Progress(console=Console(file=io.StringIO(), force_terminal=not plain))
        live = TrainingProgress(bars, EvalConfig(), bars.add_task("GRPO", total=6, info=""), every_s=10, clock=lambda: now[0])
        assert live.plain is plain  # told by the console, not by the caller
        for step, t in enumerate([0, 4, 11, 14, 25, 26], start=1):
            now[0] = t
            live.on_step(SimpleNamespace(step=step, metrics={"reward": step / 10, "pass_rate": 0.5, "groups_kept": 2}))
            if step == 2:
                live.on_eval(2, {"greedy_accuracy": 0.4, "best": 0.4, "best_step": 2})
        return [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]

    lines = drive(plain=True)
    assert [line.split(":")[0] for line in lines] == ["step 1/6", "step 2/6 (evaluated)", "step 4/6", "step 5/6", "step 6/6"]
    assert "reward 0.600" in lines[-1] and "held-out 0.400" in lines[-1]
    assert drive(plain=False) == []


def _run_with_best(tmp_path, tiny_model_dir):
    """A run directory holding final/ and a best/ kept at step 3."""
    from posttrain.models.io import load_model, save_model
    from posttrain.store.run_store import RunStore

    run = tmp_path / "run"
    RunStore(run / "run.sqlite").close()
    model, tok = load_model(tiny_model_dir)
    for sub, step in (("final", 4), ("best", 3)):
        save_model(model, tok, run / sub)
        (run / sub / "posttrain.json").write_text(json.dumps({"step": step}))
    return run


@pytest.mark.slow
def test_eval_and_serve_say_a_run_resolves_to_its_best(tmp_path, tiny_model_dir, monkeypatch):
    run = _run_with_best(tmp_path, tiny_model_dir)
    res = runner.invoke(app, ["eval", "--model", str(run), "--suite", "arith:add", "--limit", "2", "--out",
                              str(tmp_path / "ev"), "--json"])
    assert res.exit_code == 0, res.output
    assert f"{run}: its best/ model (step 3, selected on held-out problems" in res.stderr
    assert f"--model {run / 'final'}" in res.stderr
    assert json.loads(res.stdout)["n_samples"] == 2  # the note is on stderr: stdout stays one JSON object
    import socket

    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)  # everything up to serving, not serving
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    res = runner.invoke(app, ["serve", str(run), "--port", str(port)])
    assert res.exit_code == 0, res.output
    assert f"{run}: its best/ model (step 3" in res.stderr and "serving" in res.stderr


@pytest.mark.slow
def test_export_writes_gguf_files_that_hold_the_checkpoints_weights(tiny_model_dir, tmp_path):
    import gguf  # the dev extra installs it (posttrain[gguf])
    import numpy as np

    from posttrain.models import load_model

    model, _ = load_model(tiny_model_dir)
    embedding = model.state_dict()["model.embed_tokens.weight"].numpy()
    sizes = {}
    for dtype in ("f32", "q8_0"):
        path = tmp_path / "out" / f"tiny-{dtype}.gguf"
        res = runner.invoke(app, ["export", str(tiny_model_dir), str(path), "--dtype", dtype])
        assert res.exit_code == 0, res.output
        assert f"wrote {path}" in res.stdout.replace("\n", "")
        reader = gguf.GGUFReader(str(path))
        assert reader.fields["general.architecture"].contents() == "llama"
        (emb,) = [t for t in reader.tensors if t.name == "token_embd.weight"]
        got = np.asarray(gguf.quants.dequantize(emb.data, emb.tensor_type)).reshape(embedding.shape)
        np.testing.assert_allclose(got, embedding, atol=0 if dtype == "f32" else 0.02 * np.abs(embedding).max())
        sizes[dtype] = path.stat().st_size
    assert sizes["q8_0"] < sizes["f32"]


def test_export_errors_are_one_line_exit_2(tmp_path):
    res = runner.invoke(app, ["export", str(tmp_path / "nowhere"), str(tmp_path / "x.gguf")])
    assert res.exit_code == 2 and "not a checkpoint directory" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["export", str(tmp_path), str(tmp_path / "x.gguf"), "--dtype", "q4"])
    assert res.exit_code == 2 and "--dtype must be one of f32, q8_0; got 'q4'" in res.output


@pytest.mark.slow
def test_draft_distils_a_checkpoint_that_serve_accepts_as_its_draft(tiny_model_dir, tmp_path):
    from posttrain.models import load_model
    from posttrain.resolve import load_served_model

    out = tmp_path / "draft"
    res = runner.invoke(app, ["draft", str(tiny_model_dir), str(out), "--tasks", "arith:add", "--prompts", "16",
                              "--steps", "3", "--hidden", "16", "--layers", "1", "--max-new-tokens", "4"])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())  # rich wraps long lines
    assert "expected acceptance per token" in said and f"--draft {out}" in said
    drafted, _ = load_model(out)
    assert drafted.config.hidden_size == 16 and drafted.config.num_hidden_layers == 1
    served = load_served_model(str(tiny_model_dir), draft=str(out))
    assert served.engine.spec is not None and served.engine.spec.method == "draft"


def test_draft_errors_are_one_line_exit_2(tiny_model_dir, tmp_path):
    res = runner.invoke(app, ["draft", str(tiny_model_dir), str(tmp_path / "d"), "--steps", "0"])
    assert res.exit_code == 2 and "--steps" in res.output
    res = runner.invoke(app, ["draft", str(tmp_path / "nothing"), str(tmp_path / "d")])
    assert res.exit_code == 2 and "Traceback" not in res.output
    res = runner.invoke(app, ["draft", str(tiny_model_dir), str(tmp_path / "d"), "--tasks", "arith:div"])
    assert res.exit_code == 2 and "Traceback" not in res.output
