"""`DataParallelLearner`: the RL learner over DDP or FSDP2 (fully_shard), one process per rank.

Covers: wrapping the native model (DDP: one replica per rank, gradients all-reduced; FSDP2: each decoder
layer and the root sharded over the ranks, parameters gathered for forward and backward, gradients
reduce-scattered) and `RankReducer`, the reducer `Learner.update` is given: each micro-batch split into one
contiguous share of rows per rank, the loss scaled by the world size so the wrappers' gradient average is
the whole batch's gradient, metrics all-reduced over the ranks, FSDP shards gathered whole; the whole
policy's state and gradients gathered; `init_from_env`: the process group from torchrun's environment.
Does not cover: the KL reference model under FSDP (refused), checkpointing sharded optimizer state (a
FSDP run under `posttrain train` refuses `train.checkpoint_every`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor

from posttrain.config import RLConfig
from posttrain.distributed.data_parallel import join_group
from posttrain.errors import UserError
from posttrain.models.llama import CausalLM
from posttrain.rl.learner import Learner

Strategy = Literal["ddp", "fsdp"]


class DistributedSetupError(UserError, RuntimeError):
    """The process group is missing or the configuration cannot be distributed."""


def init_from_env(backend: str | None = None, device: str = "cpu") -> tuple[int, int]:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT) -> (rank, world size).
    The backend follows the run's `device` (gloo for CPU, NCCL for CUDA with each rank on GPU LOCAL_RANK), never
    whether the machine has a GPU."""
    if "RANK" not in os.environ:
        raise DistributedSetupError("no torchrun environment (RANK/WORLD_SIZE unset): launch with torchrun --nproc_per_node N")
    if not dist.is_initialized():
        join_group(device, backend)
    return dist.get_rank(), dist.get_world_size()


@dataclass(frozen=True)
class RankReducer:
    """The `rl.reducer.Reducer` of one rank: its contiguous share of each micro-batch's rows, sums and maxima
    all-reduced over the process group (in float64, on the run's GPU for NCCL), shards gathered whole."""

    rank: int
    world: int
    device: torch.device

    def local_rows(self, rows: Tensor) -> Tensor:
        share = rows.tensor_split(self.world)[self.rank]
        if share.numel() == 0:
            raise DistributedSetupError(f"a micro-batch of {rows.numel()} rows over {self.world} ranks leaves rank "
                                        f"{self.rank} none: use fewer micro_batches or ranks")
        return share

    def sum(self, values: list[float]) -> list[float]:
        return self._all_reduce(values, dist.ReduceOp.SUM)

    def max(self, values: list[float]) -> list[float]:
        return self._all_reduce(values, dist.ReduceOp.MAX)

    def whole(self, t: Tensor) -> Tensor:
        return _whole(t)

    def _all_reduce(self, values: list[float], op: dist.ReduceOp.RedOpType) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(t, op=op)
        return t.tolist()


class DataParallelLearner(Learner):
    """`Learner.update` over the ranks: every rank is given the same whole batch and computes its share (the
    update is the plain learner's, given a `RankReducer`); this class wraps the model and gathers its state."""

    def __init__(
        self,
        model: CausalLM,
        cfg: RLConfig,
        max_tokens: int,
        temperature: float = 1.0,
        importance_sampling: bool = False,
        strategy: Strategy = "ddp",
        total_updates: int | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise DistributedSetupError("DataParallelLearner needs torch.distributed initialised (init_from_env)")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.strategy = strategy
        if strategy == "fsdp":
            if cfg.kl_beta > 0:
                raise DistributedSetupError("rl.kl_beta > 0 under FSDP: the sharded reference model is not built yet")
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            device = torch.device(cfg.device)
            model.to(device)
            # the mesh of the run's device, not torch's default (the machine's accelerator): a CPU run on a GPU
            # machine shards on the CPU over its gloo group
            mesh = init_device_mesh(device.type, (self.world,))
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            # the root (embeddings, final norm, lm_head) stays gathered after forward: the learner projects
            # the hidden states through lm_head chunk by chunk, outside the root's forward
            fully_shard(model, mesh=mesh, reshard_after_forward=False)
        reducer = RankReducer(self.rank, self.world, torch.device(cfg.device))
        super().__init__(model, cfg, max_tokens, temperature, importance_sampling, total_updates, reducer=reducer)
        if strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [self.device.index or 0] if self.device.type == "cuda" else None
            self.forward_module = DistributedDataParallel(model, device_ids=device_ids)

    def full_state(self) -> dict[str, Tensor]:
        """Every parameter, gathered whole (FSDP shards), on the CPU: what an engine loads or a checkpoint saves."""
        return {name: _whole(p.detach()).cpu().clone() for name, p in self.model.named_parameters()}

    def policy_state(self) -> dict[str, Tensor]:
        """DDP: the replica's own state dict (an engine sharing the module adopts it for free); FSDP: every
        parameter gathered whole (a collective: every rank calls it at the same point)."""
        return self.full_state() if self.strategy == "fsdp" else super().policy_state()

    def full_grads(self) -> dict[str, Tensor]:
        """Every parameter's current gradient, gathered whole, on the CPU."""
        return {name: _whole(p.grad).cpu().clone() for name, p in self.model.named_parameters() if p.grad is not None}


def _whole(t: Tensor) -> Tensor:
    """A tensor, or an FSDP2 shard (DTensor) gathered to the whole tensor on every rank."""
    return t.full_tensor() if isinstance(t, DTensor) else t
