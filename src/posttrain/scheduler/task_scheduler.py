"""The multi-domain task scheduler: what runs next, over hundreds of domains, and what every finished group teaches.

Covers: `TaskScheduler`, a `Curriculum` (`sample` / `update` / state) over
per-domain queues. A draw takes, in priority order (`Priority`): queued
evaluation tasks, then replays of banked failures (at most `replay_share` of
a draw, `scheduler/failures.py`), then fresh tasks. A fresh task's domain is
drawn by its mixture weight times its learnability (the recent share of its
groups with reward variance, never below `domain_floor`), skipping domains at
their in-flight limit; inside the domain a task is drawn from its source and
accepted with probability `task_weight / unseen_weight`, so a finite source is
sampled in proportion to E[p(1-p)] under each task's Beta posterior
(`scheduler/learnability.py`) and unseen tasks are never starved; with
probability `revisit` the task comes instead from the domain's pool of tasks
whose last group had variance (bounded, `pool_size`), again accepted by weight,
so a large or generated source still gets its learnable tasks back. Tasks
solved always or never (after `min_attempts`) are retired, and so are whole
domains whose groups stopped carrying signal at a pass rate of 0 or 1, and
domains with no passing sample in their last `retire_dry_after` groups (a
score that varies only below the pass mark, such as reasoning-gym's credit for
a response that contains the answer among other characters, is not progress
on the task's acceptance criterion, the same judgement the task posteriors
make on passes); all come back through periodic re-checks (a retired task is
accepted with probability 1/`recheck_every`; a retired domain gets one probe
group `recheck_every` steps after it retired, each probe that finds nothing
stretches its next wait by `recheck_backoff` (three times at most), and it returns when a
probe shows it moved: a failure for a domain retired as always solved, else a
passing sample (or, with `retire_dry_after` off, any variance)). Domains with a
difficulty knob move along it to keep their pass rate in the band
(`scheduler/band.py`); rollout seconds and tokens feed `scheduler/cost.py`
(long lane, budgets, timeouts). `domain_metrics()` and `drain_failures()`
are what the trainer stores; `state_dict()` holds everything, so a resumed
run makes the same decisions.
With `task_model = "ability"` a task's worth comes instead from a Rasch model
of each domain (`scheduler/learnability.py`: pass rate sigmoid(ability -
difficulty), one Kalman step per group): evidence on one task moves the
domain's ability and so the expectation of all its tasks, an unseen task
starts at the domain's mean difficulty (empirical Bayes, not a flat floor),
the pool holds every tried task (a task too hard today is the right one once
the domain has learnt), and a revisit takes the weightiest pool task not
already handed out, unless an unseen task is expected to be worth more.
With `retire = False` nothing is retired, neither tasks nor domains (so no
re-check probes either): a never-solved task keeps its E[p(1-p)] weight and
a dead domain its floor share; with `replay_share = 0` this is plain
learnability sampling, the ablation that `benchmarks/scheduler_tokens.py`
sets beside the full scheduler.
Does not cover: running rollouts or the refill rule (`scheduler/pipeline.py`).
"""

from __future__ import annotations

import bisect
import enum
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from posttrain.scheduler.band import BandController
from posttrain.scheduler.cost import CostModel
from posttrain.scheduler.failures import Failure, FailureBank, task_of, task_state
from posttrain.scheduler.learnability import (
    ability_step,
    difficulty_variance,
    expected_learnability_logit,
    task_weight,
)
from posttrain.tasks.base import TaskSource
from posttrain.types import DOMAIN_KEY, Group, RolloutStatus, Task


class Priority(enum.IntEnum):
    """Lower runs first."""

    EVAL = 0
    RETRY = 1
    FRESH = 2


class DomainStatus(str, enum.Enum):
    ACTIVE = "active"
    RETIRED = "retired"


@dataclass
class SchedulerSettings:
    """The scheduler's knobs (`[scheduler]` in a config; `config.SchedulerConfig` documents each)."""

    unseen_weight: float = 0.25
    min_weight: float = 0.01
    min_attempts: int = 16
    recheck_every: int = 50
    domain_floor: float = 0.05
    domain_rate: float = 0.05
    retire_after_groups: int = 8
    retire_informative: float = 0.02
    retire_dry_after: int = 32
    recheck_backoff: float = 2.0
    band_low: float = 0.2
    band_high: float = 0.8
    band_window: int = 64
    revisit: float = 0.5
    pool_size: int = 64
    replay_share: float = 0.25
    replay_decay: float = 0.5
    max_inflight: int = 0
    max_rejections: int = 20
    long_factor: float = 10.0
    timeout_factor: float = 20.0
    task_model: str = "beta"
    ability_drift: float = 0.01
    difficulty_var: float = 4.0
    retire: bool = True


@dataclass
class DomainSpec:
    """One domain as the scheduler sees it. `source_at(level)`: its source at another difficulty level (the band
    controller moves it within `band`); None when the domain has no knob."""

    name: str
    source: TaskSource
    weight: float = 1.0
    level: int | None = None
    band: tuple[int, int] | None = None
    source_at: Callable[[int], TaskSource] | None = None


@dataclass(slots=True)
class _Domain:
    spec: DomainSpec
    source: TaskSource
    status: DomainStatus = DomainStatus.ACTIVE
    informative: float = 1.0  # recent share of its groups with variance (optimistic start)
    pass_rate: float = float("nan")  # recent pass rate (moving average)
    groups: int = 0
    drawn: int = 0  # tasks handed out since the last metrics call
    probed: int = 0  # of them, re-check probes of the domain while retired
    informative_window: list[int] = field(default_factory=lambda: [0, 0])  # [informative, groups] since metrics
    inflight: int = 0
    retired_at: int = 0
    ever_passed: bool = False  # any valid sample of the domain passed, ever
    dry: int = 0  # groups since its last passing sample
    rechecks: int = 0  # probes since it retired that did not bring it back
    retired_solved: bool = False  # retired because always solved (else never, or no longer)
    stats: dict[str, int] = field(default_factory=dict)  # task id -> difficulty << 64 | attempts << 32 | passes
    pool: list[Task] = field(default_factory=list)  # recently informative tasks, revisited (bounded)
    in_pool: dict[str, int] = field(default_factory=dict)  # task id -> index in pool
    ability: float = 0.0  # task_model "ability": the domain's ability, in logits against its tasks' difficulties
    ability_var: float = 1.0  # its variance
    difficulty_sum: float = 0.0  # task_model "ability": the sum of its tried tasks' difficulties, and their count
    tried: int = 0
    busy: set[str] = field(default_factory=set)  # task_model "ability": ids handed out and not back yet
    ranked: list[tuple[float, str]] | None = None  # its pool by weight, heaviest first (None: stale), and what
    unseen: float = 0.0  # an unseen task weighs, both as of its last group (weights move only with its groups)

    @property
    def typical_difficulty(self) -> float:
        """An unseen task's prior difficulty: the mean of the tried ones, shrunk toward 0 by one pseudo-task."""
        return self.difficulty_sum / (self.tried + 1)

    def keep(self, task: Task, size: int) -> None:
        if task.id in self.in_pool or size <= 0:
            return
        if len(self.pool) >= size:
            self.drop(self.pool[0].id)
        self.in_pool[task.id] = len(self.pool)
        self.pool.append(task)

    def drop(self, task_id: str) -> None:
        i = self.in_pool.pop(task_id, None)
        if i is None:
            return
        last = self.pool.pop()
        if i < len(self.pool):  # swap the last one into the hole
            self.pool[i] = last
            self.in_pool[last.id] = i


_MAX_BACKOFFS = 3  # a retired domain's wait between probes stops growing at recheck_backoff ** 3 periods
_SCALE = 4096.0  # a difficulty is kept to 1/4096 of a logit, in 21 bits (|difficulty| < 256), packed with the
_OFFSET = 1 << 20  # counts so that 1M tasks cost no extra object each; 0 in those bits: no difficulty estimated


def _pack(attempts: int, passes: int, difficulty: float | None = None) -> int:
    if difficulty is None:
        return attempts << 32 | passes
    q = min(max(round(difficulty * _SCALE), 1 - _OFFSET), _OFFSET - 1) + _OFFSET
    return q << 64 | attempts << 32 | passes


def _unpack(v: int) -> tuple[int, int]:
    return v >> 32 & 0xFFFFFFFF, v & 0xFFFFFFFF


def _difficulty(v: int) -> float | None:
    """A task's packed difficulty (None before any estimate)."""
    q = v >> 64
    return (q - _OFFSET) / _SCALE if q else None


class TaskScheduler:
    """Per-domain queues with learnability weights, priorities, retirement, the band, costs and failures."""

    def __init__(self, domains: list[DomainSpec], settings: SchedulerSettings | None = None, seed: int = 0,
                 signal_from: str = "outcome") -> None:
        if not domains:
            raise ValueError("TaskScheduler needs at least one domain")
        self.s = settings or SchedulerSettings()
        self.signal_from = signal_from
        self.rng = random.Random(seed)
        self.domains: dict[str, _Domain] = {}
        self.band = BandController(self.s.band_low, self.s.band_high, self.s.band_window)
        for spec in domains:
            if spec.name in self.domains:
                raise ValueError(f"domain {spec.name!r} given twice")
            self.domains[spec.name] = _Domain(spec, spec.source)
            if spec.band is not None and spec.level is not None and spec.source_at is not None:
                self.band.add(spec.name, spec.level, *spec.band)
        self.names = list(self.domains)
        self.cost = CostModel(long_factor=self.s.long_factor, timeout_factor=self.s.timeout_factor)
        self.bank = FailureBank(decay=self.s.replay_decay)
        self.queues: dict[Priority, deque[Task]] = {Priority.EVAL: deque(), Priority.RETRY: deque()}
        self.step = 0
        self._cum: list[float] | None = None
        self._failures: list[tuple[int, Failure]] = []
        self.decisions = 0

    # what runs next
    def submit(self, tasks: list[Task], priority: Priority) -> None:
        """Queue tasks ahead of fresh draws (evaluation tasks first, then retries), each tagged with its domain."""
        if priority is Priority.FRESH:
            raise ValueError("fresh tasks are drawn, not queued")
        self.queues[priority].extend(tasks)

    def set_step(self, step: int) -> None:
        """The training step the next draws serve (re-checks and the band history count in steps)."""
        self.step = step

    def sample(self, k: int) -> list[Task]:
        out: list[Task] = []
        while self.queues[Priority.EVAL] and len(out) < k:
            out.append(self.queues[Priority.EVAL].popleft())
        replays = min(k - len(out), int(self.s.replay_share * k))
        while self.queues[Priority.RETRY] and replays > 0:
            out.append(self.queues[Priority.RETRY].popleft())
            replays -= 1
        if replays > 0:
            out.extend(self.bank.take(replays, self._replayable))
        out.extend(self._probes(k - len(out)))
        for t in out:
            self._hand_out(t)
        while len(out) < k:
            out.append(self.draw())
        return out

    def _hand_out(self, task: Task) -> None:
        d = self.domains.get(str(task.meta.get(DOMAIN_KEY, "")))
        if d is not None:
            d.inflight += 1
            d.drawn += 1
            if self.s.task_model == "ability":
                d.busy.add(task.id)

    def _replayable(self, task: Task) -> bool:
        """A banked failure is replayed while its domain is live and the task itself is not retired."""
        d = self.domains.get(str(task.meta.get(DOMAIN_KEY, "")))
        return d is None or (d.status is DomainStatus.ACTIVE and self.weight_of(d, task.id) > 0.0)

    def _probes(self, room: int) -> list[Task]:
        """One group for each retired domain whose re-check is due."""
        out = []
        for d in self.domains.values():
            if room <= len(out):
                break
            if d.status is DomainStatus.RETIRED and self.step - d.retired_at >= self._recheck_wait(d):
                d.retired_at = self.step  # the next re-check is a period later, whatever this one shows
                d.rechecks += 1
                d.probed += 1
                out.append(self._tag(d.source.sample(self.rng, "train"), d.spec.name))
        return out

    def _recheck_wait(self, d: _Domain) -> float:
        """Steps from a retired domain's retirement (or last probe) to its next probe."""
        return self.s.recheck_every * self.s.recheck_backoff ** min(d.rechecks, _MAX_BACKOFFS)

    def draw(self) -> Task:
        """One fresh task: a domain by weight (none past its in-flight limit), then a task inside it."""
        self.decisions += 1
        d = self._pick_domain()
        task = self._tag(self._pick_task(d), d.spec.name)
        d.inflight += 1
        d.drawn += 1
        if self.s.task_model == "ability":
            d.busy.add(task.id)
        return task

    def _tag(self, task: Task, name: str) -> Task:
        return task if task.meta.get(DOMAIN_KEY) == name else replace(task, meta={**task.meta, DOMAIN_KEY: name})

    def domain_weight(self, name: str) -> float:
        d = self.domains[name]
        if d.status is DomainStatus.RETIRED:
            return 0.0
        return d.spec.weight * max(self.s.domain_floor, d.informative)

    def _weights(self) -> list[float]:
        if self._cum is None:
            total, cum = 0.0, []
            for name in self.names:
                total += self.domain_weight(name)
                cum.append(total)
            if total <= 0.0:  # everything retired: fall back to the mixture weights until a re-check revives one
                for i, name in enumerate(self.names):
                    total += self.domains[name].spec.weight
                    cum[i] = total
            self._cum = cum
        return self._cum

    def _pick_domain(self) -> _Domain:
        cum = self._weights()
        limit = self.s.max_inflight
        for _ in range(self.s.max_rejections):
            i = bisect.bisect_right(cum, self.rng.random() * cum[-1])
            d = self.domains[self.names[min(i, len(cum) - 1)]]
            if not limit or d.inflight < limit:
                return d
        free = [self.domains[n] for n in self.names if not limit or self.domains[n].inflight < limit]
        return self.rng.choice(free) if free else d  # every domain at its limit: the caller asked for more anyway

    def weight_of(self, d: _Domain, task_id: str) -> float:
        """The task's weight (before its domain's), 0 when retired. `task_model = "beta"`: E[p(1-p)] under its
        Beta posterior, the unseen weight before any attempt. `"ability"`: p(1-p) at its predicted pass rate
        (the domain's ability against the task's difficulty; an unseen task at the domain's typical one)."""
        packed = d.stats.get(task_id)
        if packed is None:
            return self.s.unseen_weight if self.s.task_model == "beta" else self._ability_weight(d, task_id, 0)
        attempts, passes = _unpack(packed)
        if self.s.task_model == "ability":  # no retirement by counts: a task too hard today weighs more as the
            return self._ability_weight(d, task_id, attempts)  # domain's ability rises, and one solved, less
        if self.s.retire and attempts >= self.s.min_attempts and passes in (0, attempts):
            return 0.0
        return task_weight(passes, attempts, self.s.unseen_weight, self.s.min_weight)

    def _ability_weight(self, d: _Domain, task_id: str, attempts: int) -> float:
        var = difficulty_variance(attempts, self.s.difficulty_var)
        difficulty = _difficulty(d.stats.get(task_id, 0))
        if difficulty is None:
            difficulty = d.typical_difficulty
        return max(self.s.min_weight, expected_learnability_logit(d.ability, difficulty, var))

    def _fresh_scale(self, d: _Domain) -> float:
        """What a fresh draw's weight is measured against: an unseen task is always accepted (every unseen task
        of a domain weighs the same, so turning one down for another gains nothing)."""
        return self.s.unseen_weight if self.s.task_model == "beta" else self._ranked(d)[1]

    def _ranked(self, d: _Domain) -> tuple[list[tuple[float, str]], float]:
        """`task_model = "ability"`: the pool by weight, heaviest first, and an unseen task's weight; computed
        once after each of the domain's groups, so a draw costs a look down the list, not a weight each."""
        if d.ranked is None:
            d.ranked = sorted(((self.weight_of(d, t.id), t.id) for t in d.pool), reverse=True)
            d.unseen = self._ability_weight(d, "", 0)
        return d.ranked, d.unseen

    def _pick_task(self, d: _Domain) -> Task:
        if d.pool and self.s.task_model == "ability":
            if self.rng.random() < self.s.revisit:  # the weightiest known task not out already, unless an unseen
                ranked, unseen = self._ranked(d)  # one is expected to be worth more
                for w, task_id in ranked:
                    if task_id not in d.busy:
                        if w >= unseen:
                            return d.pool[d.in_pool[task_id]]
                        break
        elif d.pool and self.rng.random() < self.s.revisit:  # a task that recently gave signal, by its weight
            for _ in range(self.s.max_rejections):
                task = d.pool[self.rng.randrange(len(d.pool))]
                if self.rng.random() * self.s.unseen_weight < self.weight_of(d, task.id):
                    return task
        task = d.source.sample(self.rng, "train")
        scale = self._fresh_scale(d)
        for _ in range(self.s.max_rejections):
            w = self.weight_of(d, task.id)
            accept = w / scale if w > 0.0 else 1.0 / self.s.recheck_every
            if accept >= 1.0 or self.rng.random() < accept:
                return task
            task = d.source.sample(self.rng, "train")
        return task

    def is_long(self, task: Task) -> bool:
        """Whether the task belongs in the long lane (its expected seconds, `scheduler/cost.py`)."""
        return self.cost.is_long(str(task.meta.get(DOMAIN_KEY, "")), task.id)

    def lanes(self, tasks: list[Task]) -> tuple[list[Task], list[Task]]:
        """(short, long): long tasks run on their own so they never hold a batch of short ones back."""
        long = [t for t in tasks if self.is_long(t)]
        return [t for t in tasks if not self.is_long(t)], long

    def sample_budget(self, seconds: float | None = None, tokens: float | None = None, max_k: int = 4096) -> list[Task]:
        """Fresh tasks until their expected cost fills the budget (at least one): a batch by cost, not count."""
        out: list[Task] = []
        spent_s = spent_t = 0.0
        while len(out) < max_k:
            task = self.sample(1)[0]
            e = self.cost.expected(str(task.meta.get(DOMAIN_KEY, "")), task.id)
            spent_s, spent_t = spent_s + e.seconds, spent_t + e.tokens
            if out and ((seconds is not None and spent_s > seconds) or (tokens is not None and spent_t > tokens)):
                self.release([task])
                if task.meta.get(DOMAIN_KEY) in self.domains:
                    self.queues[Priority.RETRY].appendleft(task)  # drawn already: it goes first next time
                break
            out.append(task)
        return out

    def release(self, tasks: list[Task]) -> None:
        """Tasks handed out that will not come back as groups (cancelled, timed out): their in-flight slots."""
        for t in tasks:
            d = self.domains.get(str(t.meta.get(DOMAIN_KEY, "")))
            if d is not None:
                d.inflight = max(0, d.inflight - 1)
                d.busy.discard(t.id)

    def timeout_s(self, domain: str) -> float:
        return self.cost.timeout_s(domain)

    # what finished groups teach
    def observe_round(self, groups: list[Group], seconds: float) -> None:
        """A round's wall time, shared among its groups by sampled tokens, into the cost estimates."""
        tokens = [sum(t.sampled_tokens for t in g.trajectories) for g in groups]
        total = sum(tokens) or len(groups)
        for g, n in zip(groups, tokens):
            share = (n or 1) / total if sum(tokens) else 1.0 / len(groups)
            self.cost.observe(str(g.task.meta.get(DOMAIN_KEY, "")), g.task.id, seconds * share, n / max(len(g.trajectories), 1))

    def update(self, groups: list[Group]) -> None:
        for g in groups:
            d = self.domains.get(str(g.task.meta.get(DOMAIN_KEY, "")))
            for f in self.bank.observe(g):
                self._failures.append((self.step, f))
            if d is None:
                continue
            d.inflight = max(0, d.inflight - 1)
            d.busy.discard(g.task.id)
            valid = [(t, s) for t, s, ok in zip(g.trajectories, g.signal_scores(self.signal_from), g.valid) if ok]
            if valid:
                passes = sum(int(t.verdict.passed) for t, _ in valid if t.verdict is not None)
                scores = [s for _, s in valid]
                self._count(d, g.task, passes, len(valid), float(max(scores) > min(scores)))
            elif g.trajectories and all(t.status is RolloutStatus.OVERLONG for t in g.trajectories):
                self._count(d, g.task, 0, len(g.trajectories), 0.0)  # the model cannot read it: a failure that lasts
        self._cum = None

    def _count(self, d: _Domain, task: Task, passes: int, attempts: int, signal: float) -> None:
        """One finished group of `d` into its task's posterior, the domain's moving figures and its pool."""
        d.ever_passed = d.ever_passed or passes > 0
        d.dry = 0 if passes > 0 else d.dry + 1
        packed = d.stats.get(task.id, 0)
        a, p = _unpack(packed)
        difficulty = None
        if self.s.task_model == "ability":
            var = difficulty_variance(a, self.s.difficulty_var)
            old = _difficulty(packed)
            d.ability, d.ability_var, difficulty = ability_step(
                d.ability, d.ability_var + self.s.ability_drift, d.typical_difficulty if old is None else old, var,
                passes, attempts)
            d.difficulty_sum += difficulty - (old or 0.0)
            d.tried += int(old is None)
        d.stats[task.id] = _pack(a + attempts, p + passes, difficulty)
        rate = max(self.s.domain_rate, 1.0 / (d.groups + 1))
        d.informative += rate * (signal - d.informative)
        rate_now = passes / attempts
        d.pass_rate = rate_now if d.groups == 0 else d.pass_rate + rate * (rate_now - d.pass_rate)
        d.groups += 1
        d.informative_window[0] += int(signal)
        d.informative_window[1] += 1
        if self.s.task_model == "ability":
            self._keep_known(d, task)
        elif signal and self.weight_of(d, task.id) > 0.0:
            d.keep(task, self.s.pool_size)
        else:
            d.drop(task.id)
        self._after_group(d, signal, passes, attempts)

    def _keep_known(self, d: _Domain, task: Task) -> None:
        """`task_model = "ability"`: the pool holds tasks already tried, whatever their last group showed (a task too
        hard today is the right one once the domain's ability has risen); when full, the lightest leaves if it
        weighs less than the newcomer."""
        if task.id not in d.in_pool and self.s.pool_size > 0:
            if len(d.pool) >= self.s.pool_size:
                d.ranked = None
                ranked, _ = self._ranked(d)
                if ranked[-1][0] >= self.weight_of(d, task.id):
                    return
                d.drop(ranked[-1][1])
            d.in_pool[task.id] = len(d.pool)
            d.pool.append(task)
        d.ranked = None

    def _after_group(self, d: _Domain, signal: float, passes: int, attempts: int) -> None:
        name = d.spec.name
        move = self.band.observe(name, passes, attempts, self.step)
        if move is not None and d.spec.source_at is not None:
            d.source = d.spec.source_at(move.new)
            d.informative, d.groups, d.dry = 1.0, 0, 0  # a new level is a new domain to learn about
            return
        if not self.s.retire:  # plain learnability sampling: weights only, nothing leaves the draw
            return
        dry_rule = self.s.retire_dry_after > 0
        if d.status is DomainStatus.RETIRED:  # a re-check that shows the domain moved brings its share back
            moved = passes < attempts if d.retired_solved else passes > 0 or (signal and not dry_rule)
            if moved:
                d.status, d.informative, d.groups, d.rechecks = DomainStatus.ACTIVE, 1.0, 0, 0
            return
        at_bound = name not in self.band.levels or self._band_stuck(name)
        quiet = (d.groups >= self.s.retire_after_groups and d.informative <= self.s.retire_informative
                 and (d.pass_rate <= 0.0 or d.pass_rate >= 1.0))
        lv = self.band.levels.get(name)
        at_floor = lv is None or lv.level <= lv.lo  # no easier level to move to
        if (at_bound and quiet) or (at_floor and dry_rule and d.dry >= self.s.retire_dry_after):
            d.status, d.retired_at, d.rechecks = DomainStatus.RETIRED, self.step, 0
            d.retired_solved = d.pass_rate >= 1.0

    def _band_stuck(self, name: str) -> bool:
        """The knob cannot move further in the direction the pass rate asks."""
        lv = self.band.levels[name]
        rate = self.domains[name].pass_rate
        return (rate >= 1.0 and lv.level >= lv.hi) or (rate <= 0.0 and lv.level <= lv.lo)

    # what the trainer stores
    def drain_failures(self) -> list[tuple[int, Failure]]:
        """(step, failure) of every failed trajectory since the previous call."""
        out, self._failures = self._failures, []
        return out

    def domain_metrics(self) -> dict[str, dict[str, float]]:
        """Per domain since the previous call: pass_rate, difficulty, share, informative_frac, seconds, tokens,
        failures (all so far), retired (0/1), weight, drawn (tasks handed out), probes (of them, re-checks of the
        domain while retired), ever_passed (0/1)."""
        drawn = sum(d.drawn for d in self.domains.values()) or 1
        out = {}
        for name, d in self.domains.items():
            e = self.cost.expected(name)
            inf, n = d.informative_window
            level = self.band.level(name)
            out[name] = {
                "pass_rate": d.pass_rate, "difficulty": float(level if level is not None else (d.spec.level or 0)),
                "share": d.drawn / drawn, "informative_frac": inf / n if n else float("nan"),
                "seconds": e.seconds, "tokens": e.tokens,
                "failures": float(sum(self.bank.counts.get(name, {}).values())),
                "retired": float(d.status is DomainStatus.RETIRED), "weight": self.domain_weight(name),
                "drawn": float(d.drawn), "probes": float(d.probed), "ever_passed": float(d.ever_passed),
            }
            d.drawn, d.probed, d.informative_window = 0, 0, [0, 0]
        return out

    def summary(self) -> dict[str, float]:
        """The step's compact scheduler figures: active and retired domains, banked failures, band moves."""
        retired = sum(d.status is DomainStatus.RETIRED for d in self.domains.values())
        return {"scheduler/domains_active": float(len(self.domains) - retired),
                "scheduler/domains_retired": float(retired), "scheduler/failures_banked": float(len(self.bank)),
                "scheduler/band_moves": float(len(self.band.history))}

    # checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": self.rng.getstate(), "step": self.step, "decisions": self.decisions,
            "domains": {n: {"status": d.status.value, "informative": d.informative, "pass_rate": d.pass_rate,
                            "groups": d.groups, "drawn": d.drawn, "probed": d.probed, "window": list(d.informative_window),
                            "inflight": d.inflight, "retired_at": d.retired_at, "stats": dict(d.stats),
                            "ever_passed": d.ever_passed, "dry": d.dry, "rechecks": d.rechecks,
                            "retired_solved": d.retired_solved, "ability": d.ability,
                            "ability_var": d.ability_var, "difficulty_sum": d.difficulty_sum, "tried": d.tried,
                            "busy": sorted(d.busy),
                            "pool": [task_state(t) for t in d.pool]}
                        for n, d in self.domains.items()},
            "band": self.band.state_dict(), "cost": self.cost.state_dict(), "bank": self.bank.state_dict(),
            "queues": {p.name: [task_state(t) for t in q] for p, q in self.queues.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.step, self.decisions = state["step"], state["decisions"]
        self.band.load_state_dict(state["band"])
        for name, s in state["domains"].items():
            d = self.domains[name]
            d.status, d.informative, d.pass_rate = DomainStatus(s["status"]), s["informative"], s["pass_rate"]
            d.groups, d.drawn, d.informative_window = s["groups"], s["drawn"], list(s["window"])
            d.probed = s.get("probed", 0)
            d.inflight, d.retired_at, d.stats = s["inflight"], s["retired_at"], dict(s["stats"])
            d.pool = [task_of(t) for t in s["pool"]]
            d.ever_passed, d.dry, d.rechecks = s["ever_passed"], s.get("dry", 0), s.get("rechecks", 0)
            d.retired_solved = s.get("retired_solved", False)
            d.ability, d.ability_var = s.get("ability", 0.0), s.get("ability_var", 1.0)
            d.difficulty_sum, d.tried = s.get("difficulty_sum", 0.0), s.get("tried", 0)
            d.busy, d.ranked = set(s.get("busy", ())), None
            d.in_pool = {t.id: i for i, t in enumerate(d.pool)}
            level = self.band.level(name)
            if level is not None and level != d.spec.level and d.spec.source_at is not None:
                d.source = d.spec.source_at(level)
        self.cost.load_state_dict(state["cost"])
        self.bank.load_state_dict(state["bank"])
        self.queues = {Priority[p]: deque(task_of(t) for t in q) for p, q in state["queues"].items()}
        self._cum = None
