"""The asynchronous (bounded-staleness) loop: producers sample the next steps' groups while the learner updates.

Covers: `WeightBoard` (the newest published weights, once per version: a
snapshot in this process, or shared-memory tensors that producer processes
copy out under a lock), `Producer` (one thread per producer that takes
requests from the `GroupBuffer`, waits for the staleness gate, makes its
runner load the newest weights and acknowledge the version, samples, and
hands the groups back; a runner that dies or fails to load has its request
re-queued and is rebuilt; with `long_lane_producers` it starts what the
long-task lane picks, `scheduler/lanes.py: pick_next`), the two local runners
around the one producer body, `rl/producer.py` (`ThreadRunner`: called
directly, over a private model copy in this process; `ProcessRunner`:
`rl/_producer.py` in a spawned process with its own torch threads), and
`AsyncLoop`, which the trainer calls instead of its synchronous `collect`:
the pipeline's fill-and-refill rule (`scheduler/pipeline.py`) over requests
(`StepRollouts`: a round split into pieces, the long tasks' piece in the
lane; surplus pieces cancelled and counted, a running long one carried to
the next step), with each step's first requests submitted up to
`max_staleness` steps ahead so that they sample during the learner's
updates, and the per-step metrics (staleness max/mean/histogram, buffer
occupancy, learner and producer idle fractions, dropped, re-queued and
cancelled groups, producer failures, rollout durations).
Semantics (docs/async.md): a group's version is the oldest version that
sampled any of its tokens; at learner step s the learner holds version s-1
and consumes only groups with (s-1) - version <= max_staleness. A request
for step t may start only with weights of version >= t-1-max_staleness, so
look-ahead never produces a group that is stale on arrival. max_staleness 0
submits nothing ahead: exactly the synchronous loop's order of sampling,
with the producer's bitwise-equal weight copy (the golden test).
Back ends beyond this machine are `RunnerFactory`s the wiring layer passes in (`Backends.producers`; the Ray one
lives in `distributed/ray_backend.py`, never imported here).
Multi-turn episodes (an agent domain) run through the same producers: each
turn's completion carries its version (`group_version` takes the oldest),
and a group's episodes travel with it (`Group.episodes`) to the trainer.
Does not cover: running episodes (the rollouter's own concern, `posttrain.agent`).
"""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from posttrain.config import RunConfig
from posttrain.engine.base import Engine
from posttrain.errors import UserError
from posttrain.rl.advantages import has_signal
from posttrain.rl.backends import Backends
from posttrain.rl.buffer import BufferClosed, FinishedRollout, GroupBuffer, Pick, RequestState, RolloutRequest
from posttrain.rl.producer import ProducerBody, ProducerParts
from posttrain.sandbox.sandboxes import Sandboxes
from posttrain.scheduler.curriculum import Curriculum
from posttrain.scheduler.lanes import pick_next
from posttrain.scheduler.pipeline import Filled, Piece, fill_batch, fill_draw, fill_rule
from posttrain.scheduler.task_scheduler import TaskScheduler
from posttrain.types import Group, Task

log = logging.getLogger(__name__)


class ProducerError(UserError, RuntimeError):
    """A rollout producer failed repeatedly (it could not build, load weights or sample)."""


MAX_FAILURES = 3  # consecutive failures of one producer before the run stops with its error


class WeightBoard:
    """The newest published policy weights and their version.

    `shared`: the tensors live in shared memory (producer processes map them
    at spawn; `publish` copies into them once per version, a reader copies
    out under the same lock). Otherwise a snapshot in this process.
    """

    def __init__(self, state: Mapping[str, torch.Tensor], version: int, shared: bool) -> None:
        self.shared = shared
        ctx = multiprocessing.get_context("spawn")
        self.lock: Any = ctx.Lock() if shared else threading.Lock()
        self.value: Any = ctx.Value("q", version) if shared else None
        self.tensors = {k: v.detach().clone() for k, v in state.items()}
        if shared:
            for t in self.tensors.values():
                t.share_memory_()
        self._published_version = version
        self._cond = threading.Condition()
        self.publish_s: list[float] = []

    @property
    def version(self) -> int:
        return self._published_version

    def publish(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        t0 = time.perf_counter()
        with self.lock, torch.no_grad():
            for k, v in state.items():
                self.tensors[k].copy_(v)
            if self.value is not None:
                self.value.value = version
        with self._cond:
            self._published_version = version
            self._cond.notify_all()
        self.publish_s.append(time.perf_counter() - t0)

    def wait_for(self, version: int, stop: threading.Event) -> bool:
        """Block until a version >= `version` is published (False when `stop` is set first)."""
        with self._cond:
            while self._published_version < version:
                if stop.is_set():
                    return False
                self._cond.wait(0.2)
            return True

    def load_into(self, engine: Engine) -> int:
        """Copy the newest weights into `engine` (in this process); the version loaded."""
        with self.lock:
            v = self._published_version
            engine.load_weights(self.tensors, v)
        return v


class RunnerDied(RuntimeError):
    """The runner's process is gone (its in-flight request is re-queued)."""


class ThreadRunner:
    """A producer in this process: the producer body (`rl/producer.py`) over a private copy of the model, called
    directly; its weights are the board's."""

    def __init__(self, body: ProducerBody) -> None:
        self.body = body
        self.version = -1

    @property
    def engine(self) -> Engine:
        return self.body.engine

    def load(self, board: WeightBoard) -> int:
        self.version = self.body.load()
        return self.version

    def run(self, request: RolloutRequest) -> list[Group]:
        return self.body.run(request.tasks, request.n)

    def sandbox_failures(self) -> list[str]:
        return self.body.sandbox_failures()  # this process's sandbox workers are the learner's: none of its own

    def sampler_state(self) -> Any:
        return self.body.sampler_state()

    def load_sampler_state(self, state: Any) -> None:
        self.body.load_sampler_state(state)

    def close(self) -> None:
        self.body.close()


class ProcessRunner:
    """A producer process (`rl/_producer.py`) and the pipe to it; calls are serialised by a lock."""

    def __init__(self, cfg: RunConfig, index: int, seed: int, threads: int, board: WeightBoard,
                 backends: Backends | None = None) -> None:
        from posttrain.rl import _producer

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_producer.main, args=(cfg, index, seed, threads, board.tensors, board.lock, board.value, child,
                                         backends or Backends()),
            daemon=True, name=f"posttrain-producer-{index}")
        self.process.start()
        child.close()
        self._lock = threading.Lock()
        self.version = -1
        kind, payload = self._recv()
        if kind != "ready":
            self.close()
            raise ProducerError(str(payload))

    def _recv(self) -> tuple[str, Any]:
        try:
            kind, payload = self.conn.recv()
        except (EOFError, OSError, ConnectionError) as exc:
            raise RunnerDied(f"producer process {self.process.pid} died (exit code {self.process.exitcode})") from exc
        return kind, payload

    def _call(self, *msg: Any) -> Any:
        with self._lock:
            try:
                self.conn.send(msg)
            except (OSError, BrokenPipeError, ConnectionError) as exc:
                raise RunnerDied(f"producer process {self.process.pid} died (exit code {self.process.exitcode})") from exc
            kind, payload = self._recv()
        if kind == "error":
            raise RuntimeError(payload)
        return payload

    def load(self, board: WeightBoard) -> int:
        self.version = int(self._call("load"))
        return self.version

    def run(self, request: RolloutRequest) -> list[Group]:
        groups: list[Group] = self._call("run", request.tasks, request.n)
        return groups

    def sandbox_failures(self) -> list[str]:
        failures: list[str] = self._call("sandbox_failures")
        return failures

    def sampler_state(self) -> Any:
        return self._call("rng_get")

    def load_sampler_state(self, state: Any) -> None:
        self._call("rng_set", state)

    def close(self) -> None:
        try:
            with self._lock:
                self.conn.send(("stop",))
        except (OSError, BrokenPipeError, ConnectionError):
            pass
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()


@runtime_checkable
class Runner(Protocol):
    """What a producer thread drives: this process, a spawned process, or a Ray actor."""

    version: int  # the version it acknowledged loading (-1 before the first load)

    def load(self, board: WeightBoard) -> int: ...

    def run(self, request: RolloutRequest) -> list[Group]: ...

    def sandbox_failures(self) -> list[str]:
        """One line per sandbox worker of the runner's own process that died since the previous call
        (`sandbox.backend = "ray"`; always empty otherwise)."""
        ...

    def sampler_state(self) -> Any: ...

    def load_sampler_state(self, state: Any) -> None: ...

    def close(self) -> None: ...


RunnerFactory = Callable[[RunConfig, int, int, WeightBoard], Runner]  # (cfg, producer index, seed, board)


def backend_factory(name: str, backends: Backends) -> RunnerFactory:
    """`rollout.backend`'s runner factory, among those the wiring layer supplied (`Backends.producers`)."""
    if name not in backends.producers:
        known = ", ".join(["local", *backends.producers])
        raise UserError(f"rollout.backend = {name!r}: no such producer back end here (known: {known}; the `posttrain` "
                        "commands supply ray: pass backends=posttrain.wiring.default_backends())")
    factory: RunnerFactory = backends.producers[name]
    return factory


@dataclass
class ProducerFailure:
    producer: int
    request: int
    message: str
    time: float = field(default_factory=time.time)


@dataclass
class SandboxFailure:
    """A sandbox worker owned by a producer's process that died (rebuilt there; its executions re-submitted)."""

    producer: int
    message: str
    time: float = field(default_factory=time.time)


def learner_thread_budget(producer_threads: int, cores: int | None = None) -> int:
    """Cap this process's torch threads so the learner and the producer processes on this machine need no more
    cores than it has; returns the learner's threads. torch's OpenMP threads spin between parallel regions, and
    when the learner's 2 threads shared 2 cores with a producer process, they took the cores the producer
    needed: the code domain's 40 asynchronous steps ran in 36 s with 1 producer, 108 s with a 2-thread
    producer, and 28 s with the learner at 1 thread (benchmarks/RESULTS.md). Never raises the thread count."""
    cores = cores or os.cpu_count() or 1
    have = torch.get_num_threads()
    fit = max(1, cores - producer_threads)
    if have > fit:
        log.info("async rollouts: the learner uses %d torch thread(s) of %d cores (%d go to producer processes)",
                 fit, cores, producer_threads)
        torch.set_num_threads(fit)
        return fit
    return have


class Producer:
    """One producer thread: request -> staleness gate -> newest weights (acknowledged) -> rollout -> buffer."""

    def __init__(self, index: int, make_runner: Any, buffer: GroupBuffer, board: WeightBoard, requeue_on_new: bool,
                 pick: Pick | None = None) -> None:
        self.index, self.make_runner, self.buffer, self.board = index, make_runner, buffer, board
        self.requeue_on_new, self.pick = requeue_on_new, pick  # pick: the long-task lane's rule (None: in order)
        self.runner: Runner = make_runner()
        self.stop = threading.Event()
        self.idle_s = 0.0
        self.failures: list[ProducerFailure] = []
        self.sandbox_failures: list[SandboxFailure] = []
        self.error: str | None = None
        self._consecutive = 0
        self.thread = threading.Thread(target=self._loop, name=f"posttrain-producer-{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            request = self.buffer.next_request(timeout=0.2, pick=self.pick)
            if request is None:
                self.idle_s += time.perf_counter() - t0
                if self.buffer.closed:
                    return
                continue
            gate = self.board.wait_for(request.min_version, self.stop)
            self.idle_s += time.perf_counter() - t0
            if not gate:
                return
            try:
                if self.runner.version < self.board.version:
                    self.runner.load(self.board)  # acknowledged: the version actually loaded
                if self.runner.version < request.min_version:
                    raise RuntimeError(f"loaded version {self.runner.version} < required {request.min_version}")
                start = time.perf_counter()
                groups = self.runner.run(request)
                duration = time.perf_counter() - start
            except Exception as exc:  # noqa: BLE001 - a failing producer is data: re-queue, rebuild, count
                self._fail(request, exc)
                continue
            self._consecutive = 0
            if self.requeue_on_new and self.board.version > self.runner.version:
                self.buffer.requeue(request)  # on_new_weights = requeue: sampled again under the new weights
                continue
            self.buffer.finish(FinishedRollout(request, groups, self.runner.version, duration, self.index))
            self._collect_sandbox_failures()

    def _collect_sandbox_failures(self) -> None:
        """The runner's own sandbox workers that died during this rollout, for the trainer's log and store."""
        try:
            lines = self.runner.sandbox_failures()
        except Exception as exc:  # noqa: BLE001 - the groups are delivered; a dead runner shows on its next request
            lines = [f"could not read the producer's sandbox failures: {type(exc).__name__}: {exc}"]
        self.sandbox_failures.extend(SandboxFailure(self.index, line) for line in lines)

    def _fail(self, request: RolloutRequest, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}"
        self.failures.append(ProducerFailure(self.index, request.id, message))
        self.buffer.requeue(request)
        self._consecutive += 1
        if self._consecutive >= MAX_FAILURES:
            self.error = f"producer {self.index} failed {self._consecutive} times in a row; last: {message}"
            self.buffer.close()
            return
        try:  # a dead process, or one whose weights may be half loaded: a fresh runner
            self.runner.close()
        except Exception:  # noqa: BLE001 - it is being replaced
            traceback.print_exc()
        try:
            self.runner = self.make_runner()
        except Exception as build_exc:  # noqa: BLE001
            self.error = f"producer {self.index} could not be rebuilt: {build_exc}"
            self.buffer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.runner.close()


Collected = Filled  # what `collect` returns: the pipeline's filled batch


def lane_pick(long_slots: int) -> Pick:
    """The long-task lane (`scheduler/lanes.py: pick_next`) over the buffer's queued and running requests."""

    def pick(queued: list[RolloutRequest], running: list[RolloutRequest]) -> int | None:
        return pick_next([r.long for r in queued], sum(r.long for r in running), long_slots)

    return pick


@dataclass
class StepRollouts:
    """The pipeline's `Rollouts` for one learner step: each piece a request to the producers, all of a round's
    pieces submitted at once, taken in order (staleness-checked), withdrawn when surplus (`AsyncLoop.withdraw`)."""

    loop: AsyncLoop
    step: int
    n: int
    curriculum: Curriculum

    def split(self, tasks: list[Task]) -> list[list[Task]]:
        return self.loop.split(tasks, self.curriculum)

    def start(self, tasks: list[Task]) -> Piece:
        long = self.loop.is_long(tasks, self.curriculum)
        request = self.loop.buffer.submit(tasks, self.n, self.step, self.step - 1, long=long)
        assert request is not None  # critical-path requests are always admitted
        return Piece(tasks, request)

    def take(self, piece: Piece) -> list[Group]:
        return self.loop._take(piece.handle, self.step - 1)

    def cancel(self, piece: Piece) -> int:
        return self.loop.withdraw(piece.handle)


class AsyncLoop:
    """Producers, the buffer and the weight board of one asynchronous run (`[rollout] mode = "async"`)."""

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, make_thread_runner: Any, version: int,
                 total_steps: int, backends: Backends | None = None) -> None:
        r = cfg.rollout
        self.cfg, self.k, self.total_steps = cfg, r.max_staleness, total_steps
        self.buffer = GroupBuffer(r.buffer_groups)
        self.board = WeightBoard(model.state_dict(), version, shared=r.backend == "local" and r.producer_kind == "process")
        self.ahead: dict[int, list[Piece]] = {}  # learner step -> its look-ahead pieces, submitted
        self.carried: list[Piece] = []  # long-lane requests running when their step's batch filled: the next step's
        self.long_slots = r.long_lane_producers
        self.cancelled_groups = 0  # surplus work withdrawn (queued: never sampled; running: its result discarded)
        self._cancelled_mark = 0
        self.producers: list[Producer] = []
        pick = lane_pick(self.long_slots) if self.long_slots else None
        remote = backend_factory(r.backend, backends or Backends()) if r.backend != "local" else None
        for i in range(r.producers):
            seed = cfg.seed + i  # producer 0 samples the synchronous engine's stream (the golden test)
            if remote is not None:
                def make(i: int = i, seed: int = seed) -> Runner:
                    assert remote is not None
                    return remote(cfg, i, seed, self.board)
            elif r.producer_kind == "process":
                def make(i: int = i, seed: int = seed) -> Runner:
                    return ProcessRunner(cfg, i, seed, r.producer_threads, self.board, backends or Backends())
            else:
                def make(i: int = i, seed: int = seed) -> Runner:
                    runner: Runner = make_thread_runner(seed, self.board)
                    return runner
            self.producers.append(Producer(i, make, self.buffer, self.board, r.on_new_weights == "requeue", pick))
        self._threads_before = torch.get_num_threads()  # restored by close()
        if r.backend == "local" and r.producer_kind == "process":
            learner_thread_budget(r.producers * r.producer_threads)
        for p in self.producers:
            p.start()
        self._mark = time.perf_counter()
        self._idle_mark = 0.0
        self._waited = 0.0
        self._dropped = 0
        self._requeued_mark = 0
        self._failures_mark = 0
        self._durations_mark = 0
        self._staleness: list[int] = []
        self.resume_dropped = 0
        self._reported: dict[str, list[int]] = {}  # per kind of record: how many of each producer's were returned

    @classmethod
    def for_components(cls, cfg: RunConfig, model: Any, tokenizer: Any, domains: list[Any], params: Any, version: int,
                       total_steps: int, sandboxes: Sandboxes, backends: Backends | None = None) -> AsyncLoop:
        """Thread producers share this process's `sandboxes`; processes and Ray actors build their own from `cfg`
        (with `backends`)."""
        def thread_runner(seed: int, board: WeightBoard) -> ThreadRunner:
            parts = ProducerParts(copy.deepcopy(model), tokenizer, domains, params, sandboxes, owns_sandboxes=False)
            return ThreadRunner(ProducerBody(cfg, parts, seed, board))

        return cls(cfg, model, thread_runner, version, total_steps, backends)

    # the learner's side
    def _take(self, request: RolloutRequest, version: int) -> list[Group]:
        try:
            taken = self.buffer.take(request, version, self.k)
        except BufferClosed:
            raise ProducerError(self.error() or "the rollout producers stopped") from None
        self._waited += taken.waited_s
        self._dropped += taken.dropped
        assert all(s <= self.k for s in taken.staleness), (taken.staleness, self.k)  # the bound, every step
        self._staleness.extend(taken.staleness)
        return taken.groups

    def error(self) -> str | None:
        return next((p.error for p in self.producers if p.error), None)

    def collect(self, step: int, curriculum: Curriculum, n: int, informative_rate: float) -> Collected:
        """Step `step`'s groups: the pipeline's fill-and-refill rule (`scheduler/pipeline.py`) over requests to the
        producers, then the look-ahead requests for the next `max_staleness` steps (they sample while the learner
        updates). Round 0 takes what is in flight for it: carried long-lane work that has finished (no wait), the
        step's look-ahead pieces, then carried work still running (last: the learner waits for it only when the
        batch needs it)."""
        done = [p for p in self.carried if self.buffer.state_of(p.handle.id) is RequestState.DONE]
        first = done + self.ahead.pop(step, []) + [p for p in self.carried if p not in done]
        self.carried = []
        got = fill_batch(fill_rule(self.cfg), curriculum, StepRollouts(self, step, n, curriculum), informative_rate,
                         step, has_signal, first=first)
        self.cancelled_groups += got.cancelled
        self._look_ahead(step, curriculum, n, got.informative_rate)
        return got

    def split(self, tasks: list[Task], curriculum: Curriculum) -> list[list[Task]]:
        """A round's tasks as producer requests, taken in this order: the short tasks in one piece per producer
        outside the long lane (they sample side by side), then the long ones in one piece of the lane (a
        `TaskScheduler` says which are long). With one producer and no lane a round is one request, sampled as the
        synchronous loop samples it."""
        short: list[Task] = tasks
        long: list[Task] = []
        if self.long_slots and isinstance(curriculum, TaskScheduler):
            short, long = curriculum.lanes(tasks)
        ways = max(1, min(len(self.producers) - self.long_slots, len(short)))
        size = max(1, -(-len(short) // ways))
        return [short[i:i + size] for i in range(0, len(short), size)] + ([long] if long else [])

    def is_long(self, tasks: list[Task], curriculum: Curriculum) -> bool:
        """Whether a piece belongs in the long lane (`split` never mixes the lanes in one piece)."""
        return bool(self.long_slots and tasks and isinstance(curriculum, TaskScheduler) and curriculum.is_long(tasks[0]))

    def withdraw(self, request: RolloutRequest) -> int:
        """Surplus work of a filled batch, cancelled; the groups withdrawn. A long-lane request already running is
        instead carried to the next step (with `max_staleness` >= 1: its groups are still fresh enough there)."""
        if request.long and self.k > 0 and self.buffer.state_of(request.id) in (RequestState.RUNNING, RequestState.DONE):
            self.carried.append(Piece(request.tasks, request))
            return 0
        return len(request.tasks) if self.buffer.cancel(request.id) else 0

    def _look_ahead(self, step: int, curriculum: Curriculum, n: int, informative_rate: float) -> None:
        """Requests for steps step+1 .. step+max_staleness, each allowed to start at version t-1-max_staleness.

        Each is sized like a fill round (`rollout.fill_draw`, at most 4x prompts_per_step): zero-variance groups are
        dropped, and a refill is sampled on the learner's critical path, so the look-ahead samples them too."""
        cfg = self.cfg.train
        per_step = cfg.prompts_per_step
        if cfg.drop_zero_variance:
            per_step = fill_draw(per_step, informative_rate)
        last = max(self.ahead, default=step)
        for t in range(max(last, step) + 1, min(step + self.k, self.total_steps) + 1):
            if self.buffer.occupancy() + per_step > self.buffer.capacity:
                break  # backpressure: checked before sampling tasks, so a refused request costs no curriculum draw
            pieces = []
            for part in self.split(curriculum.sample(per_step), curriculum):
                long = self.is_long(part, curriculum)
                request = self.buffer.submit(part, n, t, t - 1 - self.k, ahead=True, long=long)
                if request is not None:  # the pieces fit together (checked above)
                    pieces.append(Piece(part, request))
            if not pieces:
                break
            self.ahead[t] = pieces

    def publish(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        self.board.publish(state, version)

    def step_metrics(self) -> dict[str, float]:
        """What happened since the previous call: staleness, occupancy, idle fractions, drops, failures."""
        now = time.perf_counter()
        wall = max(now - self._mark, 1e-9)
        idle = sum(p.idle_s for p in self.producers)
        st = self._staleness
        durations = self.buffer.finished_durations[self._durations_mark:]
        failures = sum(len(p.failures) for p in self.producers)
        m: dict[str, float] = {
            "staleness_max": float(max(st)) if st else 0.0,
            "staleness_mean": sum(st) / len(st) if st else 0.0,
            "buffer_occupancy": float(self.buffer.occupancy()),
            "buffer_capacity": float(self.buffer.capacity),
            "learner_idle_frac": min(self._waited / wall, 1.0),
            "producer_idle_frac": min((idle - self._idle_mark) / (wall * len(self.producers)), 1.0),
            "dropped_stale_groups": float(self._dropped),
            "dropped_stale_total": float(self.buffer.dropped_stale),
            "dropped_pending_total": float(self.buffer.dropped_pending + self.resume_dropped),
            "requeued_requests": float(self.buffer.requeued - self._requeued_mark),
            "producer_failures": float(failures - self._failures_mark),
            "surplus_cancelled_groups": float(self.cancelled_groups - self._cancelled_mark),
            "rollout_duration_mean": sum(durations) / len(durations) if durations else 0.0,
            "weight_publish_ms": 1000 * self.board.publish_s[-1] if self.board.publish_s else 0.0,
        }
        for s in range(self.k + 1):
            m[f"staleness_hist/{s}"] = float(st.count(s))
        self._mark, self._idle_mark, self._waited, self._dropped = now, idle, 0.0, 0
        self._requeued_mark, self._failures_mark = self.buffer.requeued, failures
        self._durations_mark = len(self.buffer.finished_durations)
        self._cancelled_mark = self.cancelled_groups
        self._staleness = []
        return m

    def failures(self) -> list[ProducerFailure]:
        return [f for p in self.producers for f in p.failures]

    def new_failures(self) -> list[ProducerFailure]:
        """Failures not returned by an earlier call."""
        return self._unreported("failures", [p.failures for p in self.producers])

    def new_sandbox_failures(self) -> list[SandboxFailure]:
        """Sandbox workers of the producers' processes that died, not returned by an earlier call."""
        return self._unreported("sandbox", [p.sandbox_failures for p in self.producers])

    def _unreported(self, kind: str, lists: list[list[Any]]) -> list[Any]:
        """The records of each producer's append-only list past what an earlier call for `kind` returned,
        oldest first (each list is snapshotted once: a record appended meanwhile waits for the next call)."""
        snaps = [list(items) for items in lists]
        marks = self._reported.get(kind, [0] * len(snaps))
        self._reported[kind] = [len(snap) for snap in snaps]
        return sorted((r for snap, mark in zip(snaps, marks) for r in snap[mark:]), key=lambda r: r.time)

    # checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The producers' sampler states and what is pending (dropped on resume: a resume starts an empty buffer)."""
        return {"producer_rng": [p.runner.sampler_state() for p in self.producers],
                "pending_groups": self.buffer.occupancy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for p, rng in zip(self.producers, state.get("producer_rng", [])):
            p.runner.load_sampler_state(rng)
        self.resume_dropped = int(state.get("pending_groups", 0))

    # hooks for a scheduler: work beyond the loop's own, and what each rollout took
    def submit(self, tasks: list[Any], n: int, for_step: int, ahead: bool = True, long: bool = False
               ) -> RolloutRequest | None:
        """Queue tasks for consumption at `for_step` (gated like look-ahead; `long`: in the long-task lane); None
        when the bound refuses it."""
        return self.buffer.submit(tasks, n, for_step, for_step - 1 - self.k, ahead=ahead, long=long)

    def cancel(self, request: RolloutRequest) -> bool:
        """Withdraw a request (queued: removed; running or finished: its groups discarded), counted as cancelled."""
        for t, pieces in self.ahead.items():
            self.ahead[t] = [p for p in pieces if p.handle is not request]
        return self.buffer.cancel(request.id)

    def durations(self) -> list[float]:
        """The measured duration (s) of every finished rollout request, in finishing order."""
        return list(self.buffer.finished_durations)

    def close(self) -> None:
        """Stop the producers; what was pending is dropped and counted (`buffer.ledger()`). Idempotent."""
        if self.buffer.closed:
            return
        self.buffer.drop_all()
        self.buffer.close()
        for p in self.producers:
            p.close()
        torch.set_num_threads(self._threads_before)
