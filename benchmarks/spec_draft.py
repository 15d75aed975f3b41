"""Speculative decoding with a draft model posttrain trained, for a target posttrain trained: batch-1 speed.

The target: a 10M-parameter Llama (`benchmarks/engine.py`'s 10m shape: hidden 384, 6 layers) pre-trained by
posttrain's own base-model pre-training (`posttrain.recipes.builtin.ensure_base`) on worked products
(`47*38=` -> `47*8=376;47*30=1410;376+1410=1786`) until its held-out accuracy reaches the band; built once
and cached. The draft: the built-in 0.86M worked-product base (the same pre-training, the default size),
then distilled on the target's own continuations of train-split problems (`posttrain.recipes.distill`:
forward KL to the target's whole next-token distributions). Both share the character tokenizer.

Measured: held-out problems one at a time (the latency-bound regime speculation is for), the engine's
`generate` wall time and tokens, one intra-op thread, warm (one untimed round first), the plain engine and
each speculative engine interleaved round by round: the distilled draft, the draft before distillation
(what distillation buys), and prompt lookup (k = 4). Greedy: every completion must be token-identical to
the plain engine's. Sampled (T = 1, the distillation temperature): the exact rule keeps the target's
distribution (tests/engine/test_spec_decode.py); tokens/s counts what was produced.

    python benchmarks/spec_draft.py [--problems 64] [--rounds 3] [--k 4] [--cache-dir DIR]

Last line: one JSON object with `spec_draft_speedup` (sampled, distilled draft), `spec_draft_greedy_speedup`,
the other engines' ratios, acceptance figures, build times and the load. Does not cover: batched decoding
(speculation is for batch 1 here; the engine's wide batches are GEMM-bound already), 50M targets.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

TARGET_SHAPE = dict(hidden_size=384, num_layers=6, intermediate_size=1024, num_heads=12)  # engine.py's 10m


def build_models(cache_dir: str | None, seed: int, distill_steps: int):
    import torch

    from posttrain.config import BaseModelConfig
    from posttrain.models.io import load_model
    from posttrain.recipes.builtin import base_task_source, ensure_base
    from posttrain.recipes.distill import DistillConfig, distill_draft

    extra = {"cache_dir": cache_dir} if cache_dir else {}
    target_cfg = BaseModelConfig(family="mul", worked=True, seed=seed, batch_size=64, lr=1e-3, eval_every=25,
                                 **TARGET_SHAPE, **extra)
    draft_cfg = BaseModelConfig(family="mul", worked=True, seed=seed, **extra)
    t = time.perf_counter()
    tb = ensure_base(target_cfg, on_eval=lambda s, a: print(f"  target pre-training step {s}: held-out {a:.3f}", flush=True))
    print(f"target: {tb.path} ({'cached' if tb.cached else f'built in {time.perf_counter() - t:.0f} s'}), "
          f"held-out greedy {tb.accuracy:.3f} after {tb.steps} steps", flush=True)
    t = time.perf_counter()
    db = ensure_base(draft_cfg)
    print(f"draft base: {db.path} ({'cached' if db.cached else f'built in {time.perf_counter() - t:.0f} s'}), "
          f"held-out greedy {db.accuracy:.3f}", flush=True)
    target, tok = load_model(tb.path)
    draft, _ = load_model(db.path)
    undistilled, _ = load_model(db.path)
    source = base_task_source(target_cfg)
    rng = random.Random(seed + 7)
    train_prompts = [source.sample(rng, "train").prompt for _ in range(2048)]
    held_prompts = [source.sample(rng, "held_out").prompt for _ in range(128)]
    torch.set_num_threads(2)
    report = distill_draft(target, draft, tok, train_prompts, held_prompts,
                           DistillConfig(steps=distill_steps, batch_size=64, lr=1e-3, temperature=1.0,
                                         max_new_tokens=source.max_solution_chars + 2, seed=seed),
                           on_step=lambda s, loss: s % 50 == 0 and print(f"  distil step {s}: KL {loss:.4f}", flush=True))
    print(f"distilled in {report.sample_seconds:.0f} s sampling + {report.train_seconds:.0f} s training: expected "
          f"acceptance {report.before.expected:.3f} -> {report.after.expected:.3f}, greedy agreement "
          f"{report.before.greedy:.3f} -> {report.after.greedy:.3f}", flush=True)
    info = {"target_params_m": round(sum(p.numel() for p in target.parameters()) / 1e6, 2),
            "draft_params_m": round(sum(p.numel() for p in draft.parameters()) / 1e6, 2),
            "target_accuracy": round(tb.accuracy, 3), "target_build_s": round(tb.seconds, 1),
            "draft_base_build_s": round(db.seconds, 1), "distill_steps": report.steps,
            "distill_s": round(report.sample_seconds + report.train_seconds, 1),
            "expected_acceptance_before": round(report.before.expected, 3),
            "expected_acceptance": round(report.after.expected, 3),
            "greedy_agreement_before": round(report.before.greedy, 3),
            "greedy_agreement": round(report.after.greedy, 3)}
    return target, draft, undistilled, tok, source, info


def measure(target, draft, undistilled, tok, source, problems: int, rounds: int, k: int, seed: int) -> dict:
    import torch

    from posttrain.engine import LocalEngine, SpecConfig
    from posttrain.types import SamplingParams

    torch.set_num_threads(1)
    rng = random.Random(seed + 99)
    prompts = [source.sample(rng, "held_out").prompt for _ in range(problems + 1)]
    warm, prompts = prompts[:1], prompts[1:]
    specs = {"plain": None, "draft": SpecConfig("draft", k=k, draft_model=draft),
             "draft_undistilled": SpecConfig("draft", k=k, draft_model=undistilled),
             "lookup": SpecConfig("ngram", k=k, ngram_max=4)}
    max_tokens = source.max_solution_chars + 2
    out: dict = {}
    for label, temp in (("greedy", 0.0), ("sampled", 1.0)):
        engines = {name: LocalEngine(target, tok, speculative=s) for name, s in specs.items()}
        rates: dict[str, list[float]] = {name: [] for name in engines}
        texts: dict[str, list] = {}
        for eng in engines.values():
            eng.generate(warm, SamplingParams(temperature=temp, max_tokens=max_tokens, seed=0))
        for _ in range(rounds):
            for name, eng in engines.items():
                seconds, tokens, ids = 0.0, 0, []
                for i, p in enumerate(prompts):
                    params = SamplingParams(temperature=temp, max_tokens=max_tokens, seed=i)
                    t = time.perf_counter()
                    (c,), = eng.generate([p], params)
                    seconds += time.perf_counter() - t
                    tokens += len(c.token_ids)
                    ids.append(c.token_ids)
                rates[name].append(tokens / seconds)
                texts[name] = ids
        plain = statistics.median(rates["plain"])
        for name in engines:
            med = statistics.median(rates[name])
            key = f"spec_draft_{label}" if name == "draft" else f"spec_{name}_{label}"
            out[f"{key}_tok_s"] = round(med, 1)
            out[f"{key}_tok_s_runs"] = [round(r, 1) for r in rates[name]]
            if name != "plain":
                out[f"{key}_speedup"] = round(med / plain, 3)
                m = engines[name].metrics()
                out[f"{key}_acceptance"] = round(m["spec_acceptance_rate"], 3)
                out[f"{key}_tokens_per_forward"] = round(m["tokens_per_forward"], 2)
                if temp == 0.0:
                    out[f"{key}_identical"] = texts[name] == texts["plain"]
        out[f"tokens_per_problem_{label}"] = round(sum(len(x) for x in texts["plain"]) / len(prompts), 1)
        print(f"{label}: plain {plain:.0f} tok/s; " + ", ".join(
            f"{n} {statistics.median(rates[n]) / plain:.2f}x" for n in engines if n != "plain"), flush=True)
    out["spec_draft_speedup"] = out.pop("spec_draft_sampled_speedup")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--distill-steps", type=int, default=300)
    ap.add_argument("--cache-dir", default=None, help="model.base.cache_dir for both bases (default: the built-in cache)")
    args = ap.parse_args()
    load_start = os.getloadavg()
    target, draft, undistilled, tok, source, info = build_models(args.cache_dir, args.seed, args.distill_steps)
    load_measure = os.getloadavg()
    out = measure(target, draft, undistilled, tok, source, args.problems, args.rounds, args.k, args.seed)
    print(json.dumps({**out, **info, "k": args.k, "problems": args.problems, "rounds": args.rounds,
                      "load_start": load_start, "load_at_measure": load_measure, "load_end": os.getloadavg(),
                      "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
