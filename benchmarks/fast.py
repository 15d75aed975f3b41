"""The high-speed mode (bf16 / int8 weights, plus prompt-lookup speculation) against the fp32 engine: speed and quality.

Speed: batch-1 output tokens/s (one 64-token prompt, greedy, 128 new tokens,
EOS ignored, prefill included) on random Llamas of `benchmarks/engine.py`'s
10M and 50M shapes (`SIZES`), one intra-op thread (as there), for fp32,
bf16, int8 and `--fast` (int8 + `SpecConfig()` prompt lookup), interleaved,
medians of `--rounds`. Packing and the rounded copy are built in a warm-up
call, not timed (the engine builds them once per weight version). Prefill
runs fp32 arithmetic on the rounded weights for every precision, so its
share dilutes the speed-up a little. Beside these end-to-end figures,
`kernel_ms_*`: one batch-1 decode forward of the C kernel alone, best of 40
(the least load-inflated figure on a shared machine). A random model's greedy output loops,
which prompt lookup predicts well: the `--fast` figure on this workload is
optimistic for speculation; `int8_speedup_*` is the weights alone.

Quality: the built-in base model (`posttrain.recipes.builtin.ensure_base` with the
default `BaseModelConfig`: a ~1M-parameter arithmetic model, built once and
cached), greedy exact-match accuracy on the first 500 held-out `arith:add`
problems of its seed (the trainer's evaluation problems), and perplexity of
the reference answers (+ EOS) under each precision's policy, teacher-forced.
At 1M parameters every matrix is small, so this is the quality cost of the
rounding itself, not a statement about larger models.

Run: ``nice -n 5 python benchmarks/fast.py [--rounds 3] [--sizes 10m,50m]``.
The last line is one JSON object with fast_speedup_10m, fast_speedup_50m,
fast_accuracy_drop_pts, bf16_speedup_10m, bf16_speedup_50m and load_avg
(plus per-precision figures).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import SIZES  # noqa: E402  (the benchmark's own 10m / 50m shapes)
from posttrain.engine import LocalEngine, SpecConfig  # noqa: E402
from posttrain.engine.local.native_decode import load_kernel  # noqa: E402
from posttrain.models import CausalLM, ModelConfig, char_tokenizer  # noqa: E402
from posttrain.types import SamplingParams  # noqa: E402

MODES = {"fp32": ("fp32", False), "bf16": ("bf16", False), "int8": ("int8", False), "fast": ("int8", True)}


def random_model(size: str, seed: int = 0) -> CausalLM:
    hidden, layers, inter = SIZES[size]
    heads = hidden // 32
    cfg = ModelConfig(
        vocab_size=char_tokenizer().vocab_size, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), max_position_embeddings=4096,
    )  # fmt: skip
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    return model.eval()


def speed(size: str, rounds: int) -> dict:
    model, tok = random_model(size), char_tokenizer()
    rng = random.Random(2)
    prompt = [rng.randrange(3, 100) for _ in range(64)]
    new = 128
    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    engines = {
        m: LocalEngine(model, tok, precision=p, speculative=SpecConfig() if spec else None) for m, (p, spec) in MODES.items()
    }
    for e in engines.values():  # warm-up: the rounded copy and the packed panels
        e.generate([prompt], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    times: dict[str, list[float]] = {m: [] for m in MODES}
    outs: dict[str, list[int]] = {}
    for _ in range(rounds):
        for m, e in engines.items():
            t = time.perf_counter()
            outs[m] = e.generate([prompt], params)[0][0].token_ids
            times[m].append(time.perf_counter() - t)
    tps = {m: new / statistics.median(ts) for m, ts in times.items()}
    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    out = {f"params_m_{size}": round(params_m, 1)}
    for m, v in tps.items():
        out[f"{m}_tokens_per_s_{size}"] = round(v, 1)
    for m in ("bf16", "int8", "fast"):
        out[f"{m}_speedup_{size}"] = round(tps[m] / tps["fp32"], 2)
    out.update(kernel_ms(model, size))
    out[f"fast_identical_to_int8_{size}"] = outs["fast"] == outs["int8"]  # speculation is exact
    out[f"fast_acceptance_{size}"] = round(engines["fast"].metrics()["spec_acceptance_rate"], 3)
    return out


def kernel_ms(model: CausalLM, size: str, calls: int = 40) -> dict:
    """One decode forward (batch 1, the C kernel) per precision: the best of `calls`, in ms. On a shared
    machine the minimum is the figure least inflated by other processes' time slices."""
    from posttrain.engine.local.fused import FusedDecoder
    from posttrain.engine.local.kv import SlotCache
    from posttrain.engine.local.precision import serving_copy

    out, best = {}, {}
    for precision in ("fp32", "bf16", "int8"):
        served = model if precision == "fp32" else serving_copy(model, precision).refresh()
        fused, cache = FusedDecoder(served, precision=precision), SlotCache(served.config, 1, calls + 8)
        ids = torch.tensor([[5]])
        with torch.inference_mode():
            fused.forward_tokens(ids, [0], None, cache)  # packs
            ts = []
            for i in range(calls):
                t = time.perf_counter()
                fused.forward_tokens(ids, [i + 1], None, cache)
                ts.append(time.perf_counter() - t)
        best[precision] = 1e3 * min(ts)
        out[f"kernel_ms_{precision}_{size}"] = round(best[precision], 3)
    for precision in ("bf16", "int8"):
        out[f"kernel_speedup_{precision}_{size}"] = round(best["fp32"] / best[precision], 2)
    return out


def quality() -> dict:
    from posttrain.config import BaseModelConfig
    from posttrain.eval.accuracy import evaluate_accuracy
    from posttrain.models import load_model
    from posttrain.models.logprobs import token_logprobs
    from posttrain.recipes.builtin import EVAL_RESERVE, base_task_source, ensure_base
    from posttrain.rewards.verifiers import ExactMatch

    cfg = BaseModelConfig()
    build = ensure_base(cfg)
    model, tok = load_model(build.path)
    model.eval()
    tasks = base_task_source(cfg).take(EVAL_RESERVE, "held_out", seed=cfg.seed)
    max_answer = len(str(10 ** (cfg.digits + 1))) + 2  # as the base model's own band checks
    out: dict = {"quality_model_params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
                 "quality_tasks": len(tasks), "quality_family": f"arith:{cfg.family}"}  # fmt: skip
    for precision in ("fp32", "bf16", "int8"):
        engine = LocalEngine(model, tok, precision=precision)
        acc = evaluate_accuracy(engine, tasks, ExactMatch(), max_tokens=max_answer).accuracy
        nll, count = 0.0, 0
        with torch.inference_mode():
            for t in tasks:
                prompt = tok.encode(t.prompt)
                answer = tok.encode(t.answer, add_bos=False) + [tok.eos_id]
                ids = torch.tensor([prompt + answer])
                lp = token_logprobs(engine.policy_model(ids)[:, :-1], ids[:, 1:])[0, len(prompt) - 1 :]
                nll -= float(lp.sum())
                count += len(answer)
        out[f"accuracy_{precision}"] = round(acc, 4)
        out[f"perplexity_{precision}"] = round(math.exp(nll / count), 4)
    out["fast_accuracy_drop_pts"] = round(100 * (out["accuracy_fp32"] - out["accuracy_int8"]), 2)
    out["bf16_accuracy_drop_pts"] = round(100 * (out["accuracy_fp32"] - out["accuracy_bf16"]), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="10m,50m")
    ap.add_argument("--skip-quality", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as benchmarks/engine.py: OpenMP spin-waits make 2 threads slower on a busy machine
    result: dict = {"native_kernel": load_kernel() is not None, "load_avg_start": round(os.getloadavg()[0], 2)}
    for size in args.sizes.split(","):
        r = speed(size, args.rounds)
        print(json.dumps(r), flush=True)
        result.update(r)
    if not args.skip_quality:
        q = quality()
        print(json.dumps(q), flush=True)
        result.update(q)
    result["load_avg"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
