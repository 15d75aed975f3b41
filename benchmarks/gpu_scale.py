"""The GPU part of benchmarks/scale.py: vLLM vs the local engine, learner MFU, weight sync (a 0.5B-shaped model).

Run by `python benchmarks/scale.py --gpu` (or alone: `python benchmarks/gpu_scale.py`, which prints one JSON
line) on a machine with a CUDA GPU; minutes on one H100/H200-class GPU. The model is random with
Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, vocabulary 151,936, tied),
so nothing is downloaded. A figure that cannot be measured (vLLM absent, an error) is left out and its
reason appended to `notes`, never invented.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

# dense bf16 peak FLOP/s by device-name fragment (vendor datasheets, without sparsity)
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "4090": 165e12}


def qwen05b_config(vocab: int):
    from posttrain.models import ModelConfig

    return ModelConfig(vocab_size=vocab, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, model_type="qwen2", tie_word_embeddings=True,
                       max_position_embeddings=4096, rope_theta=1e6)


def _model_dir(tmp: Path):
    from posttrain.models import CausalLM, char_tokenizer, save_model

    tok = char_tokenizer()
    model = CausalLM(qwen05b_config(151936))
    model.init_weights(torch.Generator().manual_seed(0))
    save_model(model, tok, tmp / "m")
    return tmp / "m", model, tok


def learner_mfu(model, notes: list[str]) -> dict:
    from posttrain.config import RLConfig
    from posttrain.rl.learner import Learner, TrainBatch

    rows, width = 16, 1024
    learner = Learner(model, RLConfig(device="cuda", dtype="bf16", logprob_chunk=2048), max_tokens=width,
                      importance_sampling=True)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, width), generator=g)
    batch = TrainBatch(ids, torch.ones(rows, width - 1), -torch.ones(rows, width - 1) * 10, torch.randn(rows, generator=g),
                       torch.full((rows,), width))
    learner.update(batch)  # warm-up (allocator, kernels)
    torch.cuda.synchronize()
    start = time.perf_counter()
    steps = 3
    for _ in range(steps):
        learner.update(batch)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    n = sum(p.numel() for p in model.parameters())
    c = model.config
    tokens = rows * width
    # forward + backward = 3x forward; importance sampling adds one no-grad forward (1x): 8 N per token
    # counted as model FLOPs is the usual 6 N (the extra pass is overhead, not useful work)
    attn = 6 * 2 * c.num_hidden_layers * width * c.num_attention_heads * c.head_dim * tokens / 2
    flops = 6 * n * tokens + attn
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    out = {"learner_tokens_per_s": round(tokens / seconds), "gpu": name}
    if peak is None:
        notes.append(f"learner_mfu absent: no bf16 peak known for {name!r}")
    else:
        out["learner_mfu"] = round(flops / seconds / peak, 3)
    return out


def rollout_tok_s(engine, prompts, params) -> float:
    engine.generate(prompts[:4], params)  # warm-up
    torch.cuda.synchronize()
    start = time.perf_counter()
    groups = engine.generate(prompts, params)
    torch.cuda.synchronize()
    return sum(len(c.token_ids) for g in groups for c in g) / (time.perf_counter() - start)


def gpu_figures(notes: list[str]) -> dict:
    out: dict = {}
    with tempfile.TemporaryDirectory() as d:
        model_dir, model, tok = _model_dir(Path(d))
        from posttrain.types import SamplingParams

        prompts = [tok.encode(f"{i}+{2 * i}=") for i in range(64)]
        params = SamplingParams(n=8, temperature=1.0, max_tokens=128, seed=0)
        try:
            from posttrain.engine.remote.vllm_engine import VLLMEngine

            engine = VLLMEngine(model_dir, dtype="bfloat16", gpu_memory_utilization=0.4, max_model_len=1024)
            out["vllm_tok_s"] = round(rollout_tok_s(engine, prompts, params))
            state = {k: v.to("cuda", torch.bfloat16) for k, v in model.state_dict().items()}
            torch.cuda.synchronize()
            start = time.perf_counter()
            engine.load_weights(state, version=1)
            torch.cuda.synchronize()
            out["weight_sync_s"] = round(time.perf_counter() - start, 3)
            del engine
        except Exception as exc:  # the figure is absent, with its reason, rather than the run lost
            notes.append(f"vLLM figures absent: {type(exc).__name__}: {str(exc)[:200]}")
        try:
            from posttrain.engine.build import build_engine

            gpu_model = model.to("cuda")
            local = build_engine(None, gpu_model, tok)
            out["local_tok_s"] = round(rollout_tok_s(local, prompts, params))
        except Exception as exc:
            notes.append(f"local engine on the GPU failed: {type(exc).__name__}: {str(exc)[:200]}")
        if "vllm_tok_s" in out and "local_tok_s" in out:
            out["vllm_vs_local_tok_s"] = round(out["vllm_tok_s"] / out["local_tok_s"], 2)
        try:
            out.update(learner_mfu(model, notes))
        except Exception as exc:
            notes.append(f"learner_mfu absent: {type(exc).__name__}: {str(exc)[:200]}")
    return out


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print(json.dumps({"note": "no CUDA GPU visible: nothing measured"}))
        raise SystemExit(0)
    notes: list[str] = []
    figures = gpu_figures(notes)
    print(json.dumps({**figures, "note": "; ".join(notes)}))
