"""How the processes of one update combine: the `Reducer` a `Learner` is given.

Covers: the `Reducer` protocol (the process count the loss is scaled by, this process's share of a micro-batch's
rows, totals and maxima of per-process figures, a sharded tensor gathered whole) and `IdentityReducer`, the one
process's: every row is its own, and every total is its own figure.
Does not cover: the data-parallel reducer (`distributed/learner.py: RankReducer`, which all-reduces over the
process group), wrapping the model for data parallelism (DDP / FSDP2, also there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor


class Reducer(Protocol):
    """What an update needs from the processes it runs over.

    >>> import torch
    >>> r = IdentityReducer()
    >>> r.local_rows(torch.arange(4)).tolist(), r.sum([1.0, 2.0]), r.max([3.0]), r.world
    ([0, 1, 2, 3], [1.0, 2.0], [3.0], 1)
    """

    @property
    def world(self) -> int:
        """Processes sharing each micro-batch: each one's loss is scaled by it, since the data-parallel wrappers
        average gradients over the processes and each process's loss is its part of the whole sum."""
        ...

    def local_rows(self, rows: Tensor) -> Tensor:
        """[r] -> the indices of a micro-batch's rows this process computes."""
        ...

    def sum(self, values: list[float]) -> list[float]:
        """This process's sums -> the sums over every process (elementwise)."""
        ...

    def max(self, values: list[float]) -> list[float]:
        """This process's maxima -> the maxima over every process (elementwise)."""
        ...

    def whole(self, t: Tensor) -> Tensor:
        """A tensor that may be sharded over the processes (an FSDP2 `DTensor`) -> the whole tensor."""
        ...


@dataclass(frozen=True)
class IdentityReducer:
    """One process: it computes every row, and its figures are the totals."""

    world: int = 1

    def local_rows(self, rows: Tensor) -> Tensor:
        return rows

    def sum(self, values: list[float]) -> list[float]:
        return values

    def max(self, values: list[float]) -> list[float]:
        return values

    def whole(self, t: Tensor) -> Tensor:
        return t
