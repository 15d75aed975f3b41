"""`posttrain quickstart`: the whole thesis in one command on a laptop CPU.

Covers: build (or reuse) the built-in base model, measure it on held-out
problems (greedy accuracy and sampled pass@1), run GRPO on the training
split, measure again on the same problems with the same seeds, and report
the before/after figures and where the run is stored.
Does not cover: anything a config cannot express; it is a thin driver over
`builtin`, `rl.trainer` and `eval`.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable

from posttrain.builtin import ensure_base
from posttrain.config import ConfigError, RunConfig
from posttrain.engine.base import Engine
from posttrain.eval.accuracy import evaluate_accuracy
from posttrain.rl.trainer import StepResult, Trainer


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
    n_held_out: int
    pass1_samples_per_task: int
    run_dir: str
    seed: int

    def to_dict(self) -> dict:
        return asdict(self)


def _measure(engine: Engine, tasks, verifier, max_tokens: int, samples: int, seed: int) -> tuple[float, float]:
    greedy = evaluate_accuracy(engine, tasks, verifier, max_tokens).accuracy
    sampled = evaluate_accuracy(engine, tasks, verifier, max_tokens, temperature=1.0, samples=samples, seed=seed).accuracy
    return greedy, sampled


def run_quickstart(
    cfg: RunConfig,
    pass1_samples: int = 4,
    on_phase: Callable[[str], None] | None = None,
    on_base_eval: Callable[[int, float], None] | None = None,
    on_step: Callable[[StepResult], None] | None = None,
    on_eval: Callable[[int, dict[str, float]], None] | None = None,
) -> QuickstartResult:
    start = time.perf_counter()
    say = on_phase or (lambda _msg: None)
    if cfg.tasks.held_out_fraction > cfg.model.base.held_out_fraction:
        warnings.warn(
            f"tasks.held_out_fraction ({cfg.tasks.held_out_fraction}) exceeds the base model's "
            f"({cfg.model.base.held_out_fraction}): some held-out problems were seen in pre-training"
        )
    say("base model")
    base = ensure_base(cfg.model.base, on_eval=on_base_eval)
    base_seconds = time.perf_counter() - start
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(base.path)})})

    # The trainer owns the model, task split, held-out set and verifier; measure "before" with the same ones.
    # Greedy decoding and the seeded pass@1 draw leave the trainer's sampling RNG untouched.
    trainer = Trainer(cfg, overwrite=True, on_step=on_step, on_eval=on_eval)  # a rerun of a seed replaces its run
    try:
        held_out, verifier, max_tokens = trainer.held_out, trainer.verifier, trainer.params.max_tokens
        if not held_out:
            raise ConfigError("quickstart: the task source has no held-out tasks; raise tasks.held_out_fraction")
        say(f"evaluating the base model on {len(held_out)} held-out problems")
        greedy_before, pass1_before = _measure(trainer.engine, held_out, verifier, max_tokens, pass1_samples, cfg.seed + 1)
        say("GRPO")
        result = trainer.run()
        say("evaluating the trained model")
        greedy_after, pass1_after = _measure(trainer.engine, held_out, verifier, max_tokens, pass1_samples, cfg.seed + 1)
        trainer.store.log_eval(
            trainer.step,
            "quickstart",
            {"greedy_before": greedy_before, "greedy_after": greedy_after, "pass1_before": pass1_before, "pass1_after": pass1_after},
            {},
        )
        trainer.final_model_dir()
    finally:
        trainer.close()
    return QuickstartResult(
        greedy_before=greedy_before,
        greedy_after=greedy_after,
        pass1_before=pass1_before,
        pass1_after=pass1_after,
        seconds=time.perf_counter() - start,
        base_seconds=base_seconds,
        base_cached=base.cached,
        train_seconds=result.seconds,
        steps=result.steps,
        n_held_out=len(held_out),
        pass1_samples_per_task=pass1_samples,
        run_dir=str(trainer.run_dir),
        seed=cfg.seed,
    )
