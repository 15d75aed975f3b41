"""posttrain's GRPO loop vs TRL's GRPOTrainer, measured the same way on both sides.

What is the same:
- the base checkpoint (the built-in base, `ensure_base(BaseModelConfig())`), the task (2-digit addition,
  the default config's generator and hash split), the reward (exact match of the stripped completion),
  16 prompts x 8 completions per step, AdamW at lr 3e-4 constant with no warm-up and no weight decay,
  gradient-norm clip 1.0, T = 1 with no top-p/top-k, at most 6 completion tokens, no KL, one pass over each
  batch (so the ratio is 1 and the clip is inert), token-mean loss (TRL's `dapo`, posttrain's `token_mean`),
  group advantages (r - mean) / (unbiased std + 1e-4) on both, and the seed (repeat r uses seed `--seed + r` for both).
- the evaluation grid: after every K steps (`--eval-every`, default 25) and after the last step, both sides
  are evaluated on the same fixed held-out problems (the trainer's selection half of the seed-0 held-out
  draw, the same list for every side and repeat) by the same greedy evaluator
  (`posttrain.eval.accuracy.evaluate_accuracy` on an engine from `posttrain.engine.build.build_engine`).
  TRL's weights reach that engine through a `TrainerCallback` that copies the HF model's state dict into a
  posttrain `CausalLM` (the native model uses HF parameter names); posttrain's own module is loaded into a
  second engine the same way, so neither side's sampler, prefix cache or RNG is touched by evaluation
  (torch's and Python's global RNG states are restored after each evaluation).
- the clocks: each side's clock starts when training starts (TRL: `on_train_begin`, after its set-up;
  posttrain: before its first step, after `Trainer(cfg)`), and every evaluation (weight copy included) is
  timed and subtracted, so a curve point's seconds are training seconds only. Each side's curve starts with
  its own step-0 evaluation (off the clock). It matters beyond the curve: measured here (2 cores, load
  about 11), TRL's steps ran 6-15x slower (9-27 s vs about 1.5 s) while a posttrain `LocalEngine` existed
  in the process but had not generated yet; its first evaluation ended that. Cause not found yet.

What differs (and stays different):
- posttrain's sampling recipe: groups with zero reward variance are dropped and refilled with fresh tasks
  (up to `train.max_fill_rounds` rounds per step), and the pass-rate curriculum stops drawing tasks seen
  always or never solved; TRL trains on every group it samples, zero-variance ones included (their
  advantage is 0, so they only dilute the token mean). The `plain` posttrain run switches both off
  (`train.drop_zero_variance = false`, `train.curriculum = "uniform"`) to show what the recipe buys.
- the training prompts: TRL's are a fixed list of `steps x 16` train-split problems drawn with the repeat's
  seed (its dataloader, unshuffled); posttrain's curriculum draws its own with the same seed.
- the sampler: TRL samples with HF `generate` (its own RNG stream), posttrain with its engine.
- the optimizer's implementation: TRL's default fused `AdamW`, posttrain's `torch.optim.AdamW` (same update).
- the prompt: TRL tokenizes without special tokens, so its prompts carry the BOS token as text
  ("<bos>" + prompt, the same ids posttrain's tokenizer produces).
- bookkeeping: posttrain writes every step's metrics and samples to its run store (its default); TRL logs
  every 50 steps and writes nothing else (`report_to = "none"`, `save_strategy = "no"`).

Reported for each repeat and side: the learning curve (step, training seconds, held-out accuracy), the
training time of all steps, and the time to first reach the target gain, which is TRL's gain at its last
step (over evaluations at step >= 1; a target <= 0 is reached at the first evaluation). Headlines, medians
over repeats:

    time_ratio              = posttrain seconds to the target / TRL seconds to the target
    equal_steps_ratio       = posttrain training seconds for `--steps` steps / TRL's
    time_ratio_plain_recipe = the same as time_ratio, posttrain with its sampling recipe off

A side that never reaches the target has ratio null (counted as infinite in the median).

Needs TRL (`pip install "trl>=0.20" "accelerate>=0.30" "datasets>=2.19"`, or the `bench` extra). Last line:
one JSON object with the headlines, `posttrain_gain`, `trl_gain`, per-repeat details and the machine's load
average at start and end.

    python benchmarks/vs_trl.py [--steps 300] [--repeats 3] [--eval-every 25] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from posttrain.provenance import machine

PROMPTS_PER_STEP, GROUP, MAX_TOKENS, LR = 16, 8, 6, 3e-4


# the grid: the one schedule and clock both sides share
def eval_steps(steps: int, every: int) -> list[int]:
    """The steps after which a side is evaluated: every `every` steps, and the last step."""
    return sorted({s for s in range(every, steps + 1, every)} | {steps}) if every > 0 else [steps]


@dataclass
class Point:
    step: int
    seconds: float  # training seconds up to this step, evaluation excluded
    accuracy: float


@dataclass
class EvalGrid:
    """One side's clock and learning curve: `start()` when training starts (it evaluates step 0 too),
    `after_step(step)` after each step; evaluations at step 0 and at `eval_steps` are timed and taken off
    the clock, and leave the global RNGs as they found them (so the grid does not change what a side
    samples next)."""

    steps: int
    every: int
    evaluate: Callable[[int], float]
    base_accuracy: float
    clock: Callable[[], float] = time.perf_counter
    curve: list[Point] = field(default_factory=list)
    eval_seconds: float = 0.0
    t0: float = 0.0

    def start(self) -> None:
        """Evaluate the starting weights (step 0, off the clock) and start the clock."""
        self.curve, self.eval_seconds, self.t0 = [], 0.0, self.clock()
        self._evaluate_now(0)

    def after_step(self, step: int) -> bool:
        if step not in set(eval_steps(self.steps, self.every)) or any(p.step == step for p in self.curve):
            return False
        self._evaluate_now(step)
        return True

    def _evaluate_now(self, step: int) -> None:
        t = self.clock()
        trained = t - self.t0 - self.eval_seconds
        torch_state, py_state = torch.get_rng_state(), random.getstate()
        accuracy = self.evaluate(step)
        torch.set_rng_state(torch_state)
        random.setstate(py_state)
        self.eval_seconds += self.clock() - t
        self.curve.append(Point(step, trained, accuracy))

    @property
    def train_seconds(self) -> float:
        """Training seconds of the last evaluated step (the last step, once the run is over)."""
        return self.curve[-1].seconds

    def reached(self, target_gain: float) -> Point | None:
        """The first evaluation after step 0 whose gain over the base is at least `target_gain`."""
        return next((p for p in self.curve[1:] if p.accuracy - self.base_accuracy >= target_gain), None)


def trl_grid_callback(grid: EvalGrid) -> Any:
    """A `transformers.TrainerCallback` that drives `grid` from TRL's (or any HF Trainer's) loop."""
    from transformers import TrainerCallback

    class GridCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            grid.start()

        def on_step_end(self, args, state, control, **kwargs):
            grid.after_step(state.global_step)

    return GridCallback()


def run_posttrain_grid(trainer: Any, grid: EvalGrid) -> None:
    """posttrain's side of the grid: `grid.steps` training steps of `trainer`, evaluated on the grid."""
    grid.start()
    while trainer.step < grid.steps:
        trainer.train_step()
        grid.after_step(trainer.step)


# the evaluator both sides use
def held_out_tasks() -> list:
    """The fixed held-out list: the trainer's selection half of the seed-0 held-out draw."""
    from posttrain.config import load_config
    from posttrain.rl.build import build_domains, build_held_out

    cfg = load_config()
    selection, _ = build_held_out(cfg.eval, build_domains(cfg), cfg.seed)
    return list(selection[0].tasks)


def accuracy_of(engine, tasks) -> float:
    from posttrain.eval.accuracy import evaluate_accuracy
    from posttrain.rewards import ExactMatch

    return evaluate_accuracy(engine, tasks, ExactMatch(), MAX_TOKENS).accuracy


def evaluator(model, tokenizer, state_of: Callable[[], dict], tasks) -> Callable[[int], float]:
    """Evaluate the weights `state_of()` returns, loaded into an engine of its own over `model`."""
    from posttrain.engine.build import build_engine

    engine = build_engine(None, model, tokenizer)

    def evaluate(step: int) -> float:
        engine.load_weights({k: v.detach() for k, v in state_of().items()}, version=step)
        return accuracy_of(engine, tasks)

    return evaluate


# the two sides
def run_trl(base_dir: Path, steps: int, every: int, seed: int, out: Path, tasks, base_acc: float) -> EvalGrid:
    try:
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        need = "pip install 'trl>=0.20' 'accelerate>=0.30' 'datasets>=2.19'"
        raise SystemExit(f"benchmarks/vs_trl.py needs TRL: {need} ({exc})") from None
    from posttrain.models.io import load_model

    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    source = task_source()
    rng = random.Random(seed)
    train = [source.sample(rng, "train") for _ in range(steps * PROMPTS_PER_STEP)]
    # the base model was pre-trained with a BOS token first; TRL tokenizes prompts without special tokens
    ds = Dataset.from_dict({"prompt": ["<bos>" + t.prompt for t in train], "answer": [t.answer for t in train]})

    def exact(prompts, completions, answer, **_):
        return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=str(out / "trl"), max_steps=steps, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        num_generations=GROUP, max_completion_length=MAX_TOKENS, temperature=1.0, top_p=1.0, top_k=0, beta=0.0,
        loss_type="dapo", scale_rewards="group", num_iterations=1, use_cpu=True, bf16=False, report_to="none",
        save_strategy="no", logging_steps=50, seed=seed, shuffle_dataset=False,
    )
    pt_model, pt_tok = load_model(base_dir)
    grid = EvalGrid(steps, every, evaluator(pt_model, pt_tok, model.state_dict, tasks), base_acc)
    trainer = GRPOTrainer(model=model, reward_funcs=exact, args=args, train_dataset=ds, processing_class=tok,
                          callbacks=[trl_grid_callback(grid)])
    trainer.train()
    return grid


def task_source():
    """The quickstart's task: the default config's arithmetic generator and hash split."""
    from posttrain.config import load_config
    from posttrain.rl.build import build_domains

    return build_domains(load_config())[0].source


def run_posttrain(base_dir: Path, steps: int, every: int, seed: int, out: Path, tasks, base_acc: float,
                  plain: bool) -> EvalGrid:
    from posttrain.config import load_config
    from posttrain.rl.trainer import Trainer

    recipe = ["train.drop_zero_variance=false", "train.curriculum='uniform'"] if plain else []
    cfg = load_config(None, [
        f"model.path='{base_dir}'", f"run_dir='{out}'", f"name='posttrain{'-plain' if plain else ''}'", f"seed={seed}",
        f"sampling.n={GROUP}", f"sampling.max_tokens={MAX_TOKENS}", "sampling.temperature=1.0",
        f"train.prompts_per_step={PROMPTS_PER_STEP}", f"rl.lr={LR}", "rl.warmup_steps=0", "rl.kl_beta=0.0",
        "rl.loss_agg='token_mean'", "rl.advantage='grpo'", "rl.epochs=1", "rl.minibatches=1",
        f"train.steps={steps}", "eval.every=0", "train.checkpoint_every=0", "tensorboard=false", *recipe,
    ])
    trainer = Trainer(cfg, overwrite=True)
    try:
        grid = EvalGrid(steps, every, evaluator(trainer.model, trainer.tokenizer, trainer.model.state_dict, tasks), base_acc)
        run_posttrain_grid(trainer, grid)
    finally:
        trainer.close()
    return grid


# the report
def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def median(values: list[float | None]) -> float | None:
    m = statistics.median([v if v is not None else float("inf") for v in values])
    return None if m == float("inf") else m


def side_row(grid: EvalGrid, target: float) -> dict:
    hit = grid.reached(target)
    return {"train_seconds": grid.train_seconds, "eval_seconds": grid.eval_seconds,
            "gain": grid.curve[-1].accuracy - grid.base_accuracy, "reached_step": hit.step if hit else None,
            "reached_seconds": hit.seconds if hit else None,
            "curve": [[p.step, round(p.seconds, 3), p.accuracy] for p in grid.curve]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    load_start = list(os.getloadavg())
    print(json.dumps({"machine": machine()}), flush=True)
    torch.set_num_threads(2)
    from posttrain.config import BaseModelConfig
    from posttrain.engine.build import build_engine
    from posttrain.models.io import load_model
    from posttrain.recipes.builtin import ensure_base

    base = ensure_base(BaseModelConfig())
    tasks = held_out_tasks()
    model, tok = load_model(base.path)
    base_acc = accuracy_of(build_engine(None, model, tok), tasks)
    print(f"base model {base.path}: held-out greedy {base_acc:.3f} on {len(tasks)} problems; "
          f"load average {load_start}", flush=True)
    rows = []
    for r in range(args.repeats):
        seed = args.seed + r
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            trl = run_trl(base.path, args.steps, args.eval_every, seed, out, tasks, base_acc)
            pt = run_posttrain(base.path, args.steps, args.eval_every, seed, out, tasks, base_acc, plain=False)
            plain = run_posttrain(base.path, args.steps, args.eval_every, seed, out, tasks, base_acc, plain=True)
        target = trl.curve[-1].accuracy - base_acc
        sides = {"trl": side_row(trl, target), "posttrain": side_row(pt, target), "posttrain_plain": side_row(plain, target)}
        row = {"seed": seed, "target_gain": target, **sides,
               "time_ratio": ratio(sides["posttrain"]["reached_seconds"], sides["trl"]["reached_seconds"]),
               "time_ratio_plain_recipe": ratio(sides["posttrain_plain"]["reached_seconds"], sides["trl"]["reached_seconds"]),
               "equal_steps_ratio": ratio(pt.train_seconds, trl.train_seconds),
               "equal_steps_ratio_plain_recipe": ratio(plain.train_seconds, trl.train_seconds)}
        rows.append(row)
        for name, s in sides.items():
            reach = f"reached at step {s['reached_step']} ({s['reached_seconds']:.1f}s)" if s["reached_step"] else "not reached"
            print(f"repeat {r} {name:16s} {args.steps} steps {s['train_seconds']:6.1f}s (+{s['eval_seconds']:.1f}s eval) "
                  f"gain {s['gain']:+.3f}, target {target:+.3f} {reach}", flush=True)
            print(f"  curve (step, s, acc): {s['curve']}", flush=True)
        print(f"repeat {r}: time_ratio {row['time_ratio']} equal_steps_ratio {row['equal_steps_ratio']:.3f} "
              f"time_ratio_plain_recipe {row['time_ratio_plain_recipe']}", flush=True)
    print(json.dumps({
        "time_ratio": median([r["time_ratio"] for r in rows]),
        "equal_steps_ratio": median([r["equal_steps_ratio"] for r in rows]),
        "time_ratio_plain_recipe": median([r["time_ratio_plain_recipe"] for r in rows]),
        "equal_steps_ratio_plain_recipe": median([r["equal_steps_ratio_plain_recipe"] for r in rows]),
        "posttrain_gain": statistics.median(r["posttrain"]["gain"] for r in rows),
        "posttrain_plain_gain": statistics.median(r["posttrain_plain"]["gain"] for r in rows),
        "trl_gain": statistics.median(r["trl"]["gain"] for r in rows),
        "repeats": len(rows), "steps": args.steps, "eval_every": args.eval_every, "held_out": len(tasks),
        "base_accuracy": base_acc, "load_avg_start": load_start, "load_avg_end": list(os.getloadavg()), "machine": machine(),
        "per_repeat": rows,
    }))


if __name__ == "__main__":
    main()
