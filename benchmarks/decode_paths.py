"""One decode step of a wide batch: the C kernel 16 rows per call vs the batched PyTorch step.

`FusedDecoder.step` picks between the two with `native_is_faster` (engine/local/fused.py); this measures
both on the same random model, the same cache contents and the same rows, one after the other in each
round, so the rule can be checked on a machine: for each model size (the engine benchmark's 1m / 10m /
50m shapes) and batch (equal lengths, and ragged lengths as in agent episodes), the median step time of
each path and their ratio (PyTorch / kernel: above 1, the kernel is faster), and which one the rule picks.

    python benchmarks/decode_paths.py                 # 1 thread, 5 rounds of 10 steps
    python benchmarks/decode_paths.py --threads 2

Last line, one JSON object: `cases` (size, batch, lengths, both times in ms, the ratio, the rule's pick and
whether it picked the faster one), `rule_right` (cases where it did) and `rule_cost` (the worst ratio of
the picked path's time to the faster one's), the thread count and the load.
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

SIZES = {"1m": (128, 6, 384), "10m": (384, 6, 1024), "50m": (640, 10, 1728)}  # as benchmarks/engine.py
BATCHES = [(32, 64, 64), (64, 100, 500), (64, 150, 900), (128, 200, 200)]  # rows, shortest and longest row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps per path per round")
    ap.add_argument("--sizes", nargs="+", default=list(SIZES))
    args = ap.parse_args()

    import torch

    from posttrain.engine.local.fused import NATIVE_MAX_TOKENS, FusedDecoder, native_is_faster
    from posttrain.engine.local.kv import SlotCache
    from posttrain.models import CausalLM, ModelConfig

    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    cases = []
    for size in args.sizes:
        hidden, layers, inter = SIZES[size]
        heads = hidden // 32
        cfg = ModelConfig(vocab_size=100, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                          max_position_embeddings=4096)
        model = CausalLM(cfg)
        model.init_weights(torch.Generator().manual_seed(0))
        model.eval()
        dec = FusedDecoder(model)
        if dec.kernel is None:
            raise SystemExit("the native decode kernel did not build (a C compiler is needed): nothing to compare")
        for b, lo, hi in BATCHES:
            rng = random.Random(0)
            starts = [rng.randint(lo, hi) for _ in range(b)]
            cache = SlotCache(cfg, b, hi + 2)
            gen = torch.Generator().manual_seed(1)
            for t in cache.k + cache.v:
                t.normal_(generator=gen)
            ids = torch.randint(3, 90, (b,), generator=gen)

            def pytorch(dec=dec, ids=ids, starts=starts, cache=cache):
                kernel, dec.kernel = dec.kernel, None  # the step's PyTorch path on the same packed weights
                try:
                    return dec.step(ids, starts, cache)
                finally:
                    dec.kernel = kernel

            def native(dec=dec, ids=ids, starts=starts, cache=cache):
                out = dec.native_step(ids, starts, cache)
                assert out is not None
                return out

            times: dict[str, list[float]] = {"pytorch": [], "native": []}
            with torch.inference_mode():
                torch.testing.assert_close(pytorch(), native(), atol=1e-3, rtol=1e-3)  # the same step either way
                for _ in range(args.rounds):
                    for name, fn in (("pytorch", pytorch), ("native", native)):
                        t0 = time.perf_counter()
                        for _ in range(args.steps):
                            fn()
                        times[name].append((time.perf_counter() - t0) / args.steps * 1e3)
            pt, nt = statistics.median(times["pytorch"]), statistics.median(times["native"])
            picks_native = native_is_faster(b, max(starts) + 1, starts, hidden)
            picked, best = (nt if picks_native else pt), min(pt, nt)
            row = {"size": size, "rows": b, "lengths": [lo, hi], "pytorch_ms": round(pt, 3), "native_ms": round(nt, 3),
                   "ratio": round(pt / nt, 3), "rule": "native" if picks_native else "pytorch",
                   "rule_right": picked == best, "rule_cost": round(picked / best, 3),
                   "calls": -(-b // NATIVE_MAX_TOKENS)}
            cases.append(row)
            print(f"{size:>4} {b:>4} rows, lengths {lo}-{hi}: pytorch {pt:8.2f} ms  kernel x{row['calls']} {nt:8.2f} ms"
                  f"  ratio {pt / nt:5.2f}  rule: {row['rule']}{'' if row['rule_right'] else ' (the slower)'}", flush=True)
    print(json.dumps({"cases": cases, "rule_right": sum(c["rule_right"] for c in cases), "n_cases": len(cases),
                      "rule_cost": max(c["rule_cost"] for c in cases), "threads": args.threads,
                      "load_start": load_start, "load_end": os.getloadavg()}))


if __name__ == "__main__":
    main()
