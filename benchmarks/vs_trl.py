"""posttrain's GRPO loop vs TRL's GRPOTrainer: wall time to the same held-out gain.

Both start from the same built-in base checkpoint (3-digit addition), use the
same reward (exact match), group size, prompts per step, learning rate
(constant), temperature and completion length, and are measured on the same
500 held-out problems (greedy accuracy, evaluated by posttrain's engine on
both models, so the measuring stick is identical).

TRL runs `--steps` steps; its wall time (training only) and final gain are the
baseline. posttrain then trains with held-out evaluations every
`--eval-every` steps (evaluation time excluded from its clock) for as many steps
as TRL, noting when its gain first reaches TRL's final gain; the headline is

    time_ratio = posttrain seconds to reach TRL's gain / TRL seconds

Needs the `bench` extra (`pip install -e ".[bench]"`). Last line: one JSON
object with `time_ratio`, `posttrain_gain` and `trl_gain`.

    python benchmarks/vs_trl.py [--steps 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from posttrain.builtin import ensure_base
from posttrain.config import load_config
from posttrain.engine.local import LocalEngine
from posttrain.eval.accuracy import evaluate_accuracy
from posttrain.models.io import load_model
from posttrain.rewards import ExactMatch
from posttrain.rl.trainer import Trainer
from posttrain.rl.build import build_domains

PROMPTS_PER_STEP, GROUP, MAX_TOKENS, LR = 16, 8, 6, 3e-4


def task_source():
    """The quickstart's task: the default config's arithmetic generator and hash split."""
    return build_domains(load_config())[0].source


def held_out_accuracy(model_dir: Path, tasks) -> float:
    model, tok = load_model(model_dir)
    return evaluate_accuracy(LocalEngine(model, tok), tasks, ExactMatch(), MAX_TOKENS).accuracy


def run_trl(base_dir: Path, steps: int, seed: int, out: Path) -> float:
    """Train with TRL; returns training wall seconds. Saves the result to `out`."""
    try:
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        raise SystemExit(f"benchmarks/vs_trl.py needs the bench extra: pip install -e '.[bench]' ({exc})")
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    source = task_source()
    rng = __import__("random").Random(seed)
    train = [source.sample(rng) for _ in range(steps * PROMPTS_PER_STEP)]
    # the base model was pre-trained with a BOS token first; TRL tokenizes prompts without special tokens
    ds = Dataset.from_dict({"prompt": ["<bos>" + t.prompt for t in train], "answer": [t.answer for t in train]})

    def exact(prompts, completions, answer, **_):
        return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]

    args = GRPOConfig(
        output_dir=str(out / "trl"),
        max_steps=steps,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        num_generations=GROUP,
        max_completion_length=MAX_TOKENS,
        temperature=1.0,
        beta=0.0,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=50,
        seed=seed,
        shuffle_dataset=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=exact, args=args, train_dataset=ds, processing_class=tok)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    model.save_pretrained(out / "trl_final")
    tok.save_pretrained(out / "trl_final")
    return seconds


def run_posttrain(base_dir: Path, target_gain: float, base_acc: float, steps: int, eval_every: int, seed: int, out: Path, held_out):
    cfg = load_config(
        None,
        [
            f"model.path='{base_dir}'",
            f"run_dir='{out}'",
            "name='posttrain'",
            f"seed={seed}",
            f"sampling.n={GROUP}",
            f"sampling.max_tokens={MAX_TOKENS}",
            f"train.prompts_per_step={PROMPTS_PER_STEP}",
            f"rl.lr={LR}",
            f"train.steps={steps}",
            "train.checkpoint_every=0",
            "tensorboard=false",
        ],
    )
    trainer = Trainer(cfg, overwrite=True)
    clock, reached_at = 0.0, None
    try:
        while trainer.step < steps:
            t0 = time.perf_counter()
            trainer.train_step()
            clock += time.perf_counter() - t0
            if trainer.step % eval_every == 0 or trainer.step == steps:
                acc = evaluate_accuracy(trainer.engine, held_out, ExactMatch(), MAX_TOKENS).accuracy
                if acc - base_acc >= target_gain and reached_at is None:
                    reached_at = clock
    finally:
        trainer.close()
    final = evaluate_accuracy(trainer.engine, held_out, ExactMatch(), MAX_TOKENS).accuracy
    return clock, reached_at, final - base_acc, trainer.step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    base = ensure_base(load_config().model.base)
    held_out = task_source().take(500, "held_out", seed=0)
    base_acc = held_out_accuracy(base.path, held_out)
    print(f"base model {base.path}: held-out greedy {base_acc:.3f}")
    rows = []
    for r in range(args.repeats):
        seed = args.seed + r
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            trl_s = run_trl(base.path, args.steps, seed, out)
            trl_gain = held_out_accuracy(out / "trl_final", held_out) - base_acc
            pt_s, reached, pt_gain, pt_steps = run_posttrain(
                base.path, trl_gain, base_acc, args.steps, args.eval_every, seed, out, held_out
            )
        ratio = (reached / trl_s) if reached is not None else float("inf")
        rows.append({"trl_seconds": trl_s, "trl_gain": trl_gain, "posttrain_seconds": pt_s,
                     "posttrain_reached_s": reached, "posttrain_gain": pt_gain, "posttrain_steps": pt_steps, "time_ratio": ratio})
        print(f"repeat {r}: TRL {args.steps} steps {trl_s:.1f}s gain {trl_gain:+.3f} | posttrain "
              f"{'reached it at %.1fs' % reached if reached is not None else 'did not reach it'}, "
              f"{pt_steps} steps in {pt_s:.1f}s, final gain {pt_gain:+.3f} -> time_ratio {ratio:.3f}", flush=True)
    print(json.dumps({
        "time_ratio": statistics.median(r["time_ratio"] for r in rows),
        "posttrain_gain": statistics.median(r["posttrain_gain"] for r in rows),
        "trl_gain": statistics.median(r["trl_gain"] for r in rows),
        "repeats": len(rows),
        "trl_steps": args.steps,
        "base_accuracy": base_acc,
    }))


if __name__ == "__main__":
    main()
