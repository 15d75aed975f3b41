"""`posttrain quickstart`, `base`, `train` and `config`: building the base model, training, and the resolved config.

Covers: the commands' options, their live progress (stderr: reward, the newest held-out value and the best so
far, and the early warning when held-out accuracy has dropped for a while) and their output (a table, or JSON /
a path on stdout; `train` also says where final/ and best/ are).
Does not cover: what they run (`recipes/quickstart.py`, `recipes/builtin.py`, `rl/trainer.py`, `config.py`) or when the warning
fires (`rl/selection.py`).
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from posttrain.cli.common import SetOpt, err, friendly, out, progress
from posttrain.errors import UserError

if TYPE_CHECKING:  # annotations only: the commands import config and the trainer when they run
    from rich.progress import Progress, TaskID

    from posttrain.config import EvalConfig
    from posttrain.rl.trainer import StepResult

RESUME_NOTE = "the newest checkpoint is kept; continue with --resume"


@dataclass
class HeldOut:
    """What the live progress shows of the in-training evaluations (the trainer's `on_eval` metrics)."""

    metric: str  # `eval.best_metric`
    value: float | None = None
    best: float | None = None
    best_step: int | None = None

    def update(self, m: dict[str, float]) -> None:
        self.value = m.get(self.metric, self.value)
        if "best" in m:
            self.best, self.best_step = m["best"], int(m["best_step"])


def step_info(metrics: dict[str, float], held: HeldOut) -> str:
    """The progress bar's text for one training step (and the newest held-out value and the best so far)."""
    info = f"reward {metrics['reward']:.3f}  pass {metrics['pass_rate']:.3f}  kept {int(metrics['groups_kept'])}"
    if "staleness_max" in metrics:  # the asynchronous loop: how stale, and who waited on whom
        info += (f"  stale {int(metrics['staleness_max'])}/{metrics['staleness_mean']:.1f}"
                 f"  idle L {metrics['learner_idle_frac']:.0%} P {metrics['producer_idle_frac']:.0%}")
    if "scheduler/domains_active" in metrics:  # the multi-domain scheduler: live and retired domains, failures
        info += (f"  dom {int(metrics['scheduler/domains_active'])}"
                 f"+{int(metrics['scheduler/domains_retired'])}r  inf {1 - metrics['zero_variance_frac']:.0%}"
                 f"  fail {int(metrics['scheduler/failures'])}")
    if held.value is not None:
        info += f"  held-out {held.value:.3f}"
        if held.best is not None:
            info += f" (best {held.best:.3f} @ {held.best_step})"
    return info


def regression_warning(step: int, m: dict[str, float], settings: EvalConfig) -> str | None:
    """The early-warning line for an evaluation whose metrics say `regressing` (None otherwise): one per alert."""
    if not m.get("regressing"):
        return None
    metric = settings.best_metric
    return (f"[yellow]warning: step {step}: held-out {metric} {m[metric]:.3f} has stayed more than "
            f"{settings.warn_drop:g} below its best {m['best']:.3f} (step {int(m['best_step'])}) for {settings.warn_patience}+ "
            "evaluations; best/ keeps the best model[/]")


class TrainingProgress:
    """The trainer's `on_step` / `on_eval` for a progress bar: step figures, held-out value and best so far,
    and the early warning on stderr (yellow, one line per alert) when it fires.

    When stderr is not a terminal (a log file, a pipe), rich draws the bar only when it stops, so a run that is
    killed would leave nothing: there each step's figures go out as a plain line instead, at most one every
    `every_s` seconds (always the first and the last step, and every evaluation)."""

    def __init__(self, bars: Progress, settings: EvalConfig, task: TaskID | None = None, *,
                 every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.bars, self.settings, self.task = bars, settings, task
        self.held = HeldOut(settings.best_metric)
        self.last: dict[str, float] | None = None
        self.plain = not bars.console.is_terminal
        self.every_s, self.clock = every_s, clock
        self._said_at: float | None = None

    def on_step(self, r: StepResult) -> None:
        self.last = r.metrics
        if self.task is None:
            return
        info = step_info(r.metrics, self.held)
        self.bars.update(self.task, completed=r.step, info=info)
        if self.plain:
            now, total = self.clock(), self._total()
            if self._said_at is None or now - self._said_at >= self.every_s or r.step == total:
                self._say(f"step {r.step}/{total}: {info}", now)

    def on_eval(self, step: int, m: dict[str, float]) -> None:
        self.held.update(m)
        line = regression_warning(step, m, self.settings)
        if line is not None:
            err.print(line, highlight=False, soft_wrap=True)
        if self.task is not None and self.last is not None:  # the evaluation follows its step's update
            info = step_info(self.last, self.held)
            self.bars.update(self.task, info=info)
            if self.plain:
                self._say(f"step {step}/{self._total()} (evaluated): {info}", self.clock())

    def _total(self) -> int | None:
        task = next((t for t in self.bars.tasks if t.id == self.task), None)
        return None if task is None or task.total is None else int(task.total)

    def _say(self, text: str, now: float) -> None:
        self._said_at = now
        say(text)


def say(text: str) -> None:
    """A plain line on stderr, unwrapped (paths stay copyable) and never read as markup."""
    err.print(escape(text), highlight=False, soft_wrap=True)


@contextmanager
def alerts_shown_by_the_cli() -> Iterator[None]:
    """The trainer also raises the early warning as a Python warning (for library users); here the progress shows it."""
    from posttrain.monitor import MonitorAlert
    from posttrain.rl.selection import HeldOutRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HeldOutRegression)
        shown = warnings.showwarning

        def show(message, category, *args, **kwargs):  # a run monitor's alert: one yellow line, not a source location
            if issubclass(category, MonitorAlert):
                err.print(f"[yellow]alert: {escape(str(message))}[/]", highlight=False, soft_wrap=True)
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


def quickstart(
    seed: Annotated[int, typer.Option(help="Seed for the base model and the RL run.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with the figures instead of a table.")] = False,
    config: Annotated[Optional[Path], typer.Option(help="A TOML config to start from instead of the defaults.")] = None,
    agent: Annotated[bool, typer.Option("--agent", help="Multi-turn RL instead: the built-in agent learns multi-hop "
                                        "lookups across workspace files (examples/agent.toml).")] = False,
    cad: Annotated[bool, typer.Option("--cad", help="CAD instead: the built-in model writes OpenSCAD programs for "
                                      "generated parts, judged by volumetric IoU in the sandbox (examples/cad.toml).")] = False,
    set_: SetOpt = None,
) -> None:
    """Build (or reuse) the tiny base model, run GRPO on arithmetic (or, with --agent, on multi-turn lookups in the
    sandbox), and show held-out accuracy (episode success) before and after."""
    from posttrain.config import load_config
    from posttrain.recipes.quickstart import AGENT_OVERRIDES, CAD_OVERRIDES, run_quickstart

    with friendly():
        if agent and cad:
            raise UserError("quickstart: --agent and --cad are two different runs; choose one")
        preset = (AGENT_OVERRIDES if agent else CAD_OVERRIDES if cad else []) if config is None else []
        overrides = [*preset, f"seed={seed}", f"model.base.seed={seed}", *(set_ or [])]
        cfg = load_config(config, overrides)
        if cfg.name == "quickstart":
            cfg = cfg.model_copy(update={"name": f"quickstart{'-agent' if agent else '-cad' if cad else ''}-seed{seed}"})
        with progress() as bars, alerts_shown_by_the_cli():
            base_task = bars.add_task("base model", total=cfg.model.base.max_steps, info="")
            live = TrainingProgress(bars, cfg.eval)

            def on_phase(msg: str) -> None:
                err.print(f"[cyan]>[/] {msg}")
                if msg == "GRPO":
                    bars.update(base_task, visible=False)
                    live.task = bars.add_task("GRPO", total=cfg.train.steps, info="")

            def on_base_eval(step: int, acc: float) -> None:
                bars.update(base_task, completed=step, info=f"held-out greedy {acc:.3f}")

            from posttrain.wiring import default_backends

            result = run_quickstart(cfg, on_phase=on_phase, on_base_eval=on_base_eval, on_step=live.on_step,
                                    on_eval=live.on_eval, backends=default_backends())
        if as_json:
            print(json.dumps(result.to_dict()))
            return
        what = "held-out episodes" if agent else "held-out parts" if cad else "held-out problems"
        table = Table(title=f"quickstart (seed {seed}): {result.n_held_out} {what}")
        table.add_column("metric")
        table.add_column("before", justify="right")
        table.add_column("after", justify="right")
        table.add_column("change", justify="right")
        for name, b, a in [
            ("greedy episode success" if agent else "greedy pass rate" if cad else "greedy accuracy", result.greedy_before,
             result.greedy_after),
            (f"sampled pass@1 (T=1, {result.pass1_samples_per_task}/task)", result.pass1_before, result.pass1_after),
        ]:
            table.add_row(name, f"{b:.1%}", f"{a:.1%}", f"{(a - b) * 100:+.1f} pts")
        out.print(table)
        base_note = "reused from cache" if result.base_cached else f"built in {result.base_seconds:.0f}s"
        out.print(
            f"base model {base_note}; {result.steps} GRPO steps in {result.train_seconds:.0f}s; "
            f"total {result.seconds:.0f}s\nrun stored in {result.run_dir} (run.sqlite, tensorboard/, checkpoints/, final/"
            + (", best/)" if (Path(result.run_dir) / "best" / "config.json").exists() else ")")
        )


def base(
    seed: Annotated[int, typer.Option(help="Pre-training seed.")] = 0,
    rebuild: Annotated[bool, typer.Option(help="Build again even if this machine has it cached.")] = False,
    set_: SetOpt = None,
) -> None:
    """Pre-train (or find in the cache) the built-in ~1M-parameter arithmetic model; prints its path."""
    from posttrain.config import load_config
    from posttrain.recipes.builtin import ensure_base

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
        if not build.cached and build.resumed_from is not None:
            how += f", resumed from step {build.resumed_from} of a stopped build"
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
        from posttrain.rl.backends import lead_first
        from posttrain.rl.build import data_parallel_from_env
        from posttrain.wiring import default_backends

        backends = default_backends()
        # under torchrun with N > 1: this rank (rank 0 shows progress and reports; docs/scale.md)
        dp = data_parallel_from_env(cfg.rl.device, backends)
        if not dp.lead:
            _train_quietly(cfg, resume, overwrite, dp, backends)
            return
        if dp.world > 1:
            say(f"data-parallel over {dp.world} ranks ({cfg.rl.data_parallel}): each rolls out 1/{dp.world} of "
                "every step's groups")
        with progress() as bars, alerts_shown_by_the_cli():
            if cfg.model.path is None:  # the built-in base model: show its (one-time) build
                from posttrain.recipes.builtin import ensure_base

                base_task = bars.add_task("base model", total=cfg.model.base.max_steps, info="")
                build = lead_first(dp, lambda: ensure_base(
                    cfg.model.base,
                    on_eval=lambda s, a: bars.update(base_task, completed=s, info=f"held-out greedy {a:.3f}"),
                ))
                bars.update(base_task, visible=False)
                cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(build.path)})})
            live = TrainingProgress(bars, cfg.eval, bars.add_task("GRPO", total=cfg.train.steps, info=""))
            trainer = Trainer(cfg, resume=resume, overwrite=overwrite, on_step=live.on_step, on_eval=live.on_eval,
                              backends=backends)
            bars.update(live.task, completed=trainer.step)
            try:
                result = trainer.run()
                final_dir = trainer.final_model_dir()
                best, best_dir = trainer.best, trainer.best_model_dir()
            finally:
                trainer.close()
        metric = cfg.eval.best_metric
        acc = result.final_eval.get(metric)
        say(f"trained {result.steps} steps in {result.seconds:.0f}s"
            + (f"; held-out {metric} {acc:.3f}" if acc is not None else ""))
        if result.stopped_by is not None:
            say(f"stopped by a monitor alert (train.on_alert = stop), checkpointed at step {result.steps}: "
                f"{result.stopped_by}; {RESUME_NOTE}")
        say(f"final model: {final_dir} (step {result.steps})")
        if best is not None:
            figures = f"(step {best.step}, held-out {metric} {best.value:.3f})"
            say(f"best model:  {best_dir} {figures}; --model {result.run_dir} evaluates and serves it" if best_dir is not None
                else f"best model:  not saved (eval.keep_best = false) {figures}")
        print(json.dumps({"run_dir": str(result.run_dir), "final_model": str(final_dir), **result.final_eval,
                          "best_model": str(best_dir) if best_dir is not None else None,
                          "best_step": best.step if best is not None else None,
                          "best_value": best.value if best is not None else None}))


def _train_quietly(cfg, resume: bool, overwrite: bool, dp, backends) -> None:
    """A torchrun rank other than 0: the same run (its share of the rollouts, its part of each update), with
    no progress and no report: rank 0 shows and stores them."""
    from posttrain.recipes.builtin import ensure_base
    from posttrain.rl.backends import lead_first
    from posttrain.rl.trainer import Trainer

    if cfg.model.path is None:
        build = lead_first(dp, lambda: ensure_base(cfg.model.base))  # rank 0 builds; this rank then finds it
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(build.path)})})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank 0 warns (and stores alerts) for the run
        trainer = Trainer(cfg, resume=resume, overwrite=overwrite, backends=backends)
        try:
            trainer.run()
            trainer.final_model_dir()
        finally:
            trainer.close()


def show_config(
    config: Annotated[Optional[Path], typer.Argument(help="A TOML run config; omitted: the defaults.")] = None,
    set_: SetOpt = None,
) -> None:
    """Print the resolved configuration (defaults <- file <- --set) as JSON."""
    from posttrain.config import load_config

    with friendly():
        print(json.dumps(load_config(config, set_ or []).model_dump(), indent=2))
