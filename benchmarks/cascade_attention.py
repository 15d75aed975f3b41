"""Cascade attention of GRPO decode steps: the C kernel (`pt_cascade_attend`) against the PyTorch matmul path.

Workload: `benchmarks/engine.py`'s GRPO shape (`--prompts` prompts x n=16, 192-token prompts of which 128 are
a preamble every prompt shares, 64 new tokens, T=1, no EOS) on its random 10M (or `--size`) Llama, the local
engine only. The two variants differ in one thing: whether `SlotCache.attend` finds the kernel (the PyTorch
variant is what `kv.load_kernel` returning None gives). Interleaved rounds (each variant once per round, after
one untimed call of each), medians; the same seed, so both sample the same tokens. `--threads` sets torch's
intra-op threads, which the C path also splits its rows over. Both paths run whatever the engine's rule
(`kv.native_attention_pays`) would pick; `engine_picks` says which it picks here.

Run: ``python benchmarks/cascade_attention.py [--size 10m] [--prompts 64] [--rounds 3] [--threads 1]``.
The last line is one JSON object with cascade_speedup (C tokens/s / PyTorch tokens/s), both tokens/s, every
round's seconds and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from engine import SIZES, build  # benchmarks/: the script's own directory is on sys.path
from posttrain.engine import LocalEngine
from posttrain.engine.local import kv as kv_module
from posttrain.engine.local.native_decode import load_kernel
from posttrain.models import load_model
from posttrain.types import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="10m", choices=sorted(SIZES))
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.rounds < 3:
        raise SystemExit("--rounds must be >= 3 (medians of at least three runs)")
    kernel = load_kernel()
    if kernel is None:
        raise SystemExit("the native decode kernel did not build (a C compiler is needed): nothing to compare")
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = load_model(build(args.size, Path(tmp) / "model"))
    rng = random.Random(1)
    preamble = [rng.randrange(3, 100) for _ in range(128)]
    prompts = [preamble + [rng.randrange(3, 100) for _ in range(64)] for _ in range(args.prompts)]
    params = SamplingParams(n=16, max_tokens=64, temperature=1.0, ignore_eos=True, seed=0)
    tokens = args.prompts * 16 * 64
    outputs: dict[str, list] = {}

    rule = kv_module.native_attention_pays
    picks = "c" if rule(args.threads, model.config.num_attention_heads * model.config.head_dim) else "torch"

    def run(variant: str) -> float:
        kv_module.load_kernel = (lambda: kernel) if variant == "c" else (lambda: None)
        engine = LocalEngine(model, tok)
        t = time.perf_counter()
        groups = engine.generate(prompts, params)
        elapsed = time.perf_counter() - t
        outputs[variant] = [[c.token_ids for c in g] for g in groups]
        return elapsed

    kv_module.native_attention_pays = lambda threads, hidden: True  # both paths measured, whatever the rule
    try:
        for variant in ("torch", "c"):
            run(variant)  # untimed: allocation, first packing
        times: dict[str, list[float]] = {"torch": [], "c": []}
        for _ in range(args.rounds):
            for variant in times:
                times[variant].append(run(variant))
    finally:
        kv_module.load_kernel, kv_module.native_attention_pays = load_kernel, rule
    tps = {v: tokens / statistics.median(t) for v, t in times.items()}
    same = sum(a == b for ga, gb in zip(outputs["c"], outputs["torch"]) for a, b in zip(ga, gb))
    print(f"{args.size}, {args.prompts} prompts x 16, {args.threads} thread(s): PyTorch {tps['torch']:.0f} tok/s, "
          f"C {tps['c']:.0f} tok/s: {tps['c'] / tps['torch']:.2f}x", flush=True)
    print(json.dumps({
        "cascade_speedup": round(tps["c"] / tps["torch"], 3),
        "c_tok_s": round(tps["c"], 1), "torch_tok_s": round(tps["torch"], 1),
        "c_s": [round(x, 2) for x in times["c"]], "torch_s": [round(x, 2) for x in times["torch"]],
        "samples_identical": same, "samples": args.prompts * 16,
        "engine_picks": picks, "size": args.size, "threads": args.threads, "load_start": load_start, "load_end": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
