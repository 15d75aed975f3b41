"""Rollout-engine speed, as ratios against HF transformers `generate`, measured in one run.

The model: a random Llama built locally (no downloads), saved with posttrain's
`save_model` and loaded both as the native model and as transformers'
`LlamaForCausalLM` from the same files (character tokenizer, vocab 100,
fp32, CPU, one intra-op thread for both engines: on an oversubscribed
machine OpenMP's spin-waits make 2 threads slower than 1 for both).

Workloads (every baseline measured in the same run, variants interleaved,
medians of `--rounds` >= 3):
- grpo: `--prompts` prompts x n=16, 64 new tokens, T=1 (no EOS: fixed length),
  prompts of a shared 128-token preamble + a 64-token problem, against
  `generate(num_return_sequences=16)` -> output tokens/s ratio;
- batch1: one 64-token prompt, greedy, 128 new tokens -> latency ratio (the
  outputs are checked token-identical);
- agent: 4 episodes x 10 turns of a multi-turn transcript (shared system
  prompt; each turn resends the history plus the last answer and a new
  observation), n=4 samples per turn -> prefill tokens computed / submitted
  and the prefix-cache hit rate;
- spec (`spec_speedup`): a model posttrain trained, on its own work: the built-in agent base running
  held-out `agent:lookup` episodes one at a time, prompt lookup vs plain decoding, at the agent recipe's
  temperature (the headline) and greedy (episodes checked token-identical); see benchmarks/spec_trained.py
  (the base is built once per machine and cached; `--spec-cache-dir` points at a cache).
- spec_draft (`spec_draft_speedup`, `spec_draft_greedy_speedup`, ...): a draft model posttrain distilled for a
  10M worked-product model posttrain pre-trained, batch 1 (benchmarks/spec_draft.py; both built once and cached
  in `--spec-cache-dir`).
- spec_copier (`spec_copier_*`, a synthetic upper bound, not the headline): copying a 120-character text
  that is in the prompt, with a one-layer Llama whose weights are set by hand to copy (`copier_model`: a
  positional attention head reads the token 120 places back); prompt lookup (k=8) vs plain, T=1 and greedy.
  The same model gives perplexity vs KV bytes for a sliding window with attention sinks.
  Exactness itself is proven by tests/engine/test_spec_decode.py.

GRPO ablations (same run, same rounds): `grpo_no_preamble` (192-token prompts that share nothing, so
HF recomputes nothing it could have shared), `grpo_no_prefix_cache` (the local engine without its
prefix cache) and `grpo_torch_attention` (decode steps' cascade attention in PyTorch matmuls, not C).
Utilisation against this machine's own ceilings measured in the same run (`roofline`):
`grpo_gemm_frac` (decode FLOP/s / one thread's 1024^3 GEMM FLOP/s) and `batch1_bandwidth_frac` (weight
bytes read per second by the decode steps / the fastest one thread reads a buffer as large as the weights,
by any of three readers on 4 KiB or huge pages, measured beside each batch-1 round; the median of the rounds'
fractions; the whole call's figure, set-up and prefill included, as `batch1_bandwidth_frac_end_to_end`, and the
decode steps against a 256 MB buffer as `batch1_bandwidth_frac_dram`).

Run: ``nice -n 5 python benchmarks/engine.py [--size 1m] [--rounds 3] [--prompts 64]``.
The last line is one JSON object with grpo_speedup, batch1_speedup,
prefill_fraction, prefix_hit_rate and spec_speedup. ``--sweep`` runs 1m, 10m and 50m in turn and leads
with grpo_speedup_{1m,10m,50m}, batch1_speedup_{1m,10m,50m}, grpo_gemm_frac_{10m,50m} and
batch1_bandwidth_frac_{10m,50m}.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import statistics
import string
import tempfile
import time
from pathlib import Path

import torch
from spec_draft import build_models as build_drafts
from spec_draft import measure as measure_drafts
from spec_trained import spec_trained  # benchmarks/: the script's own directory is on sys.path

from posttrain.engine import LocalEngine, SpecConfig
from posttrain.engine.local import kv as kv_module
from posttrain.engine.local.hugepages import hugepage_empty
from posttrain.engine.local.native_decode import load_kernel
from posttrain.models import CausalLM, ModelConfig, char_tokenizer, load_model, save_model
from posttrain.provenance import machine
from posttrain.types import SamplingParams

SIZES = {  # name -> (hidden, layers, intermediate); heads = hidden / 32, kv heads = heads / 2
    "1m": (128, 6, 384),
    "10m": (384, 6, 1024),
    "50m": (640, 10, 1728),
}


def build(size: str, directory: Path, seed: int = 0) -> Path:
    hidden, layers, inter = SIZES[size]
    tok = char_tokenizer()
    heads = hidden // 32
    cfg = ModelConfig(
        vocab_size=tok.vocab_size,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=4096,
    )
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    return save_model(model, tok, directory)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def grpo(native, tok, hf, n_prompts: int, rounds: int, preamble_len: int = 128, prefix_cache: bool = True,
         tag: str = "grpo", native_attention: bool = True) -> dict:
    """`preamble_len` tokens shared by every prompt (0: prompts of the same length that share nothing, the
    workload where HF's recomputation costs it nothing extra); `prefix_cache=False`: the local engine
    without its prefix cache (n samples of one prompt still share that prompt's prefill);
    `native_attention=False`: decode steps' cascade attention in PyTorch matmuls instead of the C kernel."""
    rng = random.Random(1)
    preamble = [rng.randrange(3, 100) for _ in range(preamble_len)]
    prompts = [preamble + [rng.randrange(3, 100) for _ in range(192 - preamble_len)] for _ in range(n_prompts)]
    n, new = 16, 64
    params = SamplingParams(n=n, max_tokens=new, temperature=1.0, ignore_eos=True, seed=0)
    ids = torch.tensor(prompts)

    def run_hf():
        with torch.inference_mode():
            out = hf.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=new, num_return_sequences=n, eos_token_id=None, pad_token_id=0,
            )
        assert out.shape == (n_prompts * n, ids.shape[1] + new)

    stats = {}

    def run_local():
        eng = LocalEngine(native, tok, prefix_cache_tokens=32768 if prefix_cache else 0)
        kernel = kv_module.load_kernel
        if not native_attention:  # the ablation only: SlotCache.attend then finds no kernel
            kv_module.load_kernel = lambda: None
        try:
            groups = eng.generate(prompts, params)
        finally:
            kv_module.load_kernel = kernel
        assert sum(len(c.token_ids) for g in groups for c in g) == n_prompts * n * new
        stats.update(eng.metrics())

    t_hf, t_local = [], []
    for _ in range(rounds):  # interleaved: background load hits both alike
        t_hf.append(timed(run_hf))
        t_local.append(timed(run_local))
    tokens = n_prompts * n * new
    hf_tps, local_tps = tokens / statistics.median(t_hf), tokens / statistics.median(t_local)
    return {
        f"{tag}_hf_tok_s": round(hf_tps, 1),
        f"{tag}_local_tok_s": round(local_tps, 1),
        f"{tag}_speedup": round(local_tps / hf_tps, 2),
        f"{tag}_prefill_fraction": round(stats["prefill_fraction"], 4),
        f"{tag}_prompt_len": len(prompts[0]),
        f"{tag}_shared_preamble": preamble_len,
        f"{tag}_prefix_cache": prefix_cache,
        f"{tag}_hf_s": [round(x, 2) for x in t_hf],
        f"{tag}_local_s": [round(x, 2) for x in t_local],
    }


DRAM_PROBE_BYTES = 256 * 1024 * 1024  # the roofline's read buffer: past a 32 MiB L3, and past what one VM's share
# of a large shared L3 keeps (on the Intel Xeon of RESULTS.md sums of 100 MB and more read at 12 GB/s, of 40 MB at 26-29)


class ReadCeiling:
    """The fastest one thread reads a buffer of `nbytes` here, again and again as a decode step reads its
    weights token after token: the best of three readers (torch's sum; the decode kernel's read probe
    `pt_stream_read`, eight-lane loads with a prefetch per line as the weight panels are read, plain and
    non-temporal) on 4 KiB pages and on transparent huge pages (`hugepage_empty`, what the engine's packed
    weights use). No reader or page size the engine could use is left out, so the engine is never credited
    against a slower ceiling than the machine gives. `batch1` sizes it as the model's weights: a working set that
    fits a cache is bounded by that cache, not by DRAM (against a 256 MB buffer a 10M model's 39 MB of weights
    read at 1.0-1.8x 'the ceiling'); the 256 MB figure is reported beside it. Measured again beside every
    batch-1 round: on a shared VM the bandwidth moves by 20-30% within minutes."""

    def __init__(self, nbytes: int = DRAM_PROBE_BYTES) -> None:
        n = nbytes // 4
        self.small = torch.randn(n)
        self.huge = hugepage_empty(n, torch.float32)
        self.huge.copy_(self.small)
        self.kernel = load_kernel()

    def readers(self, buf: torch.Tensor) -> dict:
        out = {"sum": buf.sum}
        if self.kernel is not None:
            ptr, n = buf.data_ptr(), buf.numel()
            out["c"] = lambda: self.kernel.pt_stream_read(ptr, n, 0)
            out["c_nt"] = lambda: self.kernel.pt_stream_read(ptr, n, 1)
        return out

    def measure(self, repeats: int = 3) -> dict:
        out = {}
        for name, buf in (("4k", self.small), ("huge", self.huge)):
            for reader, fn in self.readers(buf).items():
                fn()
                seconds = statistics.median(timed(fn) for _ in range(repeats))
                out[f"read_gb_s_{name}_{reader}"] = round(buf.numel() * 4 / seconds / 1e9, 2)
        out["read_gb_s"] = max(out.values())
        return out


@functools.cache
def read_ceiling(nbytes: int = DRAM_PROBE_BYTES) -> ReadCeiling:
    return ReadCeiling(nbytes)


def roofline() -> dict:
    """This machine's ceilings on one thread, measured now: fp32 GEMM FLOP/s (a 1024^3 matmul) and the
    streaming-read bandwidth of a 256 MB buffer (`ReadCeiling`: the fastest reader and page size), medians of 5."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    gemm = statistics.median(timed(lambda: a @ b) for _ in range(5))
    read = read_ceiling().measure(5)
    return {"peak_gemm_gflop_s": round(2 * 1024**3 / gemm / 1e9, 1), "peak_read_gb_s": read.pop("read_gb_s"),
            **{f"peak_{k}": v for k, v in read.items()}}


def utilisation(out: dict, native, ceiling: dict) -> dict:
    """How close each engine path comes to the machine's ceilings: GRPO decode as a share of GEMM FLOP/s
    (2 x parameters FLOPs per generated token; attention left out, so it is a lower bound) and batch-1
    decode as a share of read bandwidth (every weight read once per token; each round's decode steps, without
    the engine's set-up and the prompt's prefill, against the read ceiling measured beside them, median over
    rounds; the ceiling reads a buffer as large as the weights (`ReadCeiling`); `_end_to_end`: the whole 128-token
    call, as `batch1_speedup` times it; `_dram`: the decode steps against the 256 MB ceiling of the same rounds)."""
    params = native.num_parameters()
    res = {}
    if "grpo_local_tok_s" in out:
        res["grpo_gemm_frac"] = round(2 * params * out["grpo_local_tok_s"] / (ceiling["peak_gemm_gflop_s"] * 1e9), 3)
    if "batch1_decode_ms_runs" in out:
        def fracs(key: str, read: str = "batch1_read_gb_s") -> list[float]:
            return [4 * params / (ms / 1e3) / (gb * 1e9) for ms, gb in zip(out[key], out[read])]

        decode, whole = fracs("batch1_decode_ms_runs"), fracs("batch1_local_ms_runs")
        res["batch1_bandwidth_frac"] = round(statistics.median(decode), 3)
        res["batch1_bandwidth_frac_runs"] = [round(f, 3) for f in decode]
        res["batch1_bandwidth_frac_end_to_end"] = round(statistics.median(whole), 3)
        if "batch1_dram_read_gb_s" in out:
            dram = fracs("batch1_decode_ms_runs", "batch1_dram_read_gb_s")
            res["batch1_bandwidth_frac_dram"] = round(statistics.median(dram), 3)
    return res


def batch1(native, tok, hf, rounds: int) -> dict:
    rng = random.Random(2)
    prompt = [rng.randrange(3, 100) for _ in range(64)]
    new = 128
    outs = {}

    def run_hf():
        with torch.inference_mode():
            out = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=0)
        outs["hf"] = out[0, len(prompt) :].tolist()

    def run_local(tokens: int = new):
        eng = LocalEngine(native, tok)
        outs["local"] = eng.generate([prompt], SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))[0][0].token_ids

    # one untimed call of each side first: the engine packs its weights on its first decode (once per weight
    # version: 0.9 s at 50M, which a 5-round median otherwise reads as one slow round) and both allocate
    run_hf()
    run_local()
    t_hf, t_local, t_first, read, dram, readers = [], [], [], [], [], []
    weights = read_ceiling(4 * native.num_parameters())  # a buffer as large as the weights a decode step reads
    for _ in range(rounds):
        t_hf.append(timed(run_hf))
        t_first.append(timed(lambda: run_local(1)))  # engine, prefill and the first token: what decode-only excludes
        t_local.append(timed(run_local))
        readers.append(weights.measure())  # the ceiling of this round, for batch1_bandwidth_frac
        read.append(readers[-1].pop("read_gb_s"))
        dram.append(read_ceiling().measure()["read_gb_s"])
    hf_ms, local_ms = 1e3 * statistics.median(t_hf) / new, 1e3 * statistics.median(t_local) / new
    return {
        "batch1_hf_ms_per_token": round(hf_ms, 3),
        "batch1_local_ms_per_token": round(local_ms, 3),
        "batch1_hf_ms_runs": [round(1e3 * t / new, 3) for t in t_hf],
        "batch1_local_ms_runs": [round(1e3 * t / new, 3) for t in t_local],
        # the decode steps alone (the 127 tokens after the first; engine set-up and the prompt's prefill cancel)
        "batch1_decode_ms_runs": [round(1e3 * (t - f) / (new - 1), 3) for t, f in zip(t_local, t_first)],
        "batch1_read_gb_s": read,
        "batch1_read_gb_s_by_reader": {k: [r[k] for r in readers] for k in readers[0]},
        "batch1_dram_read_gb_s": dram,
        "batch1_speedup": round(hf_ms / local_ms, 2),
        "batch1_identical": outs["hf"] == outs["local"],
        "batch1_native_kernel": load_kernel() is not None,  # the compiled decode step (engine/native_decode.py)
    }


def agent_replay(native, tok, episodes: int = 4, turns: int = 10, n: int = 4) -> dict:
    rng = random.Random(3)
    system = [rng.randrange(3, 100) for _ in range(128)]
    eng = LocalEngine(native, tok)
    for _ in range(episodes):
        history = list(system)
        for _ in range(turns):
            history += [rng.randrange(3, 100) for _ in range(32)]  # the environment's observation
            group = eng.generate([history], SamplingParams(n=n, max_tokens=32, temperature=1.0, ignore_eos=True))[0]
            history += group[0].token_ids  # the agent continues with one of its samples
    m = eng.metrics()
    return {
        "prefill_fraction": round(m["prefill_fraction"], 4),
        "prefix_hit_rate": round(m["prefix_hit_rate"], 4),
        "agent_prefill_tokens": m["prefill_tokens"],
        "agent_prompt_tokens_submitted": m["prompt_tokens_submitted"],
        "agent_n": n,
    }


LETTERS = string.ascii_lowercase + "  ,."


def copy_prompt(rng: random.Random, tok, length: int) -> list[int]:
    """`<bos> TEXT |`: the copier (lag = len(TEXT)) continues with TEXT."""
    return tok.encode("".join(rng.choice(LETTERS) for _ in range(length)) + "|")


def copier_model(tok, lag: int, gap: float = 7.0) -> CausalLM:
    """A one-layer Llama whose weights are set by hand so that it copies the token `lag` places back.

    Two heads attend by position only: their queries and keys come from a
    constant direction of the residual stream, phased per RoPE frequency so
    the score is 10 * sum_i cos((d - lag) * theta_i), sharply highest at
    distance d == lag. Their values carry the attended token's one-hot
    identity into a second block of the residual stream, which the untied
    output head reads as logits, `gap` nats above every other token. The
    MLP is zero. Greedy decoding after `<bos> TEXT |` with lag = len(TEXT)
    therefore writes TEXT again; at T=1 each token is the copy with
    probability about 1 / (1 + 99 e^-gap).
    """
    v = tok.vocab_size
    hidden, head_dim = 256, 64
    cfg = ModelConfig(vocab_size=v, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=4, max_position_embeddings=4096, tie_word_embeddings=False)
    model = CausalLM(cfg)
    const = 2 * v  # residual dims: [0, v) current token, [v, 2v) copied token, 2v constant
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.norm.weight.fill_(1.0)
        layer = model.model.layers[0]
        layer.input_layernorm.weight.fill_(1.0)
        layer.post_attention_layernorm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        emb[:, :v] = torch.eye(v)
        emb[:, const] = 1.0
        scale = (hidden / 2) ** 0.5  # what RMSNorm multiplies an embedding (two unit entries) by
        half = head_dim // 2
        theta = 1.0 / (cfg.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))  # [half]
        amp = (8.0 * 10.0) ** 0.5 / scale  # |q| |k| / sqrt(head_dim) = 10 per frequency pair
        att = layer.self_attn
        for h, lo in ((0, 0), (1, head_dim)):  # head 0 carries tokens [0, 64), head 1 the rest
            r0 = h * head_dim
            att.q_proj.weight[r0 : r0 + half, const] = amp
            att.k_proj.weight[r0 : r0 + half, const] = amp * torch.cos(lag * theta)
            att.k_proj.weight[r0 + half : r0 + head_dim, const] = amp * torch.sin(lag * theta)
            n = min(head_dim, v - lo)
            att.v_proj.weight[r0 : r0 + n, lo : lo + n] = torch.eye(n)
            att.o_proj.weight[v + lo : v + lo + n, r0 : r0 + n] = torch.eye(n) / scale
        model.lm_head.weight[:, v : 2 * v] = torch.eye(v) * gap / (hidden / 3) ** 0.5
    return model.eval()


def window_quality(model: CausalLM, tok, windows=(None, 192, 128, 96, 64, 32), sinks: int = 4, chunk: int = 16) -> dict:
    """Perplexity of the copied text vs the KV bytes a sliding window with attention sinks keeps.

    Teacher-forced through the engine's own slot cache, chunk by chunk, as a long prompt would be prefilled.
    """
    from posttrain.engine.local.kv import SlotCache, WindowSpec

    rng = random.Random(5)
    prompts = [copy_prompt(rng, tok, 120) for _ in range(4)]
    rows = [(p, p[1:-1]) for p in prompts]  # the copy of the text is the target
    out = {}
    for w in windows:
        nll, count, nbytes = 0.0, 0, 0
        for prompt, target in rows:
            ids = prompt + target
            spec = WindowSpec(window=w, sinks=sinks) if w else None
            cache = SlotCache(model.config, 1, len(ids) + 2, window=spec, chunk=chunk)
            logits = []
            with torch.inference_mode():
                for lo in range(0, len(ids), chunk):
                    piece = ids[lo : lo + chunk]
                    logits.append(model(torch.tensor([piece]), cache=cache.bind(slice(0, 1), [lo], None, len(piece)))[0])
            logp = torch.log_softmax(torch.cat(logits)[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
            nll -= float(logp[len(prompt) - 1 :].sum())
            count += len(target)
            nbytes = cache.nbytes()
        out[str(w or "full")] = {"ppl": round(float(torch.tensor(nll / count).exp()), 3), "kv_bytes": nbytes}
    return {"window_ppl_vs_kv_bytes": out, "window_sequence_len": len(rows[0][0]) + len(rows[0][1])}


def spec(tok, rounds: int, length: int = 120) -> dict:
    model = copier_model(tok, lag=length)
    rng = random.Random(4)
    prompts = [copy_prompt(rng, tok, length) for _ in range(4)]
    new = length
    result: dict = {"spec_copy_len": length}
    for label, temperature in (("greedy", 0.0), ("t1", 1.0)):
        params = SamplingParams(max_tokens=new, temperature=temperature, ignore_eos=True, seed=0)
        outs, metrics = {}, {}

        def run(kind, params=params, outs=outs, metrics=metrics):
            cfg = SpecConfig("ngram", k=8, ngram_max=4, ngram_min=2) if kind == "spec" else None
            eng = LocalEngine(model, tok, speculative=cfg)
            toks = 0
            for p in prompts:  # one at a time: the latency-bound regime speculation is for
                c = eng.generate([p], params)[0][0]
                toks += len(c.token_ids)
                outs.setdefault(kind, []).append(c.token_ids)
            metrics[kind] = eng.metrics()
            return toks

        t_plain, t_spec = [], []
        for _ in range(rounds):
            outs.clear()
            t = time.perf_counter()
            n_plain = run("plain")
            t_plain.append(n_plain / (time.perf_counter() - t))
            t = time.perf_counter()
            n_spec = run("spec")
            t_spec.append(n_spec / (time.perf_counter() - t))
        m = metrics["spec"]
        result.update({
            f"spec_copier_{label}_plain_tok_s": round(statistics.median(t_plain), 1),
            f"spec_copier_{label}_tok_s": round(statistics.median(t_spec), 1),
            f"spec_copier_{label}_speedup": round(statistics.median(t_spec) / statistics.median(t_plain), 2),
            f"spec_copier_{label}_acceptance": round(m["spec_acceptance_rate"], 3),
            f"spec_copier_{label}_tokens_per_forward": round(m["tokens_per_forward"], 2),
        })
        copied = sum(o == p[1:-1] for o, p in zip(outs["plain"], prompts))
        result[f"spec_copier_{label}_exact_copies"] = f"{copied}/{len(prompts)}"
        if temperature == 0:
            result["spec_copier_greedy_identical"] = outs["plain"] == outs["spec"]
    result.update(window_quality(model, tok))
    return result


def measure(size: str, args, skip: set[str]) -> dict:
    import transformers

    out: dict = {"size": size}
    with tempfile.TemporaryDirectory() as tmp:
        path = build(size, Path(tmp) / "model")
        native, tok = load_model(path)
        hf = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
        out["params_m"] = round(native.num_parameters() / 1e6, 2)
        print(f"model {size}: {out['params_m']}M parameters", flush=True)
        if "batch1" not in skip:
            out.update(batch1(native, tok, hf, args.rounds))
            print({k: v for k, v in out.items() if k.startswith("batch1")}, flush=True)
        if "agent" not in skip:
            out.update(agent_replay(native, tok))
            keys = ("prefill_fraction", "prefix_hit_rate", "agent_prefill_tokens", "agent_prompt_tokens_submitted")
            print({k: out[k] for k in keys}, flush=True)
        if "spec" not in skip:
            out.update(spec_trained(rounds=args.rounds, cache_dir=args.spec_cache_dir))
            out["spec_speedup"] = out["spec_trained_speedup"]  # the trained model's, never the hand-set copier's
            # a draft posttrain distilled, for a 10M target posttrain trained (benchmarks/spec_draft.py)
            target, drafted, undistilled, dtok, source, info = build_drafts(args.spec_cache_dir, 0, 300)
            out.update(measure_drafts(target, drafted, undistilled, dtok, source, 64, args.rounds, 4, 0), **info)
            out.update(spec(tok, args.rounds))
            print({k: v for k, v in out.items() if k.startswith("spec")}, flush=True)
        if "grpo" not in skip:
            out.update(grpo(native, tok, hf, args.prompts, args.rounds))
            print({k: v for k, v in out.items() if k.startswith("grpo")}, flush=True)
        if "ablations" not in skip:  # the shared preamble and the prefix cache, one at a time
            out.update(grpo(native, tok, hf, args.prompts, args.rounds, preamble_len=0, tag="grpo_no_preamble"))
            out.update(grpo(native, tok, hf, args.prompts, args.rounds, prefix_cache=False, tag="grpo_no_prefix_cache"))
            out.update(grpo(native, tok, hf, args.prompts, args.rounds, native_attention=False, tag="grpo_torch_attention"))
            print({k: v for k, v in out.items() if k.startswith(("grpo_no", "grpo_torch"))}, flush=True)
        out.update(utilisation(out, native, args.ceiling))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1m", choices=sorted(SIZES))
    ap.add_argument("--sweep", action="store_true", help="every size in turn (1m, 10m, 50m); keys get a _<size> suffix")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--skip", default="", help="comma-separated workloads to skip: grpo,batch1,agent,spec,ablations")
    ap.add_argument("--spec-cache-dir", default=None, help="model.base.cache_dir of the trained agent base (spec)")
    args = ap.parse_args()
    if args.rounds < 3:
        raise SystemExit("--rounds must be >= 3 (medians of at least three runs)")
    torch.set_num_threads(1)
    skip = set(filter(None, args.skip.split(",")))
    load_start = os.getloadavg()
    print(json.dumps({"machine": machine()}), flush=True)
    args.ceiling = roofline()
    print(args.ceiling, flush=True)
    if not args.sweep:
        out = measure(args.size, args, skip)
        keys = ("grpo_speedup", "batch1_speedup", "prefill_fraction", "prefix_hit_rate", "spec_speedup")
        out.update(args.ceiling, load_start=load_start, load_end=os.getloadavg(), machine=machine())
        print(json.dumps({**{k: out.get(k) for k in keys}, **{k: v for k, v in out.items() if k not in keys}}))
        return
    merged: dict = {}
    for size in ("1m", "10m", "50m"):
        # speculation and the agent replay do not depend on the sweep's model (their own models / 1m only)
        out = measure(size, args, skip | ({"spec", "agent"} if size != "1m" else set()))
        merged.update({f"{k}_{size}": v for k, v in out.items() if k != "size"})
    keys = [f"{k}_{s}" for k in ("grpo_speedup", "batch1_speedup") for s in ("1m", "10m", "50m")]
    keys += [f"{k}_{s}" for k in ("grpo_gemm_frac", "batch1_bandwidth_frac") for s in ("10m", "50m")]
    merged.update(args.ceiling, load_start=load_start, load_end=os.getloadavg(), machine=machine())
    print(json.dumps({**{k: merged.get(k) for k in keys}, **{k: v for k, v in merged.items() if k not in keys}}))

if __name__ == "__main__":
    main()
