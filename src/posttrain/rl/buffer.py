"""The bounded buffer between rollout producers and the learner in the asynchronous loop.

Covers: `RolloutRequest` (tasks to sample, for which learner step, from which
policy version on it may start), the producers' side (`next_request`,
`finish`, `requeue`), the learner's side (`submit`, `take`, `cancel`,
`drop_all`), the bound (`capacity` groups submitted ahead and not yet
consumed: a look-ahead submission that does not fit is refused, which is the
backpressure), the staleness of a group (learner version minus the oldest
policy version that sampled any of its tokens, `group_version`), and the
accounting of every request: each ends in exactly one terminal state (`RequestState`: taken,
cancelled, dropped unconsumed, or lost: still running when the buffer closed, which is what a
producer that died holding it without handing it back leaves), and `ledger()` counts states, not
differences of counters, so a loss can show; groups older than `max_staleness` at `take` time
are dropped and counted, never returned.
Thread-safe (one condition variable); process producers reach it through
proxy threads (`rl/async_loop.py`).
Does not cover: running rollouts, weights (`rl/async_loop.py`).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from posttrain.types import Group, Task


def group_version(group: Group) -> int:
    """The oldest policy version that sampled any token of the group (every turn of every attempt)."""
    versions = [turn.completion.policy_version for t in group.trajectories for turn in t.turns]
    return min(versions) if versions else 0


class RequestState(enum.Enum):
    """Where a request is. QUEUED, RUNNING and DONE are open; the other four are terminal."""

    QUEUED = "queued"
    RUNNING = "running"  # a producer holds it
    DONE = "done"  # finished, waiting for the learner
    TAKEN = "taken"
    CANCELLED = "cancelled"
    DROPPED = "dropped"  # dropped unconsumed (`drop_all`: a resume, the end of a run)
    LOST = "lost"  # still held by a producer when the buffer closed


_OPEN = (RequestState.QUEUED, RequestState.RUNNING, RequestState.DONE)


@dataclass
class RolloutRequest:
    """One batch of tasks for the producers: `n` attempts each, consumed at learner step `for_step`."""

    id: int
    tasks: list[Task]
    n: int
    for_step: int
    min_version: int  # a producer may start it only with weights at least this version (the staleness gate)
    submitted_s: float = field(default_factory=time.perf_counter)
    requeues: int = 0
    long: bool = False  # in the long-task lane (`scheduler/lanes.py`): at most a few producers hold such requests


# (queued in order, running) -> the index of the queued request a free producer starts (None: it waits)
Pick = Callable[[list[RolloutRequest], list[RolloutRequest]], "int | None"]


@dataclass
class FinishedRollout:
    """What a producer hands back for one request."""

    request: RolloutRequest
    groups: list[Group]
    version: int  # the weights it started with
    duration_s: float  # measured: start of sampling to the last verdict
    producer: int


@dataclass
class Taken:
    """The groups of one request that the learner may use, and what was dropped for staleness."""

    groups: list[Group]
    staleness: list[int]  # per returned group
    dropped: int  # groups older than max_staleness: counted, not returned
    duration_s: float
    waited_s: float  # how long the learner blocked for it


class BufferClosed(RuntimeError):
    """The buffer was closed while a caller waited on it."""


class GroupBuffer:
    """Requests in submission order, their results by request id, and the counters.

    `capacity` bounds the groups that are submitted and not yet consumed
    (queued, in flight, or finished and waiting). `submit(..., ahead=True)`
    (look-ahead work) is refused when it would exceed it; the learner's own
    critical-path requests (`ahead=False`) are always admitted, so the
    learner never waits on a bound it could only release itself.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._cond = threading.Condition()
        self._queue: list[RolloutRequest] = []
        self._running: dict[int, RolloutRequest] = {}
        self._done: dict[int, FinishedRollout] = {}
        self._next_id = 0
        self._closed = False
        self._drop_running = False  # after drop_all: a running request handed back is dropped, not queued again
        self.dropped_stale = 0  # groups dropped at take for staleness, whole run
        self.dropped_pending = 0  # groups dropped unconsumed (drop_all, and running ones when they end), whole run
        self.requeued = 0  # requests sampled again (on_new_weights = requeue, a dead producer)
        self.finished_durations: list[float] = []  # every finished rollout's measured duration (the scheduler hook)
        self.submitted_groups = 0
        self._state: dict[int, RequestState] = {}  # every request id ever submitted
        self._taken: dict[int, int] = {}  # request id -> times taken (more than once would be a group used twice)
        self._sizes: dict[int, int] = {}
        self.late_results = 0  # results handed in for a request no producer held (finished twice, or unknown)

    def _end(self, request_id: int, state: RequestState) -> None:
        """Move an open request to a terminal state (a terminal one keeps its first)."""
        if self._state.get(request_id) in _OPEN:
            self._state[request_id] = state
            if state is RequestState.DROPPED:
                self.dropped_pending += self._sizes[request_id]

    def state_of(self, request_id: int) -> RequestState:
        with self._cond:
            return self._state[request_id]

    @property
    def cancelled_groups(self) -> int:
        with self._cond:
            return self._groups_in(RequestState.CANCELLED)

    def _groups_in(self, state: RequestState) -> int:
        return sum(self._sizes[r] for r, s in self._state.items() if s is state)

    # learner side
    def occupancy(self) -> int:
        """Groups submitted and not yet consumed."""
        with self._cond:
            return self._pending_groups()

    def _pending_groups(self) -> int:
        return (sum(len(r.tasks) for r in self._queue) + sum(len(r.tasks) for r in self._running.values())
                + sum(len(f.request.tasks) for f in self._done.values()))

    def submit(self, tasks: list[Task], n: int, for_step: int, min_version: int, ahead: bool = False,
               long: bool = False) -> RolloutRequest | None:
        """Queue a request; None when it is look-ahead work (`ahead`) that does not fit in `capacity`."""
        with self._cond:
            if ahead and self._pending_groups() + len(tasks) > self.capacity:
                return None
            request = RolloutRequest(self._next_id, list(tasks), n, for_step, min_version, long=long)
            self._next_id += 1
            self.submitted_groups += len(tasks)
            self._sizes[request.id] = len(tasks)
            self._state[request.id] = RequestState.QUEUED
            self._queue.append(request)
            self._cond.notify_all()
            return request

    def cancel(self, request_id: int) -> bool:
        """Withdraw a request: removed if still queued, its result discarded if running or done. False if it is
        unknown or already ended."""
        with self._cond:
            state = self._state.get(request_id)
            if state not in _OPEN:
                return False
            self._queue = [r for r in self._queue if r.id != request_id]
            self._done.pop(request_id, None)
            self._end(request_id, RequestState.CANCELLED)  # a running one: its result is discarded at finish
            self._cond.notify_all()
            return True

    def take(self, request: RolloutRequest, version: int, max_staleness: int, timeout: float | None = None) -> Taken:
        """Block until `request` is finished; its groups with staleness (`version` - group_version) at most
        `max_staleness`, in task order; the older ones dropped and counted."""
        t0 = time.perf_counter()
        with self._cond:
            while request.id not in self._done:
                if self._closed:
                    raise BufferClosed("the rollout buffer was closed while the learner waited")
                if not self._cond.wait(timeout):
                    raise TimeoutError(f"rollout request {request.id} not finished after {timeout} s")
            finished = self._done.pop(request.id)
            self._taken[request.id] = self._taken.get(request.id, 0) + 1
            self._state[request.id] = RequestState.TAKEN
            self._cond.notify_all()
        waited = time.perf_counter() - t0
        kept, staleness, dropped = [], [], 0
        for g in finished.groups:
            s = version - group_version(g)
            if s > max_staleness:
                dropped += 1
                continue
            kept.append(g)
            staleness.append(s)
        with self._cond:
            self.dropped_stale += dropped
        return Taken(kept, staleness, dropped, finished.duration_s, waited)

    def drop_all(self) -> int:
        """Drop every queued and finished request (counted); running ones are dropped when their producer hands
        them back (finish or requeue), and lost if it never does before `close`. Returns the groups dropped now."""
        with self._cond:
            ids = [r.id for r in self._queue] + list(self._done)
            n = sum(self._sizes[i] for i in ids)
            for i in ids:
                self._end(i, RequestState.DROPPED)
            self._drop_running = True
            self._queue.clear()
            self._done.clear()
            self._cond.notify_all()
            return n

    def close(self) -> None:
        """No more work; a request a producer still holds now can no longer be accounted for, and is lost."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _settle(self) -> None:
        """After close: every running request not handed back is lost."""
        if self._closed:
            for r in self._running:
                self._end(r, RequestState.LOST)

    # producer side
    def next_request(self, timeout: float | None = None, pick: Pick | None = None) -> RolloutRequest | None:
        """The oldest queued request (or the one `pick` chooses among the queued and running ones), now running
        (None when closed or after `timeout`)."""
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while (i := self._choose(pick)) is None:
                if self._closed:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            request = self._queue.pop(i)
            self._running[request.id] = request
            self._state[request.id] = RequestState.RUNNING
            return request

    def _choose(self, pick: Pick | None) -> int | None:
        if not self._queue:
            return None
        return 0 if pick is None else pick(self._queue, list(self._running.values()))

    def finish(self, done: FinishedRollout) -> None:
        with self._cond:
            rid = done.request.id
            held = self._running.pop(rid, None) is not None
            self.finished_durations.append(done.duration_s)
            state = self._state.get(rid)
            if state is RequestState.RUNNING and held:
                if self._drop_running:
                    self._end(rid, RequestState.DROPPED)
                else:
                    self._state[rid] = RequestState.DONE
                    self._done[rid] = done
            elif state not in (RequestState.CANCELLED, RequestState.DROPPED):
                self.late_results += 1  # nobody held it: never delivered twice
            self._cond.notify_all()

    def requeue(self, request: RolloutRequest) -> None:
        """Put a running request back at the head of the queue (its partial results discarded)."""
        with self._cond:
            held = self._running.pop(request.id, None) is not None
            if not held or self._state.get(request.id) is not RequestState.RUNNING:
                return  # cancelled or dropped while it ran (or not held): nothing to sample again
            if self._drop_running:
                self._end(request.id, RequestState.DROPPED)
                return
            request.requeues += 1
            self.requeued += 1
            self._state[request.id] = RequestState.QUEUED
            self._queue.insert(0, request)
            self._cond.notify_all()

    def ledger(self) -> dict[str, int]:
        """Groups by the state their request is in: taken by the learner, cancelled, dropped unconsumed, pending
        (still open), lost (held by a producer when the buffer closed: must be 0), and groups taken more than
        once (must be 0). Every submitted request is in exactly one state, so the parts sum to `submitted`."""
        with self._cond:
            self._settle()
            by = {state: self._groups_in(state) for state in RequestState}
            twice = sum(self._sizes[r] * (c - 1) for r, c in self._taken.items())
            return {"submitted": self.submitted_groups, "taken": by[RequestState.TAKEN],
                    "cancelled": by[RequestState.CANCELLED], "dropped_pending": by[RequestState.DROPPED],
                    "pending": sum(by[s] for s in _OPEN), "lost": by[RequestState.LOST], "taken_twice": twice,
                    "requeued": self.requeued, "late_results": self.late_results}

    @property
    def closed(self) -> bool:
        return self._closed
