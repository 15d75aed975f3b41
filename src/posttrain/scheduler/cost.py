"""Expected cost of a rollout: moving estimates of seconds and tokens per domain and per task, and the lanes.

Covers: `CostModel`, exponential moving averages of measured group seconds
and sampled tokens per domain and per task (a bounded table: the oldest
task entries go first), the expected cost of a task (its own estimate, else
its domain's, else the prior), `is_long` (expected seconds at least
`long_factor` times the median domain's: such tasks go to the long lane, so
they never hold a batch of short ones back), `budget_take` (tasks in order
until a budget of seconds or tokens is spent: batches by cost, not by count),
and each domain's timeout (`timeout_factor` times its expected seconds).
Does not cover: choosing tasks (`scheduler/task_scheduler.py`) or running them.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Estimate:
    seconds: float
    tokens: float
    n: int = 0

    def observe(self, seconds: float, tokens: float, rate: float) -> None:
        # the first measurements set the estimate as a plain mean, later ones move it by `rate`
        r = max(rate, 1.0 / (self.n + 1))
        self.seconds += r * (seconds - self.seconds)
        self.tokens += r * (tokens - self.tokens)
        self.n += 1


@dataclass
class CostModel:
    rate: float = 0.1
    """Weight of each new measurement in an estimate (exponential moving average)."""
    prior_seconds: float = 1.0
    prior_tokens: float = 64.0
    long_factor: float = 10.0
    timeout_factor: float = 20.0
    min_timeout_s: float = 30.0
    max_tasks: int = 100_000
    """Per-task estimates kept at most (the oldest are forgotten; their domain's estimate stands in)."""
    domains: dict[str, Estimate] = field(default_factory=dict)
    tasks: OrderedDict[str, Estimate] = field(default_factory=OrderedDict)
    _median: float | None = field(default=None, init=False)

    def observe(self, domain: str, task_id: str, seconds: float, tokens: float) -> None:
        self.domains.setdefault(domain, Estimate(0.0, 0.0)).observe(seconds, tokens, self.rate)
        est = self.tasks.pop(task_id, None) or Estimate(0.0, 0.0)
        est.observe(seconds, tokens, self.rate)
        self.tasks[task_id] = est
        if len(self.tasks) > self.max_tasks:
            self.tasks.popitem(last=False)
        self._median = None

    def expected(self, domain: str, task_id: str | None = None) -> Estimate:
        if task_id is not None and task_id in self.tasks:
            return self.tasks[task_id]
        return self.domains.get(domain) or Estimate(self.prior_seconds, self.prior_tokens)

    def median_seconds(self) -> float:
        if self._median is None:
            values = [e.seconds for e in self.domains.values() if e.n]
            self._median = statistics.median(values) if values else self.prior_seconds
        return self._median

    def is_long(self, domain: str, task_id: str | None = None) -> bool:
        return self.expected(domain, task_id).seconds >= self.long_factor * self.median_seconds()

    def timeout_s(self, domain: str) -> float:
        return max(self.min_timeout_s, self.timeout_factor * self.expected(domain).seconds)

    def budget_take(self, items: list[tuple[str, str]], seconds: float | None = None, tokens: float | None = None) -> int:
        """How many of `items` ((domain, task_id), in order) fit the budget; always at least one."""
        spent_s = spent_t = 0.0
        for i, (domain, task_id) in enumerate(items):
            e = self.expected(domain, task_id)
            spent_s, spent_t = spent_s + e.seconds, spent_t + e.tokens
            if i and ((seconds is not None and spent_s > seconds) or (tokens is not None and spent_t > tokens)):
                return i
        return len(items)

    def state_dict(self) -> dict[str, Any]:
        return {"domains": {d: (e.seconds, e.tokens, e.n) for d, e in self.domains.items()},
                "tasks": [(t, e.seconds, e.tokens, e.n) for t, e in self.tasks.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.domains = {d: Estimate(*v) for d, v in state["domains"].items()}
        self.tasks = OrderedDict((t, Estimate(s, k, n)) for t, s, k, n in state["tasks"])
        self._median = None
