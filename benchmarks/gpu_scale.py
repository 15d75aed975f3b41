"""The GPU figures of issue 37: vLLM vs the local engine, learner MFU, weight sync, a colocated GRPO run.

Run by `scripts/gpu_check.sh` (or `python benchmarks/scale.py --gpu`, or alone) on a machine with a CUDA GPU;
minutes on one H100/H200-class GPU. The model is random with Qwen2.5-0.5B's layers (hidden 896, 24 layers,
14 heads / 2 KV heads, MLP 4864, tied embeddings) and a byte-level BPE tokenizer trained here, on this
repository's sources and Python's standard library (nothing is downloaded); the model's vocabulary IS the
tokenizer's, so every sampled id decodes. Prints, as its last line, one JSON object with `gpu`,
`vllm_vs_local_tok_s`, `learner_mfu`, `weight_sync_s`, `colocated_grpo_logprob_mismatch` and `unmeasured`:
every key it could not measure, with the reason (never an invented value).
Without a GPU it runs the same code at a tiny scale on the CPU (tokenizer training, the model, the local
engine, a learner update, the GRPO config) and reports every GPU key unmeasured, so a typo cannot wait for
the first GPU to surface.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

KEYS = ("vllm_vs_local_tok_s", "learner_mfu", "weight_sync_s", "colocated_grpo_logprob_mismatch")
# dense bf16 peak FLOP/s by device-name fragment (vendor datasheets, without sparsity)
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "4090": 165e12}
EOS, PAD = "<|endoftext|>", "<|pad|>"


def corpus(max_bytes: int) -> Iterator[str]:
    """Local text to train the tokenizer on: this repository's sources and docs, then Python's standard library."""
    roots = [ROOT / "src", ROOT / "docs", Path(sysconfig.get_paths()["stdlib"])]
    used = 0
    for root in roots:
        for path in sorted(root.rglob("*.py")) + sorted(root.rglob("*.md")):
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            yield text
            used += len(text)
            if used >= max_bytes:
                return


def bpe_tokenizer(vocab: int, corpus_bytes: int):
    """A byte-level BPE (GPT-2 / Qwen style: any byte sequence encodes) trained on `corpus` to <= `vocab` ids."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from posttrain.models.tokenizer import Tokenizer

    backend = HFTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOS, PAD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(corpus(corpus_bytes), trainer)
    return Tokenizer(backend, None, EOS, PAD)


def qwen05b_config(vocab: int, tiny: bool = False):
    from posttrain.models import ModelConfig

    if tiny:  # the CPU smoke: the same code at a size a laptop runs in seconds
        return ModelConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, model_type="qwen2", tie_word_embeddings=True,
                           max_position_embeddings=1024, rope_theta=1e6)
    return ModelConfig(vocab_size=vocab, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, model_type="qwen2", tie_word_embeddings=True,
                       max_position_embeddings=4096, rope_theta=1e6)


def make_model(directory: Path, tiny: bool, vocab: int, corpus_bytes: int):
    from posttrain.models import CausalLM, save_model

    tok = bpe_tokenizer(vocab, corpus_bytes)
    model = CausalLM(qwen05b_config(tok.vocab_size, tiny))  # the vocabulary is the tokenizer's: every id decodes
    model.init_weights(torch.Generator().manual_seed(0))
    save_model(model, tok, directory)
    return model, tok


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def learner_mfu(model, device: str, rows: int, width: int) -> dict:
    from posttrain.config import RLConfig
    from posttrain.rl.learner import Learner
    from posttrain.rl.train_batch import TrainBatch

    dtype = "bf16" if device.startswith("cuda") else "fp32"
    learner = Learner(model, RLConfig(device=device, dtype=dtype, logprob_chunk=2048), max_tokens=width,
                      importance_sampling=True)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, width), generator=g)
    batch = TrainBatch(ids, torch.ones(rows, width - 1), -torch.ones(rows, width - 1) * 10, torch.randn(rows, generator=g),
                       torch.full((rows,), width))
    learner.update(batch)  # warm-up (allocator, kernels)
    _sync(device)
    start = time.perf_counter()
    steps = 3
    for _ in range(steps):
        learner.update(batch)
    _sync(device)
    seconds = (time.perf_counter() - start) / steps
    n = sum(p.numel() for p in model.parameters())
    c = model.config
    tokens = rows * width
    # model FLOPs: 6 N per token (forward + backward) plus causal attention; the importance-sampling pass is overhead
    attn = 6 * 2 * c.num_hidden_layers * width * c.num_attention_heads * c.head_dim * tokens / 2
    return {"learner_tokens_per_s": round(tokens / seconds), "learner_flops_per_s": (6 * n * tokens + attn) / seconds}


def rollout_tok_s(engine, prompts, params, device: str) -> float:
    engine.generate(prompts[:4], params)  # warm-up
    _sync(device)
    start = time.perf_counter()
    groups = engine.generate(prompts, params)
    _sync(device)
    return sum(len(c.token_ids) for g in groups for c in g) / (time.perf_counter() - start)


def grpo_overrides(model_dir: Path, run_dir: Path, steps: int, engine: str, device: str) -> list[str]:
    """The colocated GRPO run: the 0.5B-shaped model, vLLM on the learner's GPU sleeping around each update."""
    return [f"model.path='{model_dir}'", f"run_dir='{run_dir}'", "name='colocated'", "tensorboard=false",
            f"engine.kind='{engine}'", f"engine.device='{device}'", f"rl.device='{device}'",
            f"rl.dtype='{'bf16' if device.startswith('cuda') else 'fp32'}'", "engine.gpu_memory_utilization=0.3",
            "engine.sleep_level=1", "sampling.n=8", "sampling.max_tokens=32", f"train.steps={steps}",
            "train.prompts_per_step=8", "train.drop_zero_variance=false", "eval.size=4", "eval.every=0",
            "train.checkpoint_every=0"]


def colocated_grpo(model_dir: Path, steps: int, engine: str = "vllm", device: str = "cuda") -> dict:
    """`steps` GRPO steps under the Trainer (run in a child process: vLLM's memory is its own) -> its figures."""
    from posttrain.config import load_config
    from posttrain.rl.trainer import Trainer

    with tempfile.TemporaryDirectory() as runs:
        cfg = load_config(None, grpo_overrides(model_dir, Path(runs), steps, engine, device))
        mismatch, mismatch_max, step_s = [], [], []
        trainer = Trainer(cfg, overwrite=True, on_step=lambda r: (mismatch.append(r.metrics.get("mismatch_mean")),
                                                                   mismatch_max.append(r.metrics.get("mismatch_max")),
                                                                   step_s.append(r.metrics["step_s"])))
        trainer.run()
        sleeps = trainer.colocation.sleeps
        trainer.close()
    got = [m for m in mismatch if m is not None]
    return {"colocated_grpo_steps": len(step_s), "colocated_grpo_sleeps": sleeps,
            "colocated_grpo_logprob_mismatch": round(sum(got) / len(got), 5) if got else None,
            "colocated_grpo_logprob_mismatch_max": max((m for m in mismatch_max if m is not None), default=None),
            "colocated_grpo_step_s": round(sum(step_s) / max(len(step_s), 1), 3)}


def gpu_figures(notes: list[str], vocab: int = 65536, corpus_mb: int = 16, grpo_steps: int = 20, device: str = "cuda",
                tiny: bool = False) -> dict:
    """Every GPU figure it can measure (absent ones get their reason in `notes`); `scale.py --gpu` calls it.
    `device="cpu", tiny=True` is the CPU smoke: the same code, a tiny model, the local engine in the GRPO run."""
    cuda = device.startswith("cuda")
    out: dict = {"gpu": torch.cuda.get_device_name() if cuda else None}
    with tempfile.TemporaryDirectory() as d:
        model_dir = Path(d) / "m"
        t0 = time.perf_counter()
        model, tok = make_model(model_dir, tiny, vocab, corpus_mb << 20)
        assert tok.decode(tok.encode("def f(x): return x")) == "def f(x): return x"  # byte-level: round-trips
        out.update(vocab=tok.vocab_size, params=sum(p.numel() for p in model.parameters()),
                   tokenizer_s=round(time.perf_counter() - t0, 1))
        from posttrain.types import SamplingParams

        prompts = [tok.encode(f"def f{i}(x):\n    return x + {2 * i}\n") for i in range(8 if tiny else 64)]
        params = SamplingParams(n=2 if tiny else 8, temperature=1.0, max_tokens=8 if tiny else 128, seed=0)
        try:
            from posttrain.engine.remote.vllm_engine import VLLMEngine

            engine = VLLMEngine(model_dir, gpu_memory_utilization=0.4, max_model_len=1024)
            out["vllm_tok_s"] = round(rollout_tok_s(engine, prompts, params, device))
            state = {k: v.to(device) for k, v in model.state_dict().items()}  # the learner's fp32 weights, on the GPU
            _sync(device)
            start = time.perf_counter()
            engine.load_weights(state, version=1)
            _sync(device)
            out["weight_sync_s"] = round(time.perf_counter() - start, 3)
            out["weight_sync_transport"] = engine.last_sync.transport if engine.last_sync else None
            engine.shutdown()  # its engine-core process and GPU memory go before the local engine's turn
            del engine, state
            gc.collect()
            torch.cuda.empty_cache()
        except Exception as exc:  # the figure is absent, with its reason, rather than the run lost
            notes.append(f"vllm: {type(exc).__name__}: {str(exc)[:300]}")
        try:
            from posttrain.config import EngineConfig
            from posttrain.engine.build import build_engine

            local = build_engine(EngineConfig(device=device), model, tok)
            out["local_tok_s"] = round(rollout_tok_s(local, prompts, params, device))
            del local  # its KV cache goes before the learner's turn
        except Exception as exc:
            notes.append(f"local: the local engine on the GPU: {type(exc).__name__}: {str(exc)[:300]}")
        if "vllm_tok_s" in out and "local_tok_s" in out:
            out["vllm_vs_local_tok_s"] = round(out["vllm_tok_s"] / out["local_tok_s"], 2)
        try:
            m = learner_mfu(model, device, rows=2 if tiny else 16, width=32 if tiny else 1024)
            out["learner_tokens_per_s"] = m["learner_tokens_per_s"]
            peak = next((v for k, v in PEAK_BF16.items() if k in (out["gpu"] or "")), None)
            if peak is None:
                notes.append(f"learner_mfu: no bf16 peak known for {out['gpu'] or device!r}")
            else:
                out["learner_mfu"] = round(m["learner_flops_per_s"] / peak, 3)
        except Exception as exc:
            notes.append(f"learner_mfu: {type(exc).__name__}: {str(exc)[:300]}")
        del model
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        if grpo_steps > 0:
            engine = "vllm" if cuda else "local"  # the CPU smoke runs the same loop on the local engine
            cmd = [sys.executable, __file__, "--grpo-child", str(model_dir), "--grpo-steps", str(grpo_steps),
                   "--grpo-engine", engine, "--grpo-device", device]
            try:
                child = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            except subprocess.TimeoutExpired:
                notes.append("grpo: the colocated run took over 240 s (stopped; try --grpo-steps 5)")
            else:
                lines = [x for x in child.stdout.splitlines() if x.startswith("{")]
                if child.returncode == 0 and lines:
                    out.update(json.loads(lines[-1]))
                else:
                    notes.append(f"grpo: the colocated run failed (rc {child.returncode}): {child.stderr[-400:]}")
    return out


def cpu_smoke(notes: list[str], grpo_steps: int = 2) -> dict:
    """`gpu_figures` at a tiny scale on the CPU (2 GRPO steps on the local engine); what it measures is not a GPU
    figure and is reported under `smoke`, never under the issue's keys."""
    from posttrain.config import load_config

    smoke_notes: list[str] = []
    figures = gpu_figures(smoke_notes, vocab=512, corpus_mb=1, grpo_steps=grpo_steps, device="cpu", tiny=True)
    with tempfile.TemporaryDirectory() as d:  # the GPU run's own config is valid
        load_config(None, grpo_overrides(Path(d), Path(d) / "runs", 20, "vllm", "cuda"))
    notes.append(f"CPU smoke: tokenizer, model, local engine, learner and a {grpo_steps}-step GRPO run (local engine) "
                 "ran at a tiny scale; the vLLM part needs vLLM and a GPU")
    return {"smoke": {**figures, "notes": smoke_notes}}


# a note's prefix (before the first ':') -> the keys it leaves unmeasured
AFFECTS = {"vllm": ("vllm_vs_local_tok_s", "weight_sync_s"), "local": ("vllm_vs_local_tok_s",),
           "learner_mfu": ("learner_mfu",), "grpo": ("colocated_grpo_logprob_mismatch",)}


def report(figures: dict, notes: list[str], reason_all: str | None, checks: dict) -> dict:
    """The JSON line: every issue key, measured or listed in `unmeasured` with its reason."""
    unmeasured = {}
    for k in KEYS:
        if figures.get(k) is None:
            why = [n for n in notes if k in AFFECTS.get(n.split(":")[0], ())]
            unmeasured[k] = reason_all or "; ".join(why) or "not produced (see note)"
    gpu = figures.get("gpu")
    if gpu is None:
        unmeasured["gpu"] = reason_all or "unknown"
    return {"gpu": gpu, **{k: figures.get(k) for k in KEYS}, **{k: v for k, v in figures.items() if k not in KEYS},
            "checks": checks, "unmeasured": unmeasured, "note": "; ".join(notes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=65536, help="BPE vocabulary target (the model's vocabulary)")
    ap.add_argument("--corpus-mb", type=int, default=16, help="local text the tokenizer trains on")
    ap.add_argument("--grpo-steps", type=int, default=20)
    ap.add_argument("--checks", type=Path, help="JSON of the test steps' outcomes (scripts/gpu_check.sh)")
    ap.add_argument("--grpo-child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--grpo-engine", default="vllm", help=argparse.SUPPRESS)
    ap.add_argument("--grpo-device", default="cuda", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.grpo_child:
        print(json.dumps(colocated_grpo(args.grpo_child, args.grpo_steps, args.grpo_engine, args.grpo_device)))
        return
    checks = json.loads(args.checks.read_text()) if args.checks and args.checks.exists() else {}
    notes: list[str] = []
    if torch.cuda.is_available():
        figures, reason = gpu_figures(notes, args.vocab, args.corpus_mb, args.grpo_steps), None
    else:
        reason = "no CUDA GPU visible (torch.cuda.is_available() is False): nothing measured on a GPU"
        figures = cpu_smoke(notes, min(args.grpo_steps, 2))
    print(json.dumps(report(figures, notes, reason, checks)))


if __name__ == "__main__":
    main()
