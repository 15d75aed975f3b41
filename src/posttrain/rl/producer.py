"""The one body of a rollout producer, the same in a thread, a spawned process and a Ray actor.

Covers: `ProducerBody`, which builds the producer's engine over its own copy of the weights and its rollouter
(`rl/build.py`), loads the newest published weights on request (`load`, acknowledging the version actually
loaded), runs one rollout request (`run`), follows newer weights turn by turn with `[rollout] on_new_weights =
"update"` (every engine call first adopts weights newer than its own, `rl/follow.py`), and reports its sampler
state and its own sandbox workers' failures; `ProducerParts`, what the body samples with, either built from the
config alone (`own_parts`: a process or an actor of its own) or lent by the learner's process (a thread); and the
three places the newest weights come from (`Weights`): the learner's `WeightBoard` in this process (threads),
`SharedWeights` (shared-memory tensors a spawned process copies out under the board's lock) and `OfferedWeights`
(arrays the learner hands a Ray actor).
Does not cover: the transport to the body (a direct call, `rl/_producer.py`'s pipe, a Ray actor in
`distributed/ray_backend.py`), scheduling, staleness, the buffer (`rl/async_loop.py`).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from posttrain import aio
from posttrain.engine.base import Engine
from posttrain.rl.follow import FollowWeights
from posttrain.types import Group, SamplingParams, Task

if TYPE_CHECKING:
    from posttrain.config import RunConfig
    from posttrain.rl.backends import Backends
    from posttrain.sandbox.sandboxes import Sandboxes


class Weights(Protocol):
    """The newest published weights as a producer sees them."""

    @property
    def version(self) -> int:
        """The newest version it can load (-1: none yet)."""
        ...

    def load_into(self, engine: Engine) -> int:
        """Copy the newest weights into `engine`; the version loaded."""
        ...


def follow(weights: Weights) -> Callable[[Engine], None]:
    """A `FollowWeights` refresh: load `weights` into the engine when they are newer than the engine's own."""

    def refresh(engine: Engine) -> None:
        if weights.version > engine.policy_version:
            weights.load_into(engine)

    return refresh


class SharedWeights:
    """A spawned producer process's view of the board: shared-memory tensors, the board's lock, its version."""

    def __init__(self, tensors: dict[str, Any], lock: Any, value: Any) -> None:
        self.tensors, self.lock, self.value = tensors, lock, value

    @property
    def version(self) -> int:
        return int(self.value.value)

    def load_into(self, engine: Engine) -> int:
        with self.lock:  # the learner copies into the same tensors under this lock
            v = int(self.value.value)
            engine.load_weights(self.tensors, v)
        return v


class OfferedWeights:
    """Weights handed to a Ray actor (numpy arrays from the object store); only the newest offer is kept, and only
    until it is loaded (holding it would pin the object store's copy)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrays: dict[str, Any] | None = None
        self._newest = -1

    @property
    def version(self) -> int:
        return self._newest

    def offer(self, arrays: dict[str, Any], version: int) -> None:
        with self._lock:
            if version > self._newest:
                self._arrays, self._newest = arrays, version

    def load_into(self, engine: Engine) -> int:
        import torch

        with self._lock:
            arrays, version = self._arrays, self._newest
            self._arrays = None
        if arrays is None:  # loaded already (or never offered): the engine holds the newest
            return engine.policy_version
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the object store's arrays are read-only; they are only copied from
            state = {k: torch.from_numpy(a) for k, a in arrays.items()}
        engine.load_weights(state, version)
        return version


@dataclass
class ProducerParts:
    """What a producer samples with: a model of its own, the run's domains, sampling parameters, and where its
    verifiers execute (`owns_sandboxes`: its own, reported and closed by the body; else the learner's)."""

    model: Any
    tokenizer: Any
    domains: list[Any]
    params: SamplingParams
    sandboxes: Sandboxes
    owns_sandboxes: bool


def own_parts(cfg: RunConfig, threads: int, backends: Backends | None = None) -> ProducerParts:
    """The parts of a producer in a process of its own (spawned, or a Ray actor): its torch threads, and a model,
    domains and sandboxes built from the run's config alone (`sandbox.backend = "ray"`: on sandbox actors it owns,
    from the `backends` the learner's wiring passed along)."""
    import torch

    from posttrain.rl.build import build_domains, build_model, build_sandboxes, sampling_params

    torch.set_num_threads(threads)
    model, tokenizer, _, _ = build_model(cfg)
    domains = build_domains(cfg)
    return ProducerParts(model, tokenizer, domains, sampling_params(cfg, domains), build_sandboxes(cfg, backends), True)


class ProducerBody:
    """One producer: an engine over `parts.model` with sampler seed `seed`, and its rollouter."""

    def __init__(self, cfg: RunConfig, parts: ProducerParts, seed: int, weights: Weights) -> None:
        from posttrain.engine.build import build_engine
        from posttrain.rl.build import build_rollouter

        self.parts, self.weights = parts, weights
        self.engine = build_engine(cfg.engine, parts.model, parts.tokenizer, seed)
        sampler: Engine = self.engine
        if cfg.rollout.on_new_weights == "update":  # each engine call first adopts newer published weights
            sampler = FollowWeights(self.engine, self._follow)
        self.rollouter = build_rollouter(cfg, sampler, parts.domains, parts.params, parts.sandboxes, inline=True)
        self._refresh = follow(weights)
        self.version = -1  # the newest version loaded (by `load`, or adopted during a rollout)

    def _follow(self, engine: Engine) -> None:
        before = engine.policy_version
        self._refresh(engine)
        if engine.policy_version != before:
            self.version = engine.policy_version

    def load(self) -> int:
        """Load the newest published weights; the version actually loaded (an exception leaves the old one)."""
        self.version = self.weights.load_into(self.engine)
        return self.version

    def run(self, tasks: list[Task], n: int) -> list[Group]:
        return aio.run_sync(self.rollouter.run(tasks, n))

    def sandbox_failures(self) -> list[str]:
        """Its own sandbox workers that died since the previous call (the learner's are the trainer's to report)."""
        return self.parts.sandboxes.new_failures() if self.parts.owns_sandboxes else []

    def sampler_state(self) -> Any:
        return self.engine.sampler_state()

    def load_sampler_state(self, state: Any) -> None:
        self.engine.load_sampler_state(state)

    def close(self) -> None:
        if self.parts.owns_sandboxes:
            self.parts.sandboxes.close()
