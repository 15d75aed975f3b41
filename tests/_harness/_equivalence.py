"""Runs under torchrun (one process per rank): the same updates data-parallel and, on rank 0, in one process.

Every rank builds the same seeded tiny model and batches; each update is split over the ranks by
`DataParallelLearner`; rank 0 then repeats the updates with the plain `Learner` and writes the largest
gradient and weight differences as JSON (`--out`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def _model(seed: int = 0):
    from posttrain.models import CausalLM, ModelConfig

    cfg = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed))
    return m


def _batch(step: int, rows: int = 8, width: int = 12):
    from posttrain.rl.train_batch import TrainBatch

    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(0, 48, (rows, width), generator=g)
    mask = (torch.rand(rows, width - 1, generator=g) > 0.4).float()
    old = -torch.rand(rows, width - 1, generator=g) * 3 * mask
    adv = torch.randn(rows, generator=g)
    return TrainBatch(ids, mask, old, adv, torch.full((rows,), width))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategy", default="ddp")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from posttrain.config import RLConfig
    from posttrain.distributed.learner import DataParallelLearner, init_from_env
    from posttrain.rl.learner import Learner

    rank, world = init_from_env()
    cfg = RLConfig(lr=1e-2, micro_batches=2, logprob_chunk=16)
    dp = DataParallelLearner(_model(), cfg, max_tokens=11, importance_sampling=True, strategy=args.strategy)
    dp_metrics = [dp.update(_batch(s)) for s in range(args.steps)]
    grads, weights = dp.full_grads(), dp.full_state()
    if rank == 0:
        single_model = _model()
        single = Learner(single_model, cfg, max_tokens=11, importance_sampling=True)
        metrics = [single.update(_batch(s)) for s in range(args.steps)]
        g1 = {n: p.grad for n, p in single_model.named_parameters() if p.grad is not None}
        w1 = {n: p.detach() for n, p in single_model.named_parameters()}
        result = {
            "strategy": args.strategy, "world": world, "steps": args.steps,
            "max_grad_diff": max(float((grads[n] - g1[n]).abs().max()) for n in g1),
            "max_weight_diff": max(float((weights[n] - w1[n]).abs().max()) for n in w1),
            "metrics_diff": max(abs(a[k] - b[k]) for a, b in zip(dp_metrics, metrics)
                                for k in ("pg_loss", "entropy", "grad_norm")),
            "grad_names": len(g1),
        }
        Path(args.out).write_text(json.dumps(result))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
