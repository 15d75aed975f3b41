"""`posttrain train` under torchrun: the ranks of one run, each rolling out its share of the groups.

Covers: `DataParallel` (this process's rank, the world, its local rank) and `from_env` (None outside torchrun
or with one process; otherwise the process group joined: gloo for a CPU run, NCCL for a CUDA run, from the
run's configured device and never from what the machine has, `backend_for`), `device_for` (`cuda` -> this rank's
GPU), the collectives the trainer uses: `shard` / `gather` (each rank rolls out every world-th task; the
groups come back to every rank in the order the tasks were drawn, so every rank's curriculum, batch and
update stay identical without another message), `gather_to_lead`, `all_equal` (the replica check), `barrier`;
and `lead_first`, which runs a step that writes shared files (the built-in base's one-time build) on rank 0
before the other ranks.
Does not cover: the update itself (`learner.DataParallelLearner`), multi-node file systems (every rank
reads the run directory and the base cache rank 0 writes: one machine, or a shared file system), async
producers across ranks (refused by the trainer's build).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Sequence, TypeVar

import torch
import torch.distributed as dist

from posttrain.rl.backends import device_for, lead_first  # noqa: F401 - where callers found them before

T = TypeVar("T")

# the longest any rank waits for the others at one collective: rank 0 alone evaluates, checkpoints and may
# build the base model while the others wait (`POSTTRAIN_DIST_TIMEOUT_MIN` overrides)
DEFAULT_TIMEOUT_MIN = 120.0


@dataclass(frozen=True)
class DataParallel:
    """One rank of a data-parallel run: its place and the collectives the trainer needs."""

    rank: int
    world: int
    local_rank: int

    @property
    def lead(self) -> bool:
        """Rank 0: the one that writes the store, evaluates, checkpoints and reports."""
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of `items`: every world-th one, starting at its rank (balanced for any length)."""
        return list(items[self.rank :: self.world])

    def gather(self, local: list[T], total: int) -> list[T]:
        """Every rank's `shard` results (in shard order) -> all `total` results in the original order, on every
        rank."""
        parts: list[list[T] | None] = [None] * self.world
        dist.all_gather_object(parts, local)
        return interleave([p or [] for p in parts], total)

    def gather_to_lead(self, obj: T) -> list[T] | None:
        """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
        parts: list[T | None] | None = [None] * self.world if self.lead else None
        dist.gather_object(obj, parts, dst=0)
        return parts  # type: ignore[return-value]

    def all_equal(self, value: float) -> tuple[bool, float]:
        """(whether every rank holds the same `value`, the largest difference from rank 0's)."""
        parts: list[float | None] = [None] * self.world
        dist.all_gather_object(parts, float(value))
        spread = max(abs(float(p) - float(parts[0])) for p in parts)  # type: ignore[arg-type]
        return spread == 0.0, spread

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def interleave(parts: Sequence[Sequence[T]], total: int) -> list[T]:
    """The inverse of every rank's `shard`: parts[r] holds items r, r + world, ... -> all `total` items in order."""
    world = len(parts)
    if sum(len(p) for p in parts) != total or any(len(p) != len(range(r, total, world)) for r, p in enumerate(parts)):
        raise ValueError(f"ranks returned {[len(p) for p in parts]} results for {total} items over {world} ranks")
    out: list[T] = [None] * total  # type: ignore[list-item]
    for r, part in enumerate(parts):
        out[r::world] = list(part)
    return out


def launched() -> bool:
    """Whether this process is one of several torchrun ranks (WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def backend_for(device: str) -> str:
    """The process-group backend of a run on `device` (its configured `rl.device`, not what the machine has):
    NCCL for CUDA runs, gloo otherwise, so a CPU run on a GPU machine never hands CPU tensors to NCCL."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def join_group(device: str, backend: str | None = None, timeout: timedelta | None = None) -> None:
    """`init_process_group` for a run on `device` (torchrun's environment): an NCCL rank first selects its GPU
    (LOCAL_RANK); a gloo rank leaves CUDA alone (rank 1 of a CPU run must not `set_device(1)` on a 1-GPU machine)."""
    backend = backend or backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    kwargs = {"timeout": timeout} if timeout is not None else {}
    dist.init_process_group(backend, **kwargs)


def from_env(device: str = "cpu") -> DataParallel | None:
    """This rank, the process group joined (gloo for a CPU run, NCCL for a CUDA one: `backend_for(device)`), or
    None for one process."""
    if not launched():
        return None
    if not dist.is_initialized():
        minutes = float(os.environ.get("POSTTRAIN_DIST_TIMEOUT_MIN", DEFAULT_TIMEOUT_MIN))
        join_group(device, timeout=timedelta(minutes=minutes))
    return DataParallel(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
