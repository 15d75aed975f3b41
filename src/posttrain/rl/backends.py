"""The optional back ends a run may name, declared where `rl/` needs them and supplied by the wiring layer.

Covers: `DataParallel`, the protocol of one rank of a data-parallel run (its place; `shard` / `gather` of a step's
rollouts, `gather_to_lead`, `all_equal`, `barrier`, `close`) with `OneProcess`, its one-process implementation;
`lead_first` and `device_for` over it; `Backends`, the factories of the optional extras (Ray sandbox workers, Ray
rollout producers, torchrun's ranks and their learner), and `Backends.need`, the one-line error when a run names a
back end its entry point did not supply. `rl/` never imports `distributed/` (which builds on it) and loads nothing
by name: `posttrain/wiring.py: default_backends` fills a `Backends`, and `cli/` passes it in.
Does not cover: the implementations (`distributed/`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from posttrain.errors import UserError

if TYPE_CHECKING:
    from posttrain.config import RunConfig
    from posttrain.rl.learner import Learner
    from posttrain.sandbox.sandboxes import Sandboxes

T = TypeVar("T")


class DataParallel(Protocol):
    """One rank of a run: where it stands and the collectives the trainer needs.

    >>> dp = OneProcess()
    >>> dp.gather(dp.shard(["a", "b", "c"]), 3), dp.lead
    (['a', 'b', 'c'], True)
    """

    @property
    def rank(self) -> int: ...

    @property
    def world(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def lead(self) -> bool:
        """Rank 0: the one that writes the store, evaluates, checkpoints and reports."""
        ...

    def shard(self, items: Sequence[T]) -> list[T]: ...

    def gather(self, local: list[T], total: int) -> list[T]: ...

    def gather_to_lead(self, obj: T) -> list[T] | None: ...

    def all_equal(self, value: float) -> tuple[bool, float]: ...

    def barrier(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class OneProcess:
    """The whole run in this process: every task is this rank's, and every collective a no-op."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def lead(self) -> bool:
        return True

    def shard(self, items: Sequence[T]) -> list[T]:
        return list(items)

    def gather(self, local: list[T], total: int) -> list[T]:
        return local

    def gather_to_lead(self, obj: T) -> list[T] | None:
        return [obj]

    def all_equal(self, value: float) -> tuple[bool, float]:
        return True, 0.0

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass


def lead_first(dp: DataParallel, fn: Callable[[], T]) -> T:
    """`fn()` on rank 0, then on the other ranks (which find what rank 0 wrote): a step that writes shared files."""
    if dp.world == 1:
        return fn()
    if dp.lead:
        out = fn()
        dp.barrier()
        return out
    dp.barrier()
    return fn()


def device_for(device: str, local_rank: int) -> str:
    """A configured device on this rank: a bare `cuda` becomes this rank's GPU; anything else is kept."""
    return f"cuda:{local_rank}" if device == "cuda" else device


@dataclass(frozen=True)
class Backends:
    """Factories of the optional back ends (None: this entry point supplies none)."""

    ray_sandboxes: Callable[[RunConfig], Sandboxes] | None = None
    """`sandbox.backend = "ray"`: the Ray sandbox workers of `[sandbox]`, as a `Sandboxes`."""
    producers: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """`rollout.backend` (other than "local") -> its `async_loop.RunnerFactory` (the Ray rollout actors)."""
    ranks: Callable[[str], DataParallel | None] | None = None
    """Under torchrun: this rank, the process group joined for a run on the given device; None in one process."""
    learner: Callable[..., Learner] | None = None
    """Under torchrun: `DataParallelLearner(model, rl, max_tokens, temperature, importance_sampling=, strategy=,
    total_updates=)`."""

    def need(self, name: str, what: str) -> Any:
        """The back end `name`, or a one-line `UserError` saying that `what` needs one this entry point lacks."""
        found = getattr(self, name)
        if not found:
            raise UserError(f"{what} needs a back end this entry point was not given: pass "
                            "backends=posttrain.wiring.default_backends() (the `posttrain` commands do)")
        return found
