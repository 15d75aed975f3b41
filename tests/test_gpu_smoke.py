"""GPU smoke test of the scale path: the bf16 learner on CUDA with chunked logprobs and checkpointing.

Skips, saying why, where no CUDA GPU is visible (the CPU suite proves the same code paths in fp32 and
bf16 autocast); `benchmarks/scale.py --gpu` measures the GPU figures.
"""

import pytest
import torch

from posttrain.config import RLConfig
from posttrain.models import load_model
from posttrain.models.logprobs import chunked_logprobs
from posttrain.rl.learner import Learner
from posttrain.rl.train_batch import TrainBatch


def test_bf16_learner_on_a_gpu(tiny_model_dir):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False): the GPU path runs where one is")
    model, _ = load_model(tiny_model_dir)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (8, 40), generator=g)
    batch = TrainBatch(ids, torch.ones(8, 39), -torch.ones(8, 39), torch.randn(8, generator=g), torch.full((8,), 40))
    with torch.no_grad():
        ref, _ = chunked_logprobs(model, ids, 1.0, 4096)
    learner = Learner(model, RLConfig(device="cuda", dtype="bf16", logprob_chunk=64, activation_checkpointing=True),
                      max_tokens=39, importance_sampling=True)
    assert next(model.parameters()).is_cuda and next(model.parameters()).dtype == torch.float32
    metrics = learner.update(batch)
    assert metrics["optimizer_steps"] == 1 and metrics["grad_norm"] > 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        got, _ = chunked_logprobs(model, ids.cuda(), 1.0, 64)
    assert float((got.cpu() - ref).abs().max()) < 0.5  # one small update plus bf16 rounding


def test_the_local_engine_on_a_gpu_samples_what_it_samples_on_the_cpu(tiny_model_dir):
    """The device-aware local engine: cache, ids, masks and sampling on the GPU; greedy tokens equal the CPU
    engine's, logprobs to float rounding (cascade groups, a lone sample, ragged chunks, the prefix cache)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False): the GPU path runs where one is")
    import copy

    from posttrain.config import EngineConfig
    from posttrain.engine.build import build_engine
    from posttrain.types import SamplingParams

    model, tok = load_model(tiny_model_dir)
    cpu = build_engine(EngineConfig(prefill_chunk=4, max_prefill_tokens=8), model, tok)
    gpu = build_engine(EngineConfig(device="cuda", prefill_chunk=4, max_prefill_tokens=8), copy.deepcopy(model), tok)
    assert next(gpu.model.parameters()).is_cuda and gpu.fused is None
    prompts = ["12+30=", "7*8=", "123456789+1="]
    for params in (SamplingParams(n=4, max_tokens=8, temperature=0.0), SamplingParams(n=1, max_tokens=8, temperature=0.0)):
        for _ in range(2):  # the second round hits the prefix cache
            want, got = cpu.generate(prompts, params), gpu.generate(prompts, params)
            for gw, gg in zip(want, got):
                for w, g in zip(gw, gg):
                    assert w.token_ids == g.token_ids
                    assert g.logprobs == pytest.approx(w.logprobs, abs=1e-3)
    assert all(t.is_cuda for t in gpu.kv.k + gpu.pkv.k + gpu.prefix.k)
    sampled = gpu.generate(prompts, SamplingParams(n=3, max_tokens=6, temperature=1.0, seed=1))
    assert [len(g) for g in sampled] == [3, 3, 3]


def test_grpo_steps_on_a_gpu_with_the_local_engine(tiny_config):
    """`rl.device = "cuda"` with the local engine: the first rollout used to fail with a device mismatch."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False): the GPU path runs where one is")
    from posttrain.rl.trainer import Trainer

    cfg = tiny_config.model_copy(update={"rl": tiny_config.rl.model_copy(update={"device": "cuda"}),
                                         "engine": tiny_config.engine.model_copy(update={"device": "cuda"})})
    trainer = Trainer(cfg, overwrite=True)
    results = [trainer.train_step() for _ in range(2)]
    trainer.close()
    assert all(r.metrics["groups_sampled"] > 0 for r in results)
    assert next(trainer.model.parameters()).is_cuda
