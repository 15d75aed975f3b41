"""Scale-out back ends (optional extras, imported lazily): data-parallel training through torch.distributed,
and Ray rollout workers (`ray_backend`).

Covers: `learner.DataParallelLearner` (the RL learner's model wrapped by DDP or FSDP2, its update given
`learner.RankReducer`: each micro-batch's rows split over the ranks and sums all-reduced, so an update equals
one process's over the whole batch), `learner.init_from_env` (gloo on CPU, NCCL on GPUs), `data_parallel` (`posttrain train` under
torchrun: each rank rolls out its share of every step's groups, all ranks get them back in order);
`ray_backend`, the rollout actors of `[rollout] backend = "ray"`; `ray_sandbox`, the sandbox workers of
`[sandbox] backend = "ray"`. The 2-rank checks against one process (the learner alone, and the training loop)
are test harnesses, `tests/_harness/equivalence.py`.
Does not cover: multi-node file systems (rank 0 writes the run directory the others read), tensor or
pipeline parallelism. The core never imports this package: `posttrain/wiring.py` supplies these back
ends to `rl/` (`rl/backends.py: Backends`) when a run's config or launch asks for them, and torch.distributed
is loaded only when it is used.
"""
