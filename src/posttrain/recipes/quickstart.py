"""`posttrain quickstart`: the whole thesis in one command on a laptop CPU.

Covers: build (or reuse) the built-in base model, measure it on the
reporting half of the held-out problems (greedy accuracy and sampled
pass@1), run GRPO on the training split (its evaluations, on the selection
half, keep the best checkpoint), measure the best checkpoint again on the
same reporting problems with the same seeds, and report the before/after
figures (the final weights' beside them) and where the run is stored. The
reporting problems are never the ones the checkpoint was chosen on.
With an agent domain (`--agent`: `AGENT_OVERRIDES`, the same run as
`examples/agent.toml`) the figures are held-out episode success: one greedy
episode per task, and sampled episodes for pass@1, each in the sandbox. With `--cad` (`CAD_OVERRIDES`, the
same run as `examples/cad.toml`) the task is the easy CAD level in its brief form and the figures are
held-out pass rates of OpenSCAD programs judged by the sandboxed `cad` verifier.
Does not cover: anything a config cannot express; it is a thin driver over
`builtin`, `rl.trainer` and `eval`.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable

from posttrain.config import ConfigError, RunConfig
from posttrain.engine.base import Engine
from posttrain.eval.accuracy import evaluate_accuracy
from posttrain.recipes.builtin import BaseBuild, base_band_message, ensure_base
from posttrain.rl.backends import Backends
from posttrain.rl.trainer import StepResult, Trainer, TrainResult
from posttrain.sandbox.sandboxes import Sandboxes


@dataclass
class QuickstartResult:
    greedy_before: float
    greedy_after: float
    pass1_before: float
    pass1_after: float
    seconds: float
    base_seconds: float
    base_cached: bool
    train_seconds: float
    steps: int
    n_held_out: int  # reporting problems the figures are measured on
    pass1_samples_per_task: int
    run_dir: str
    seed: int
    best_step: int | None = None  # the checkpoint `greedy_after` / `pass1_after` measure (None: the final weights)
    greedy_final: float | None = None  # the final weights, on the same problems
    pass1_final: float | None = None
    n_selection: int = 0  # held-out problems the evaluations during training ran on
    base_in_band: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


# `posttrain quickstart --agent`: multi-turn RL on the built-in lookup domain (examples/agent.toml is this run)
AGENT_OVERRIDES = [
    "tasks.source=agent:lookup", "tasks.digits=3", "tasks.options.process_weight=0.25", "tasks.options.lines=3",
    "model.base.family=lookup",
    "sampling.n=8", "sampling.temperature=0.5", "sampling.max_tokens=80", "train.steps=50",
    "train.prompts_per_step=4", "train.signal_from=reward", "eval.every=25", "eval.size=200",
    "train.checkpoint_every=50", "rl.lr=2e-4", "rl.loss_agg=seq_mean_token_mean", "rl.advantage=grpo",
    "rl.std_floor=0.15", "rl.warmup_steps=8",
]


# long reports (`docs:reports`, issue 41), the easy level in the compact agent form (examples/docs.toml is this run):
# the `docs:reports` base (`model.base.family`, digits = hops = 1), GRPO over whole episodes
DOCS_OVERRIDES = [
    "tasks.source=docs:reports", "tasks.options.form=agent", "tasks.options.compact=true", "tasks.options.hops=1",
    "tasks.options.distractors=0", "tasks.options.length=6000", "model.base.family=docs:reports",
    "sampling.n=8", "sampling.temperature=0.5", "sampling.max_tokens=128", "train.steps=30",
    "train.prompts_per_step=4", "eval.every=10", "eval.size=100", "train.checkpoint_every=10",
    "rl.lr=1e-4", "rl.loss_agg=seq_mean_token_mean", "rl.advantage=grpo", "rl.std_floor=0.15", "rl.warmup_steps=8",
]


# `posttrain quickstart --cad`: single-turn RL on the easy CAD level, brief form (examples/cad.toml is this run)
CAD_OVERRIDES = [
    "tasks.source=cad:parts", "tasks.options.level=1", "tasks.options.brief=true", "model.base.family=cad:parts",
    "sampling.n=8", "sampling.temperature=1.0", "sampling.max_tokens=96", "train.steps=60",
    "train.prompts_per_step=8", "eval.every=10", "eval.size=200", "train.checkpoint_every=10",
    "rl.lr=1e-4", "rl.advantage=grpo",
]


def _measure(engine: Engine, tasks, verifier, max_tokens: int, samples: int, seed: int, sandboxes: Sandboxes,
             agent=None) -> tuple[float, float]:
    """(greedy accuracy, sampled pass@1 with `samples` per task); for an agent domain, episode success. Code runs
    on `sandboxes`, the trainer's own (`[sandbox]`), as in its training episodes and evaluations."""
    if agent is not None:
        from posttrain.eval.harness import EvalSpec
        from posttrain.eval.run import run_eval
        from posttrain.tasks.suites import Suite

        suite = Suite("held-out", list(tasks), verifier, agent=agent)
        greedy_spec = EvalSpec(model="in-process", suite="held-out", max_tokens=max_tokens)
        sampled_spec = EvalSpec(model="in-process", suite="held-out", n=samples, temperature=1.0, max_tokens=max_tokens,
                                seed=seed)
        greedy = run_eval(engine, suite, greedy_spec, sandboxes=sandboxes).summary
        sampled = run_eval(engine, suite, sampled_spec, sandboxes=sandboxes).summary
        assert greedy is not None and sampled is not None  # run_eval always summarizes
        return greedy.pass1, sampled.pass1
    greedy = evaluate_accuracy(engine, tasks, verifier, max_tokens, sandboxes=sandboxes).accuracy
    sampled = evaluate_accuracy(engine, tasks, verifier, max_tokens, temperature=1.0, samples=samples, seed=seed,
                                sandboxes=sandboxes).accuracy
    return greedy, sampled


def run_quickstart(
    cfg: RunConfig,
    pass1_samples: int = 4,
    on_phase: Callable[[str], None] | None = None,
    on_base_eval: Callable[[int, float], None] | None = None,
    on_step: Callable[[StepResult], None] | None = None,
    on_eval: Callable[[int, dict[str, float]], None] | None = None,
    prepare: Callable[[Trainer], None] | None = None,
    backends: Backends | None = None,
) -> QuickstartResult:
    """The quickstart run of `cfg`; `prepare` is called with the trainer before anything is measured (a
    benchmark wraps its engine there)."""
    start = time.perf_counter()
    say = on_phase or (lambda _msg: None)
    _warn_if_pretraining_saw_held_out(cfg)
    say("base model")
    base = ensure_base(cfg.model.base, on_eval=on_base_eval)
    base_seconds = time.perf_counter() - start
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(base.path)})})
    trainer = _trainer_on(cfg, base, on_step, on_eval, backends)
    if prepare is not None:
        prepare(trainer)
    try:
        figures, result = _train_between_measures(trainer, cfg.seed + 1, pass1_samples, say)
        trainer.final_model_dir()
    finally:
        trainer.close()
    return QuickstartResult(
        greedy_before=figures.greedy_before, greedy_after=figures.greedy_after,
        pass1_before=figures.pass1_before, pass1_after=figures.pass1_after,
        seconds=time.perf_counter() - start, base_seconds=base_seconds, base_cached=base.cached,
        train_seconds=result.seconds, steps=result.steps, n_held_out=figures.n_reporting,
        pass1_samples_per_task=pass1_samples, run_dir=str(trainer.run_dir), seed=cfg.seed,
        best_step=figures.best_step, greedy_final=figures.greedy_final, pass1_final=figures.pass1_final,
        n_selection=len(trainer.held_out), base_in_band=base.in_band,
    )


def _warn_if_pretraining_saw_held_out(cfg: RunConfig) -> None:
    if cfg.tasks.held_out_fraction > cfg.model.base.held_out_fraction:
        warnings.warn(
            f"tasks.held_out_fraction ({cfg.tasks.held_out_fraction}) exceeds the base model's "
            f"({cfg.model.base.held_out_fraction}): some held-out problems were seen in pre-training",
            stacklevel=3,
        )


def _trainer_on(cfg: RunConfig, base: BaseBuild, on_step: Callable[[StepResult], None] | None,
                on_eval: Callable[[int, dict[str, float]], None] | None, backends: Backends | None) -> Trainer:
    """The run's trainer on the base (a rerun of a seed replaces its run). It owns the model, task split, held-out
    set and verifier, so "before" is measured with the same ones; what the base build knows (its band) goes into
    the run's store, since the trainer loads the base by path."""
    trainer = Trainer(cfg, overwrite=True, on_step=on_step, on_eval=on_eval, backends=backends)
    trainer.store.set_info(base={"path": str(base.path), "accuracy": base.accuracy, "steps": base.steps,
                                 "in_band": base.in_band})
    if not base.in_band:
        trainer.store.add_alert({"step": 0, "kind": "base_out_of_band", "message": base_band_message(cfg, base)})
    return trainer


@dataclass
class _Figures:
    """The reporting problems' figures: the base, the final weights and the best checkpoint (`best_step`)."""

    greedy_before: float
    greedy_after: float
    pass1_before: float
    pass1_after: float
    greedy_final: float
    pass1_final: float
    best_step: int | None
    n_reporting: int


def _train_between_measures(trainer: Trainer, seed: int, pass1_samples: int,
                            say: Callable[[str], None]) -> tuple[_Figures, TrainResult]:
    """Measure the base, train, measure the final weights and `best/` (when it is not the final step), on the
    reporting half with the same seeds; the figures go into the run's store. Greedy decoding and the seeded
    pass@1 draw leave the trainer's sampling RNG untouched."""
    reporting, verifier, max_tokens = trainer.reporting, trainer.verifier, trainer.params.max_tokens
    agent, sandboxes = trainer.domains[0].agent, trainer.parts.sandboxes  # the pool the trainer's episodes use
    if not reporting:
        raise ConfigError("quickstart: the task source has no held-out tasks; raise tasks.held_out_fraction")

    def measure(engine: Engine) -> tuple[float, float]:
        return _measure(engine, reporting, verifier, max_tokens, pass1_samples, seed, sandboxes, agent)

    say(f"evaluating the base model on {len(reporting)} held-out problems (the reporting half)")
    greedy_before, pass1_before = measure(trainer.engine)
    say("GRPO")
    result = trainer.run()
    say("evaluating the trained model")
    greedy_final, pass1_final = measure(trainer.engine)
    best_dir, best_step = trainer.best_model_dir(), trainer.best.step if trainer.best else None
    if best_dir is not None and best_step != trainer.step:
        greedy_after, pass1_after = measure(_engine_for(best_dir))
    else:
        greedy_after, pass1_after, best_step = greedy_final, pass1_final, trainer.step
    figures = _Figures(greedy_before, greedy_after, pass1_before, pass1_after, greedy_final, pass1_final, best_step,
                       len(reporting))
    trainer.store.log_eval(trainer.step, "quickstart", asdict(figures), {})
    return figures, result


def _engine_for(path) -> Engine:
    from posttrain.engine.build import build_engine
    from posttrain.models.io import load_model

    model, tokenizer = load_model(path)
    return build_engine(None, model, tokenizer)
