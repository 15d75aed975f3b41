"""The `posttrain` command line: a thin typer app over the packages.

Covers: `quickstart`, `base`, `train`, `config`, and `sandbox` (mounted
from the sandbox package when present). User errors (bad config, bad task
file, missing checkpoint) print one clear line and exit with code 2, never a
traceback. Progress goes to stderr, so `--json` output on stdout stays clean.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from posttrain.errors import UserError

app = typer.Typer(
    help="posttrain: post-train language models with RL from verifiable rewards.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()

SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override a config field: --set rl.lr=1e-4 (repeatable).")]


def _user_errors() -> tuple[type[BaseException], ...]:
    from posttrain.config import ConfigError
    from posttrain.models.config import UnsupportedModelError
    from posttrain.models.io import CheckpointError
    from posttrain.rl.trainer import RunExistsError
    from posttrain.tasks import TaskFileError

    return (UserError, ConfigError, TaskFileError, CheckpointError, UnsupportedModelError, RunExistsError, FileNotFoundError)


@contextmanager
def _friendly():
    try:
        yield
    except _user_errors() as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: the newest checkpoint is kept; continue with --resume")
        raise typer.Exit(130) from None


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


def _step_info(metrics: dict[str, float], held_out: float | None) -> str:
    info = f"reward {metrics['reward']:.3f}  pass {metrics['pass_rate']:.3f}  kept {int(metrics['groups_kept'])}"
    if held_out is not None:
        info += f"  held-out {held_out:.3f}"
    return info


@app.command()
def quickstart(
    seed: Annotated[int, typer.Option(help="Seed for the base model and the RL run.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with the figures instead of a table.")] = False,
    config: Annotated[Optional[Path], typer.Option(help="A TOML config to start from instead of the defaults.")] = None,
    set_: SetOpt = None,
) -> None:
    """Build (or reuse) the tiny base model, run GRPO on arithmetic, and show held-out accuracy before and after."""
    from posttrain.config import load_config
    from posttrain.quickstart import run_quickstart

    with _friendly():
        overrides = [f"seed={seed}", f"model.base.seed={seed}", *(set_ or [])]
        cfg = load_config(config, overrides)
        if cfg.name == "quickstart":
            cfg = cfg.model_copy(update={"name": f"quickstart-seed{seed}"})
        with _progress() as progress:
            base_task = progress.add_task("base model", total=cfg.model.base.max_steps, info="")
            train_task = None
            held: dict[str, float | None] = {"acc": None}

            def on_phase(msg: str) -> None:
                nonlocal train_task
                err.print(f"[cyan]>[/] {msg}")
                if msg == "GRPO":
                    progress.update(base_task, visible=False)
                    train_task = progress.add_task("GRPO", total=cfg.train.steps, info="")

            def on_base_eval(step: int, acc: float) -> None:
                progress.update(base_task, completed=step, info=f"held-out greedy {acc:.3f}")

            def on_step(r) -> None:
                if train_task is not None:
                    progress.update(train_task, completed=r.step, info=_step_info(r.metrics, held["acc"]))

            def on_eval(step: int, m: dict[str, float]) -> None:
                held["acc"] = m.get("greedy_accuracy")

            result = run_quickstart(cfg, on_phase=on_phase, on_base_eval=on_base_eval, on_step=on_step, on_eval=on_eval)
        if as_json:
            print(json.dumps(result.to_dict()))
            return
        table = Table(title=f"quickstart (seed {seed}): {result.n_held_out} held-out problems")
        table.add_column("metric")
        table.add_column("before", justify="right")
        table.add_column("after", justify="right")
        table.add_column("change", justify="right")
        for name, b, a in [
            ("greedy accuracy", result.greedy_before, result.greedy_after),
            (f"sampled pass@1 (T=1, {result.pass1_samples_per_task}/task)", result.pass1_before, result.pass1_after),
        ]:
            table.add_row(name, f"{b:.1%}", f"{a:.1%}", f"{(a - b) * 100:+.1f} pts")
        out.print(table)
        base_note = "reused from cache" if result.base_cached else f"built in {result.base_seconds:.0f}s"
        out.print(
            f"base model {base_note}; {result.steps} GRPO steps in {result.train_seconds:.0f}s; "
            f"total {result.seconds:.0f}s\nrun stored in {result.run_dir} (run.sqlite, tensorboard/, checkpoints/, final/)"
        )


@app.command()
def base(
    seed: Annotated[int, typer.Option(help="Pre-training seed.")] = 0,
    rebuild: Annotated[bool, typer.Option(help="Build again even if this machine has it cached.")] = False,
    set_: SetOpt = None,
) -> None:
    """Pre-train (or find in the cache) the built-in ~1M-parameter arithmetic model; prints its path."""
    from posttrain.builtin import ensure_base
    from posttrain.config import load_config

    with _friendly():
        cfg = load_config(None, [f"model.base.seed={seed}", *(set_ or [])]).model.base
        with _progress() as progress:
            task = progress.add_task("pre-training", total=cfg.max_steps, info="")
            build = ensure_base(
                cfg,
                on_eval=lambda s, a: progress.update(task, completed=s, info=f"held-out greedy {a:.3f}"),
                rebuild=rebuild,
            )
        how = "cached" if build.cached else f"built in {build.seconds:.0f}s, {build.steps} steps"
        band = "" if build.in_band else f" [yellow](outside the band {cfg.target_low:.2f}-{cfg.target_high:.2f})[/]"
        err.print(f"base model ({how}): held-out greedy accuracy {build.accuracy:.3f}{band}")
        print(build.path)


@app.command()
def train(
    config: Annotated[Path, typer.Argument(help="A TOML run config (see examples/).")],
    set_: SetOpt = None,
    resume: Annotated[bool, typer.Option(help="Continue the run from its newest checkpoint.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Delete an existing run of the same name first.")] = False,
) -> None:
    """Run RL training from a config; progress live, results in <run_dir>/<name>."""
    from posttrain.config import load_config
    from posttrain.rl.trainer import Trainer

    with _friendly():
        if resume and overwrite:
            raise UserError("--resume and --overwrite exclude each other")
        cfg = load_config(config, set_ or [])
        with _progress() as progress:
            if cfg.model.path is None:  # the built-in base model: show its (one-time) build
                from posttrain.builtin import ensure_base

                base_task = progress.add_task("base model", total=cfg.model.base.max_steps, info="")
                build = ensure_base(
                    cfg.model.base,
                    on_eval=lambda s, a: progress.update(base_task, completed=s, info=f"held-out greedy {a:.3f}"),
                )
                progress.update(base_task, visible=False)
                cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(build.path)})})
            task = progress.add_task("GRPO", total=cfg.train.steps, info="")
            held: dict[str, float | None] = {"acc": None}

            def on_eval(step: int, m: dict[str, float]) -> None:
                held["acc"] = m["greedy_accuracy"]

            def on_step(r) -> None:
                progress.update(task, completed=r.step, info=_step_info(r.metrics, held["acc"]))

            trainer = Trainer(cfg, resume=resume, overwrite=overwrite, on_step=on_step, on_eval=on_eval)
            progress.update(task, completed=trainer.step)
            try:
                result = trainer.run()
                final_dir = trainer.final_model_dir()
            finally:
                trainer.close()
        acc = result.final_eval.get("greedy_accuracy")
        err.print(
            f"trained {result.steps} steps in {result.seconds:.0f}s"
            + (f"; held-out greedy accuracy {acc:.3f}" if acc is not None else "")
        )
        print(json.dumps({"run_dir": str(result.run_dir), "final_model": str(final_dir), **result.final_eval}))


@app.command("config")
def show_config(
    config: Annotated[Optional[Path], typer.Argument(help="A TOML run config; omitted: the defaults.")] = None,
    set_: SetOpt = None,
) -> None:
    """Print the resolved configuration (defaults <- file <- --set) as JSON."""
    from posttrain.config import load_config

    with _friendly():
        print(json.dumps(load_config(config, set_ or []).model_dump(), indent=2))


def _mount_optional_apps() -> None:
    try:
        from posttrain.sandbox.cli import app as sandbox_app
    except ImportError:
        return
    app.add_typer(sandbox_app, name="sandbox", help="Run commands in the isolated sandbox.")


_mount_optional_apps()


def _register_package_commands() -> None:
    from posttrain.engine.cli import register as engine_commands
    from posttrain.eval.cli import register as eval_commands
    from posttrain.tasks.cli import register as tasks_commands

    for register in (tasks_commands, engine_commands, eval_commands):
        register(app)


_register_package_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
