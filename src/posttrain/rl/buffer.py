"""The bounded buffer between rollout producers and the learner in the asynchronous loop.

Covers: `RolloutRequest` (tasks to sample, for which learner step, from which
policy version on it may start), the producers' side (`next_request`,
`finish`, `requeue`), the learner's side (`submit`, `take`, `cancel`,
`drop_all`), the bound (`capacity` groups submitted ahead and not yet
consumed: a look-ahead submission that does not fit is refused, which is the
backpressure), the staleness of a group (learner version minus the oldest
policy version that sampled any of its tokens, `group_version`), and the
accounting of what never reaches the learner: groups older than
`max_staleness` at `take` time are dropped and counted, never returned;
`drop_all` (a resume, the end of a run) counts what was pending.
Thread-safe (one condition variable); process producers reach it through
proxy threads (`rl/async_loop.py`).
Does not cover: running rollouts, weights (`rl/async_loop.py`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from posttrain.types import Group, Task


def group_version(group: Group) -> int:
    """The oldest policy version that sampled any token of the group (every turn of every attempt)."""
    versions = [turn.completion.policy_version for t in group.trajectories for turn in t.turns]
    return min(versions) if versions else 0


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
        self._cancelled: set[int] = set()
        self._next_id = 0
        self._closed = False
        self.dropped_stale = 0  # groups dropped at take for staleness, whole run
        self.dropped_pending = 0  # groups dropped unconsumed (drop_all), whole run
        self.requeued = 0  # requests sampled again (on_new_weights = requeue, a dead producer)
        self.finished_durations: list[float] = []  # every finished rollout's measured duration (the scheduler hook)
        self.submitted_groups = 0
        self.cancelled_groups = 0
        self._taken: dict[int, int] = {}  # request id -> times taken (more than once would be a group used twice)
        self._sizes: dict[int, int] = {}

    # learner side
    def occupancy(self) -> int:
        """Groups submitted and not yet consumed."""
        with self._cond:
            return self._pending_groups()

    def _pending_groups(self) -> int:
        return (sum(len(r.tasks) for r in self._queue) + sum(len(r.tasks) for r in self._running.values())
                + sum(len(f.request.tasks) for f in self._done.values()))

    def submit(self, tasks: list[Task], n: int, for_step: int, min_version: int, ahead: bool = False) -> RolloutRequest | None:
        """Queue a request; None when it is look-ahead work (`ahead`) that does not fit in `capacity`."""
        with self._cond:
            if ahead and self._pending_groups() + len(tasks) > self.capacity:
                return None
            request = RolloutRequest(self._next_id, list(tasks), n, for_step, min_version)
            self._next_id += 1
            self.submitted_groups += len(tasks)
            self._sizes[request.id] = len(tasks)
            self._queue.append(request)
            self._cond.notify_all()
            return request

    def cancel(self, request_id: int) -> bool:
        """Withdraw a request: removed if still queued, its result discarded if running or done. False if unknown."""
        with self._cond:
            found = False
            for i, r in enumerate(self._queue):
                if r.id == request_id:
                    del self._queue[i]
                    found = True
                    break
            if not found and request_id in self._done:
                del self._done[request_id]
                found = True
            if not found and request_id in self._running:
                self._cancelled.add(request_id)
                found = True
            if found:
                self.cancelled_groups += self._sizes.get(request_id, 0)
            return found

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
        """Drop every queued and finished request (counted); running ones are discarded when they finish."""
        with self._cond:
            n = self._pending_groups()
            self._cancelled.update(self._running)
            self._queue.clear()
            self._done.clear()
            self.dropped_pending += n
            self._cond.notify_all()
            return n

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # producer side
    def next_request(self, timeout: float | None = None) -> RolloutRequest | None:
        """The oldest queued request, now running (None when closed or after `timeout`)."""
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._queue:
                if self._closed:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            request = self._queue.pop(0)
            self._running[request.id] = request
            return request

    def finish(self, done: FinishedRollout) -> None:
        with self._cond:
            rid = done.request.id
            self._running.pop(rid, None)
            self.finished_durations.append(done.duration_s)
            if rid in self._cancelled:
                self._cancelled.discard(rid)
            else:
                self._done[rid] = done
            self._cond.notify_all()

    def requeue(self, request: RolloutRequest) -> None:
        """Put a running request back at the head of the queue (its partial results discarded)."""
        with self._cond:
            self._running.pop(request.id, None)
            if request.id in self._cancelled:
                self._cancelled.discard(request.id)
                return
            request.requeues += 1
            self.requeued += 1
            self._queue.insert(0, request)
            self._cond.notify_all()

    def ledger(self) -> dict[str, int]:
        """Where every submitted group went: taken by the learner, cancelled, dropped unconsumed, or lost
        (none of those; a producer fault must leave this 0), and groups taken more than once (must be 0)."""
        with self._cond:
            taken = sum(self._sizes[r] for r in self._taken)
            twice = sum(self._sizes[r] * (c - 1) for r, c in self._taken.items())
            pending = self._pending_groups()
            lost = self.submitted_groups - taken - self.cancelled_groups - self.dropped_pending - pending
            return {"submitted": self.submitted_groups, "taken": taken, "cancelled": self.cancelled_groups,
                    "dropped_pending": self.dropped_pending, "pending": pending, "lost": lost, "taken_twice": twice}

    @property
    def closed(self) -> bool:
        return self._closed
