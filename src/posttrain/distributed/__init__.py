"""Scale-out back ends (optional extras, imported lazily): data-parallel training through torch.distributed,
and Ray rollout workers (`ray_backend`).

Covers: `learner.DataParallelLearner` (the RL learner with each micro-batch's rows split over the ranks and
gradients averaged by DDP or reduce-scattered by FSDP2, so an update equals one process's over the whole
batch), `learner.init_from_env` (gloo on CPU, NCCL on GPUs), and `equivalence.run_equivalence`, which runs
the 2-process check under torchrun and compares it with one process; `ray_backend`, the rollout actors of
`[rollout] backend = "ray"`.
Does not cover: multi-node torch launch, tensor or pipeline parallelism, rollouts across torch ranks (every
rank is handed the same whole batch; the trainer does not launch ranks yet). The core never imports this
package: `rl/async_loop.py` loads the Ray back end by module name when a run's config asks for it, and
torch.distributed is loaded only when it is used.
"""
