"""The wiring layer: which implementations the core is handed, the domains of the registry and the optional back ends.

Covers: `register_domains()`, which hands `tasks/domains.py` a `DomainPlugin` for every built-in domain module
(tasks' own and the agent domains, above tasks), each imported on first use; the package's `__init__` leaves it
in `posttrain/hooks.py` for the registry to run before it is first read, so the CLI, the Python API, spawned
producer processes and Ray actors alike find every domain, and `tasks/` names no module above it.
`default_backends()`: one `rl.backends.Backends` whose factories import `distributed/` (extras `ray`,
torch.distributed) only when a run asks for them: Ray sandbox workers (`[sandbox] backend = "ray"`), Ray rollout
producers (`rollout.backend = "ray"`), torchrun's ranks and their data-parallel learner. `rl/` declares what it
needs and never imports `distributed/` (which builds on it); this module, above both, is where they meet. Its
factories are module-level functions, so a `Backends` travels to a spawned producer process. Importing this
module imports `tasks/domains.py` alone (no torch).
Does not cover: what each back end does (`distributed/`), when a run needs one (`rl/build.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posttrain.tasks.domains import DomainPlugin, add_plugins

if TYPE_CHECKING:
    from posttrain.config import RunConfig
    from posttrain.rl.backends import Backends, DataParallel
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
    from posttrain.rl.backends import Backends

    return Backends(ray_sandboxes=ray_sandboxes, producers={"ray": ray_producers}, ranks=torchrun_ranks,
                    learner=data_parallel_learner)


# Each loader imports one module whose factories register themselves (`@register_domain`).
def _humaneval() -> None:
    import posttrain.tasks.humaneval  # noqa: F401


def _codegen() -> None:
    import posttrain.tasks.codegen  # noqa: F401


def _reasoning_gym() -> None:
    import posttrain.tasks.reasoning_gym  # noqa: F401


def _terminal() -> None:
    import posttrain.tasks.terminal  # noqa: F401


def _cad() -> None:
    import posttrain.tasks.cad  # noqa: F401


def _lookup() -> None:
    import posttrain.agent.lookup  # noqa: F401


def _cad_agent() -> None:
    import posttrain.agent.cad_tools  # noqa: F401


def _reports() -> None:
    import posttrain.agent.reports  # noqa: F401


BUILTIN_DOMAINS = (
    DomainPlugin(("humaneval",), _humaneval),
    DomainPlugin(("code:",), _codegen),
    DomainPlugin(("rg:",), _reasoning_gym),
    DomainPlugin(("terminal", "terminal:"), _terminal),
    DomainPlugin(("agent:",), _lookup),
    DomainPlugin(("cad:",), _cad),
    DomainPlugin(("cad_agent:",), _cad_agent),
    DomainPlugin(("docs:",), _reports),
)
"""Every domain module posttrain ships beyond `tasks/domains.py`'s own, with the names each registers."""


def register_domains() -> None:
    """Hand the registry every built-in domain plugin (idempotent; run through `posttrain/hooks.py`)."""
    add_plugins(BUILTIN_DOMAINS)
