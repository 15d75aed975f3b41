"""GPU smoke test of the scale path: the bf16 learner on CUDA with chunked logprobs and checkpointing.

Skips, saying why, where no CUDA GPU is visible (the CPU suite proves the same code paths in fp32 and
bf16 autocast); `benchmarks/scale.py --gpu` measures the GPU figures.
"""

import pytest
import torch

from posttrain.config import RLConfig
from posttrain.models import load_model
from posttrain.models.logprobs import chunked_logprobs
from posttrain.rl.learner import Learner, TrainBatch


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
