"""The wiring layer's choice of optional back ends: `default_backends()`, what the `posttrain` commands pass in.

Covers: one `rl.backends.Backends` whose factories import `distributed/` (extras `ray`, torch.distributed) only
when a run asks for them: Ray sandbox workers (`[sandbox] backend = "ray"`), Ray rollout producers
(`rollout.backend = "ray"`), torchrun's ranks and their data-parallel learner. `rl/` declares what it needs and
never imports `distributed/` (which builds on it); this module, above both, is where they meet. Its factories are
module-level functions, so a `Backends` travels to a spawned producer process.
Does not cover: what each back end does (`distributed/`), when a run needs one (`rl/build.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posttrain.rl.backends import Backends

if TYPE_CHECKING:
    from posttrain.config import RunConfig
    from posttrain.rl.backends import DataParallel
    from posttrain.rl.learner import Learner
    from posttrain.sandbox.sandboxes import Sandboxes


def ray_sandboxes(cfg: RunConfig) -> Sandboxes:
    from posttrain.distributed.ray_sandbox import sandboxes_for

    return sandboxes_for(cfg)


def ray_producers(cfg: RunConfig, index: int, seed: int, board: Any) -> Any:
    from posttrain.distributed.ray_backend import make_runner

    return make_runner(cfg, index, seed, board, default_backends())


def torchrun_ranks(device: str) -> DataParallel | None:
    from posttrain.distributed.data_parallel import from_env

    return from_env(device)


def data_parallel_learner(*args: Any, **kwargs: Any) -> Learner:
    from posttrain.distributed.learner import DataParallelLearner

    return DataParallelLearner(*args, **kwargs)


def default_backends() -> Backends:
    """Every optional back end posttrain ships, each imported on first use."""
    return Backends(ray_sandboxes=ray_sandboxes, producers={"ray": ray_producers}, ranks=torchrun_ranks,
                    learner=data_parallel_learner)
