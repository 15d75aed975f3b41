"""Rollout producers as Ray actors (`[rollout] mode = "async"`, `backend = "ray"`; extra `ray`).

Covers: `RolloutWorker`, an actor around the one producer body
(`rl/producer.py`: model copy, engine, domains and rollouter built from the
run's config alone, the same body a thread or a process runs) that
answers `load` (adopt the weights of one version and acknowledge it),
`run` (one rollout request), `offer` (with `on_new_weights = "update"`: newer
weights handed over while a rollout runs, adopted before its next engine
call, so each turn keeps its own version; the actor runs two calls at once for
it), and its sampler state; `RayRunner`, the
learner-side handle one producer thread drives (the same `Runner` contract
as a thread or a process, so the buffer, the staleness gate, backpressure,
re-queueing on failure and the metrics are the asynchronous loop's own);
`publish_ref`, the weights put into the object store once per version
(`ray.put` of numpy arrays, read zero-copy by every worker on the node);
`connect`, `ray.init(address=...)` to join a cluster or a local one when
no address is given. A worker that dies raises `RunnerDied`: its request is
re-queued and the actor rebuilt, the failure logged and stored by the trainer.
Does not cover: sandbox/verifier actors (`distributed/ray_sandbox.py`), placement groups, GPUs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from posttrain.config import RunConfig
from posttrain.extras import MissingExtraError, require
from posttrain.rl.async_loop import Runner, RunnerDied, WeightBoard
from posttrain.rl.backends import Backends
from posttrain.rl.buffer import RolloutRequest
from posttrain.rl.producer import OfferedWeights, ProducerBody, own_parts
from posttrain.types import Group


class RayMissingError(MissingExtraError):
    """`rollout.backend = "ray"` without Ray installed."""


def _ray() -> Any:
    return require("ray", "ray", "rollout.backend = 'ray'", RayMissingError)


def connect(address: str | None) -> None:
    """Join the cluster at `address`, or start a local one; a session already connected is reused."""
    ray = _ray()
    if not ray.is_initialized():  # "local": a new cluster of our own, not whichever one this machine runs already
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False)


class _Published:
    """The object-store copy of the board's weights, put once per version and shared by every runner."""

    lock = threading.Lock()
    ref: Any = None
    version: int = -1
    board_id: int = -1
    put_s: list[float] = []


def publish_ref(board: WeightBoard) -> tuple[Any, int]:
    """(object ref, version) of the board's newest weights, `ray.put` at most once per version."""
    ray = _ray()
    with _Published.lock:
        if _Published.board_id != id(board) or _Published.version != board.version:
            t0 = time.perf_counter()
            with board.lock:
                version = board.version
                arrays = {k: v.detach().cpu().numpy() for k, v in board.tensors.items()}
                _Published.ref = ray.put(arrays)
            _Published.version, _Published.board_id = version, id(board)
            _Published.put_s.append(time.perf_counter() - t0)
        return _Published.ref, _Published.version


class RolloutWorker:
    """The actor's body (wrapped by `ray.remote` in `RayRunner`): the one producer body (`rl/producer.py`), built
    from `cfg`, its weights the ones the learner offers (`OfferedWeights`)."""

    def __init__(self, cfg: RunConfig, index: int, seed: int, threads: int, backends: Backends | None = None) -> None:
        self.weights = OfferedWeights()
        self.body = ProducerBody(cfg, own_parts(cfg, threads, backends), seed, self.weights)
        self.index = index

    @property
    def engine(self) -> Any:
        return self.body.engine

    @property
    def version(self) -> int:
        return self.body.version

    def offer(self, arrays: dict[str, Any], version: int) -> None:
        """Newer weights, published while a rollout runs (`on_new_weights = "update"` adopts them at its next
        engine call)."""
        self.weights.offer(arrays, version)

    def ready(self) -> int:
        return self.index

    def load(self, arrays: dict[str, Any], version: int) -> int:
        """Adopt `arrays` (or a newer offer) as its version; the version now held (an exception leaves the old one)."""
        self.weights.offer(arrays, version)
        return self.body.load()

    def run(self, tasks: list[Any], n: int) -> list[Group]:
        return self.body.run(tasks, n)

    def sandbox_failures(self) -> list[str]:
        return self.body.sandbox_failures()

    def sampler_state(self) -> Any:
        return self.body.sampler_state()

    def load_sampler_state(self, state: Any) -> None:
        self.body.load_sampler_state(state)


class RayRunner:
    """One rollout actor, driven by one producer thread of the asynchronous loop."""

    def __init__(self, cfg: RunConfig, index: int, seed: int, board: WeightBoard, backends: Backends | None = None) -> None:
        ray = _ray()
        connect(cfg.ray.address)
        self.follow = cfg.rollout.on_new_weights == "update"
        # update: a second call (`offer`) must reach the actor while `run` executes
        actor_cls = ray.remote(num_cpus=cfg.rollout.ray_worker_cpus, max_restarts=0,
                               max_concurrency=2 if self.follow else 1)(RolloutWorker)
        self.actor = actor_cls.remote(cfg, index, seed, cfg.rollout.producer_threads, backends)
        self.board = board
        self.version = -1
        self.offers = 0  # newer versions handed to the actor during its rollouts
        self._get(self.actor.ready.remote())

    def _get(self, ref: Any) -> Any:
        ray = _ray()
        try:
            return ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError) as exc:
            raise RunnerDied(f"rollout actor died: {type(exc).__name__}") from exc
        except ray.exceptions.RayTaskError as exc:  # the worker's own exception, e.g. a weights mismatch
            raise RuntimeError(str(exc.cause) if exc.cause is not None else str(exc)) from None

    def load(self, board: WeightBoard) -> int:
        ref, version = publish_ref(board)
        self.version = int(self._get(self.actor.load.remote(ref, version)))  # acknowledged before sampling
        return self.version

    def run(self, request: RolloutRequest) -> list[Group]:
        offered = self.version
        if self.follow and self.board.version > offered:  # published since the load: in hand before the first turn
            weights, offered = publish_ref(self.board)
            self._get(self.actor.offer.remote(weights, offered))
            self.offers += 1
        ref = self.actor.run.remote(request.tasks, request.n)
        if self.follow:  # hand newer weights over while the rollout runs
            ray = _ray()
            while not ray.wait([ref], timeout=0.1)[0]:
                if self.board.version > offered:
                    weights, offered = publish_ref(self.board)
                    self.actor.offer.remote(weights, offered)
                    self.offers += 1
        groups: list[Group] = self._get(ref)
        return groups

    def sandbox_failures(self) -> list[str]:
        failures: list[str] = self._get(self.actor.sandbox_failures.remote())
        return failures

    def sampler_state(self) -> Any:
        return self._get(self.actor.sampler_state.remote())

    def load_sampler_state(self, state: Any) -> None:
        self._get(self.actor.load_sampler_state.remote(state))

    def close(self) -> None:
        ray = _ray()
        try:
            ray.kill(self.actor)
        except Exception:  # noqa: BLE001 - already gone
            pass


def make_runner(cfg: RunConfig, index: int, seed: int, board: WeightBoard, backends: Backends | None = None) -> Runner:
    """A Ray rollout actor; `backends` (the wiring's) travel to it, for its own sandbox workers."""
    return RayRunner(cfg, index, seed, board, backends)
