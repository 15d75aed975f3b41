"""Batch-1 greedy decode against llama.cpp, the engine a CPU user would pick instead, on the same weights.

The models: random Llamas of `benchmarks/engine.py`'s 10M and 50M shapes
(`SIZES`, built by `fast.random_model`, character vocabulary of 100), written
with `posttrain.models.gguf_export` as GGUF f32 and q8_0 and loaded by
llama.cpp through llama-cpp-python's bindings of its C API (`llama_decode`
on one sequence, greedy argmax over the last position's logits; the Python
around each call is a few microseconds against milliseconds per token).

Pairs, like for like: posttrain fp32 vs llama.cpp f32, and posttrain's
high-speed mode without speculation (`precision="int8"`: weight-only int8,
one scale per output channel) vs llama.cpp q8_0 (int8 blocks of 32 with an
f16 scale each; llama.cpp also rounds the activations to 8 bits, posttrain
keeps them fp32). `posttrain serve --fast` (int8 + prompt-lookup
speculation) is reported beside them against q8_0, but not in the key:
llama.cpp is measured without speculation, and a random model's greedy
output loops, which prompt lookup predicts unusually well.

Workload, identical on both sides: one 64-token prompt (the same ids as
benchmarks/fast.py), greedy, 128 new tokens, EOS ignored; time from the
request to the 128th token, so the 64-token prefill is counted on both sides
(one batched prefill forward, then 127 single-token forwards); ms/token =
that time / 128. posttrain's prefix cache is off and llama.cpp's context
is cleared before each generation, so every round prefills its prompt on
both sides. One thread on both sides (torch.set_num_threads(1), llama.cpp
n_threads = n_threads_batch = 1); f32 arithmetic on both sides for the f32
pair: KV cache in f32 (posttrain's is fp32; `--kv f16` gives llama.cpp its
default f16 cache) and flash attention off (llama.cpp's default, auto, turns
it on and computes attention in f16 on a CPU: `--flash-attn auto`);
llama.cpp's other context settings at their defaults. Both warm: every
engine and context is built once and runs one untimed generation first
(posttrain packs its kernel panels and rounded copy then; llama.cpp pages in
its mmapped weights), then `--rounds` rounds, every variant once per round,
interleaved so background load hits all alike; medians (the key), and the
fastest round of each (`_best_`: the least load-inflated, on a shared machine).

Correctness, asserted before any timing: with the f32 file, llama.cpp's
greedy continuation equals posttrain fp32's token for token, and llama.cpp's
logits along prompt + continuation (fed one token at a time) are within
`LOGIT_ATOL` of posttrain's full-sequence forward (1e-4 in f32, measured
~1e-6; 2e-2 with `--kv f16` or `--flash-attn auto`); llama.cpp's tokenizer
splits a text into the same ids as posttrain's character tokenizer. q8_0 and
int8 round differently, so their outputs are only compared (tokens in common
before the first difference), not asserted.

Run: ``nice -n 5 python benchmarks/llamacpp.py [--rounds 5] [--sizes 10m,50m]``
(needs ``pip install 'posttrain[llamacpp]'``, which builds llama.cpp from
source; on an AMX-capable Intel Xeon, llama.cpp's AMX backend crashed q8_0 decode with a segmentation
fault, llama.cpp issue #20824: build it without AMX, as benchmarks/RESULTS.md of 2026-12-05 shows).
The last line is one JSON object with batch1_vs_llamacpp_10m and
_50m (posttrain tokens/s ÷ llama.cpp's, the lower of the fp32/f32 and
int8/q8_0 pairs), the ms/token of every variant, and load_avg_start /
load_avg_end.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fast import random_model  # noqa: E402  (engine.py's 10m / 50m shapes, the same seed)

from posttrain.engine import LocalEngine, SpecConfig  # noqa: E402
from posttrain.engine.local.native_decode import load_kernel  # noqa: E402
from posttrain.models import char_tokenizer  # noqa: E402
from posttrain.models.gguf_export import export_gguf  # noqa: E402
from posttrain.types import SamplingParams  # noqa: E402

PROMPT_LEN, NEW = 64, 128
# f32 arithmetic on both sides, different summation orders: differences are ~1e-6 (measured); with an f16
# KV cache or flash attention llama.cpp rounds keys, values or queries to f16: ~3e-3 of logits within +-1.3
LOGIT_ATOL = {True: 1e-4, False: 2e-2}
TOKENIZER_TEXT = "Hello, world!\n  12+34=46 (x_y) {a: [b, c]} ~`'\"\\|<>?/"


def require_llama_cpp():
    try:
        import llama_cpp
    except ImportError:
        sys.exit("benchmarks/llamacpp.py needs llama-cpp-python: pip install 'posttrain[llamacpp]' (builds llama.cpp)")
    return llama_cpp


class LlamaCpp:
    """One llama.cpp model and context (one sequence), driven through the C API."""

    def __init__(self, path: Path, n_ctx: int, kv: str, flash_attn: str) -> None:
        lc = self.lc = require_llama_cpp()
        mp = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cp = lc.llama_context_default_params()
        cp.n_ctx, cp.n_threads, cp.n_threads_batch = n_ctx, 1, 1
        cp.type_k = cp.type_v = lc.GGML_TYPE_F32 if kv == "f32" else lc.GGML_TYPE_F16
        # flash attention on a CPU (llama.cpp's default "auto" turns it on) rounds queries to f16: logits
        # move by ~1e-3 of their range; off, llama.cpp's f32 graph is posttrain's arithmetic to ~1e-6
        cp.flash_attn_type = {"auto": lc.LLAMA_FLASH_ATTN_TYPE_AUTO, "off": lc.LLAMA_FLASH_ATTN_TYPE_DISABLED}[flash_attn]
        cp.no_perf = True
        self.ctx = lc.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context for {path}")
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)

    def _decode(self, ids: list[int]) -> np.ndarray:
        """Append ids to the sequence -> the last position's logits (a view of llama.cpp's buffer)."""
        lc = self.lc
        arr = (lc.llama_token * len(ids))(*ids)
        rc = lc.llama_decode(self.ctx, lc.llama_batch_get_one(arr, len(ids)))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))

    def reset(self) -> None:
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.ctx), True)

    def greedy(self, prompt: list[int], new: int) -> list[int]:
        self.reset()
        logits = self._decode(prompt)
        out = [int(logits.argmax())]
        while len(out) < new:
            out.append(int(self._decode(out[-1:]).argmax()))
        return out

    def logits_along(self, ids: list[int]) -> np.ndarray:
        """Logits after each of `ids` [len(ids), V], one token per decode."""
        self.reset()
        return np.stack([self._decode([t]).copy() for t in ids])

    def tokenize(self, text: str) -> list[int]:
        raw = text.encode()
        buf = (self.lc.llama_token * (len(raw) + 8))()
        n = self.lc.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), True, False)
        return list(buf[:n])

    def close(self) -> None:
        self.lc.llama_free(self.ctx)
        self.lc.llama_model_free(self.model)


LOG_SINK: list = []  # the log callback lives as long as the process: llama.cpp may log until exit


def quiet_llama_cpp() -> None:
    """Route llama.cpp's load-time log lines to nowhere."""
    lc = require_llama_cpp()
    LOG_SINK.append(lc.llama_log_callback(lambda level, text, user: None))
    lc.llama_log_set(LOG_SINK[-1], ctypes.c_void_p())


def measure(size: str, rounds: int, directory: Path, kv: str, flash_attn: str) -> dict:
    torch.manual_seed(0)
    model, tok = random_model(size), char_tokenizer()
    rng = random.Random(2)  # the prompt of benchmarks/fast.py and engine.py's batch1
    prompt = [rng.randrange(3, 100) for _ in range(PROMPT_LEN)]
    files = {dtype: export_gguf(model, tok, directory / f"{size}-{dtype}.gguf", dtype) for dtype in ("f32", "q8_0")}
    lcpp = {dtype: LlamaCpp(path, PROMPT_LEN + NEW + 64, kv, flash_attn) for dtype, path in files.items()}
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
    # no prefix cache: every round prefills its prompt, as llama.cpp's cleared context does
    engines = {
        "fp32": LocalEngine(model, tok, prefix_cache_tokens=0),
        "int8": LocalEngine(model, tok, prefix_cache_tokens=0, precision="int8"),
        "fast": LocalEngine(model, tok, prefix_cache_tokens=0, precision="int8", speculative=SpecConfig()),
    }

    def posttrain(name: str):
        return lambda: engines[name].generate([prompt], params)[0][0].token_ids

    runs = {f"posttrain_{m}": posttrain(m) for m in engines}
    runs.update({f"llamacpp_{d}": (lambda d=d: lcpp[d].greedy(prompt, NEW)) for d in lcpp})
    outs = {name: run() for name, run in runs.items()}  # warm-up, untimed

    # correctness first: the same function of the same ids, token for token
    assert outs["llamacpp_f32"] == outs["posttrain_fp32"], (
        f"{size}: llama.cpp f32 and posttrain fp32 greedy outputs differ at token "
        f"{next(i for i, (a, b) in enumerate(zip(outs['llamacpp_f32'], outs['posttrain_fp32'])) if a != b)}"
    )
    seq = prompt + outs["posttrain_fp32"][:-1]
    with torch.inference_mode():
        ref = model(torch.tensor([seq]))[0].numpy()
    logit_diff = float(np.abs(lcpp["f32"].logits_along(seq) - ref).max())
    atol = LOGIT_ATOL[kv == "f32" and flash_attn == "off"]
    assert logit_diff < atol, f"{size}: llama.cpp f32 logits differ from posttrain's by {logit_diff:.2e}"
    text_ids = tok.encode(TOKENIZER_TEXT)
    assert lcpp["f32"].tokenize(TOKENIZER_TEXT) == text_ids, f"{size}: llama.cpp tokenizes differently"
    assert outs["posttrain_fast"] == outs["posttrain_int8"]  # speculation is exact

    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            t = time.perf_counter()
            out = run()
            times[name].append(time.perf_counter() - t)
            assert len(out) == NEW
    ms = {name: 1e3 * statistics.median(ts) / NEW for name, ts in times.items()}
    best = {name: 1e3 * min(ts) / NEW for name, ts in times.items()}  # the least load-inflated round
    for handle in lcpp.values():
        handle.close()

    def common(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    fp32_ratio = ms["llamacpp_f32"] / ms["posttrain_fp32"]  # speed ratio = inverse time ratio
    int8_ratio = ms["llamacpp_q8_0"] / ms["posttrain_int8"]
    res = {f"params_m_{size}": round(model.num_parameters() / 1e6, 1)}
    res.update({f"{name}_ms_per_token_{size}": round(v, 3) for name, v in ms.items()})
    best_ratio = min(best["llamacpp_f32"] / best["posttrain_fp32"], best["llamacpp_q8_0"] / best["posttrain_int8"])
    res.update({
        f"batch1_vs_llamacpp_{size}": round(min(fp32_ratio, int8_ratio), 3),
        f"batch1_vs_llamacpp_best_{size}": round(best_ratio, 3),
        f"fp32_vs_llamacpp_f32_{size}": round(fp32_ratio, 3),
        f"int8_vs_llamacpp_q8_0_{size}": round(int8_ratio, 3),
        f"fast_vs_llamacpp_q8_0_{size}": round(ms["llamacpp_q8_0"] / ms["posttrain_fast"], 3),
        f"fast_acceptance_{size}": round(engines["fast"].metrics()["spec_acceptance_rate"], 3),
        f"f32_greedy_identical_{size}": True,  # asserted above
        f"f32_max_logit_diff_{size}": float(f"{logit_diff:.3g}"),
        f"q8_0_int8_common_prefix_{size}": common(outs["llamacpp_q8_0"], outs["posttrain_int8"]),
        f"ms_rounds_{size}": {name: [round(1e3 * t / NEW, 3) for t in ts] for name, ts in times.items()},
    })  # fmt: skip
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="10m,50m")
    ap.add_argument("--kv", choices=("f32", "f16"), default="f32", help="llama.cpp's KV cache type (posttrain's is fp32)")
    ap.add_argument("--flash-attn", choices=("off", "auto"), default="off",
                    help="llama.cpp's flash attention (auto, its default, computes attention in f16 on a CPU)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as benchmarks/engine.py and fast.py; llama.cpp gets n_threads = 1
    require_llama_cpp().llama_backend_init()
    quiet_llama_cpp()
    result: dict = {"load_avg_start": round(os.getloadavg()[0], 2), "native_kernel": load_kernel() is not None,
                    "llama_cpp_python": require_llama_cpp().__version__, "kv_cache": args.kv, "flash_attn": args.flash_attn,
                    "rounds": args.rounds, "prompt_tokens": PROMPT_LEN, "new_tokens": NEW}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            r = measure(size, args.rounds, Path(tmp), args.kv, args.flash_attn)
            print(json.dumps(r), flush=True)
            result.update(r)
    result["load_avg_end"] = round(os.getloadavg()[0], 2)
    lead = [f"batch1_vs_llamacpp_{s}" for s in args.sizes.split(",")]
    print(json.dumps({**{k: result[k] for k in lead}, **{k: v for k, v in result.items() if k not in lead}}))


if __name__ == "__main__":
    main()
