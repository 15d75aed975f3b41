"""Runs under torchrun (one process per rank): `posttrain train`'s loop data-parallel, then on rank 0 the same
updates in one process.

Every rank trains the run `--config` describes with the `Trainer` (each rolls out its share of the groups,
the update is split over the ranks). Each rank records the tasks it rolled out and every batch the learner
was given; rank 0 then replays those batches with the plain `Learner` on the initial weights and writes, as
JSON (`--out`): the largest weight difference from the data-parallel run, the largest difference between
the ranks' final weights, and which tasks each rank rolled out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import posttrain.rl.trainer as trainer_module
    from posttrain.config import load_config
    from posttrain.distributed.data_parallel import from_env
    from posttrain.distributed.learner import DataParallelLearner
    from posttrain.models.io import load_model
    from posttrain.rl.backends import Backends
    from posttrain.rl.learner import Learner
    from posttrain.rl.trainer import Trainer

    cfg = load_config(Path(args.config), [])
    trainer = Trainer(cfg, overwrite=True, backends=Backends(ranks=from_env, learner=DataParallelLearner))
    dp = trainer.dp
    assert dp.world > 1, "launch under torchrun with more than one process"
    initial = {k: v.detach().clone() for k, v in trainer.whole_model.state_dict().items()}
    rolled: list[str] = []
    batches = []
    real_run_sync, real_update = trainer_module.run_sync, trainer.learner.update

    def run_sync(rollouter, tasks, n):
        rolled.extend(t.id for t in tasks)
        return real_run_sync(rollouter, tasks, n)

    def update(batch):
        batches.append(batch)
        return real_update(batch)

    trainer_module.run_sync, trainer.learner.update = run_sync, update
    sampled: list[str] = []
    original_log = trainer.store.log_step

    def log_step(step, metrics, groups, samples, *rest, **kw):
        sampled.extend(task_id for _, task_id, _, _ in groups)
        return original_log(step, metrics, groups, samples, *rest, **kw)

    trainer.store.log_step = log_step
    trainer.run()
    final = {k: v.detach().cpu().clone() for k, v in trainer.learner.policy_state().items()}
    per_rank = dp.gather_to_lead({"tasks": rolled, "final": final})
    if dp.lead:
        assert per_rank is not None
        model, _ = load_model(Path(cfg.model.path))
        model.load_state_dict(initial)
        single = Learner(model, trainer.learner.cfg, trainer.learner.max_tokens, trainer.learner.temperature,
                         importance_sampling=trainer.learner.importance_sampling,
                         total_updates=trainer.learner.total_updates)
        for batch in batches:
            single.update(batch)
        mine = model.state_dict()
        result = {
            "world": dp.world, "strategy": cfg.rl.data_parallel, "steps": trainer.step, "updates": len(batches),
            "max_weight_diff": max(float((final[k] - mine[k]).abs().max()) for k in final),
            "moved": max(float((final[k] - initial[k].cpu()).abs().max()) for k in final),
            "replica_max_diff": max(float((r["final"][k] - final[k]).abs().max()) for r in per_rank for k in final),
            "rank_tasks": [r["tasks"] for r in per_rank],
            "sampled_tasks": sampled,
        }
        Path(args.out).write_text(json.dumps(result))
    trainer.close()


if __name__ == "__main__":
    main()
