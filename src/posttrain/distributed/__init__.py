"""Data-parallel training through torch.distributed: DDP and FSDP2 over the native model, launched with torchrun.

Covers: `learner.DataParallelLearner` (the RL learner with each micro-batch's rows split over the ranks and
gradients averaged by DDP or reduce-scattered by FSDP2, so an update equals one process's over the whole
batch), `learner.init_from_env` (gloo on CPU, NCCL on GPUs), and `equivalence.run_equivalence`, which runs
the 2-process check under torchrun and compares it with one process.
Does not cover: multi-node launch, tensor or pipeline parallelism, rollouts across ranks (every rank is
handed the same whole batch; the trainer does not launch ranks yet). Nothing in the core imports this
package: torch.distributed is loaded only when it is used.
"""
