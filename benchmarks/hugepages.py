"""Batch-1 decode with the engine's packed weights on 4 KiB pages vs transparent huge pages, in one process.

Both sides are the same engine over the same saved model (benchmarks/engine.py's random Llama at `--size`),
loaded twice: one copy packs its decode weights into a plain `torch.empty` buffer (the engine before
`engine/local/hugepages.py`), the other into `hugepage_empty` (the engine now). Rounds alternate A, B, A, B
on one thread, each a greedy 128-token generation from one 64-token prompt on an engine already warm (its
packs built, its kernel compiled), so only decode and prefill are timed; the outputs are checked identical.
Prints every round, the machine's THP mode and its load; last line one JSON object:
`hugepage_speedup_<size>` = median ms/token on 4 KiB pages / median on huge pages.

    python benchmarks/hugepages.py [--sizes 10m,50m] [--rounds 9]
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

import posttrain.engine.local.pack as pack  # where the packed weights are allocated
from engine import build  # benchmarks/: the script's own directory is on sys.path
from posttrain.engine.local.engine import LocalEngine
from posttrain.engine.local.hugepages import thp_mode
from posttrain.models import load_model
from posttrain.types import SamplingParams


def measure(size: str, rounds: int) -> dict:
    rng = random.Random(2)
    prompt = [rng.randrange(3, 100) for _ in range(64)]
    params = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
    engines = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = build(size, Path(tmp) / "model")
        huge = pack.hugepage_empty
        for name in ("4k", "huge"):
            pack.hugepage_empty = huge if name == "huge" else (lambda n, dtype: torch.empty(n, dtype=dtype))
            try:
                model, tok = load_model(path)
                engines[name] = LocalEngine(model.eval(), tok)
                engines[name].generate([prompt], params)  # packs the weights (into this side's buffer), builds the kernel
            finally:
                pack.hugepage_empty = huge
    ms: dict[str, list[float]] = {k: [] for k in engines}
    outs = {}
    for _ in range(rounds):
        for name, eng in engines.items():
            t = time.perf_counter()
            outs[name] = eng.generate([prompt], params)[0][0].token_ids
            ms[name].append(round(1e3 * (time.perf_counter() - t) / params.max_tokens, 3))
    print(f"{size}: ms/token 4k {ms['4k']}  huge {ms['huge']}", flush=True)
    med = {k: statistics.median(v) for k, v in ms.items()}
    return {f"hugepage_speedup_{size}": round(med["4k"] / med["huge"], 3), f"ms_per_token_4k_{size}": med["4k"],
            f"ms_per_token_huge_{size}": med["huge"], f"runs_4k_{size}": ms["4k"], f"runs_huge_{size}": ms["huge"],
            f"identical_{size}": outs["4k"] == outs["huge"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10m,50m")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out: dict = {"thp_mode": thp_mode(), "load_start": os.getloadavg()}
    for size in args.sizes.split(","):
        out.update(measure(size, args.rounds))
    out["load_end"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
