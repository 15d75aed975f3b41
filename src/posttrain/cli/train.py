"""`posttrain quickstart`, `base`, `train` and `config`: building the base model, training, and the resolved config.

Covers: the commands' options, their live progress (stderr) and their output (a table, or JSON / a path on
stdout). Does not cover: what they run (`quickstart.py`, `builtin.py`, `rl/trainer.py`, `config.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from posttrain.cli.common import SetOpt, err, friendly, out, progress
from posttrain.errors import UserError

RESUME_NOTE = "the newest checkpoint is kept; continue with --resume"


def step_info(metrics: dict[str, float], held_out: float | None) -> str:
    """The progress bar's text for one training step (and the newest held-out accuracy, once there is one)."""
    info = f"reward {metrics['reward']:.3f}  pass {metrics['pass_rate']:.3f}  kept {int(metrics['groups_kept'])}"
    if held_out is not None:
        info += f"  held-out {held_out:.3f}"
    return info


def quickstart(
    seed: Annotated[int, typer.Option(help="Seed for the base model and the RL run.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with the figures instead of a table.")] = False,
    config: Annotated[Optional[Path], typer.Option(help="A TOML config to start from instead of the defaults.")] = None,
    set_: SetOpt = None,
) -> None:
    """Build (or reuse) the tiny base model, run GRPO on arithmetic, and show held-out accuracy before and after."""
    from posttrain.config import load_config
    from posttrain.quickstart import run_quickstart

    with friendly():
        overrides = [f"seed={seed}", f"model.base.seed={seed}", *(set_ or [])]
        cfg = load_config(config, overrides)
        if cfg.name == "quickstart":
            cfg = cfg.model_copy(update={"name": f"quickstart-seed{seed}"})
        with progress() as bars:
            base_task = bars.add_task("base model", total=cfg.model.base.max_steps, info="")
            train_task = None
            held: dict[str, float | None] = {"acc": None}

            def on_phase(msg: str) -> None:
                nonlocal train_task
                err.print(f"[cyan]>[/] {msg}")
                if msg == "GRPO":
                    bars.update(base_task, visible=False)
                    train_task = bars.add_task("GRPO", total=cfg.train.steps, info="")

            def on_base_eval(step: int, acc: float) -> None:
                bars.update(base_task, completed=step, info=f"held-out greedy {acc:.3f}")

            def on_step(r) -> None:
                if train_task is not None:
                    bars.update(train_task, completed=r.step, info=step_info(r.metrics, held["acc"]))

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


def base(
    seed: Annotated[int, typer.Option(help="Pre-training seed.")] = 0,
    rebuild: Annotated[bool, typer.Option(help="Build again even if this machine has it cached.")] = False,
    set_: SetOpt = None,
) -> None:
    """Pre-train (or find in the cache) the built-in ~1M-parameter arithmetic model; prints its path."""
    from posttrain.builtin import ensure_base
    from posttrain.config import load_config

    with friendly():
        cfg = load_config(None, [f"model.base.seed={seed}", *(set_ or [])]).model.base
        with progress() as bars:
            task = bars.add_task("pre-training", total=cfg.max_steps, info="")
            build = ensure_base(
                cfg,
                on_eval=lambda s, a: bars.update(task, completed=s, info=f"held-out greedy {a:.3f}"),
                rebuild=rebuild,
            )
        how = "cached" if build.cached else f"built in {build.seconds:.0f}s, {build.steps} steps"
        band = "" if build.in_band else f" [yellow](outside the band {cfg.target_low:.2f}-{cfg.target_high:.2f})[/]"
        err.print(f"base model ({how}): held-out greedy accuracy {build.accuracy:.3f}{band}")
        print(build.path)


def train(
    config: Annotated[Path, typer.Argument(help="A TOML run config (see examples/).")],
    set_: SetOpt = None,
    resume: Annotated[bool, typer.Option(help="Continue the run from its newest checkpoint.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Delete an existing run of the same name first.")] = False,
) -> None:
    """Run RL training from a config; progress live, results in <run_dir>/<name>."""
    from posttrain.config import load_config
    from posttrain.rl.trainer import Trainer

    with friendly(RESUME_NOTE):
        if resume and overwrite:
            raise UserError("--resume and --overwrite exclude each other")
        cfg = load_config(config, set_ or [])
        with progress() as bars:
            if cfg.model.path is None:  # the built-in base model: show its (one-time) build
                from posttrain.builtin import ensure_base

                base_task = bars.add_task("base model", total=cfg.model.base.max_steps, info="")
                build = ensure_base(
                    cfg.model.base,
                    on_eval=lambda s, a: bars.update(base_task, completed=s, info=f"held-out greedy {a:.3f}"),
                )
                bars.update(base_task, visible=False)
                cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(build.path)})})
            task = bars.add_task("GRPO", total=cfg.train.steps, info="")
            held: dict[str, float | None] = {"acc": None}

            def on_eval(step: int, m: dict[str, float]) -> None:
                held["acc"] = m["greedy_accuracy"]

            def on_step(r) -> None:
                bars.update(task, completed=r.step, info=step_info(r.metrics, held["acc"]))

            trainer = Trainer(cfg, resume=resume, overwrite=overwrite, on_step=on_step, on_eval=on_eval)
            bars.update(task, completed=trainer.step)
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


def show_config(
    config: Annotated[Optional[Path], typer.Argument(help="A TOML run config; omitted: the defaults.")] = None,
    set_: SetOpt = None,
) -> None:
    """Print the resolved configuration (defaults <- file <- --set) as JSON."""
    from posttrain.config import load_config

    with friendly():
        print(json.dumps(load_config(config, set_ or []).model_dump(), indent=2))
