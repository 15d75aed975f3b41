"""The typed result of an evaluation: `EvalSummary` (suite-level figures) and `TaskResult` (one task's).

Covers: the records every consumer reads by attribute (the harness, in-training
evaluation, comparison, reports, the CLI), `Estimate` (a mean over tasks with
its interval and how many tasks it rests on), `Percentiles` (p50 / p95), and
their JSON: `to_dict()` writes exactly the keys `summary.json` and
`posttrain eval --json` have always had (`pass@1`, `pass@1_ci`,
`pass@1_tasks`, `pass^2`, `latency_p50`, ... with `tasks` last), and
`from_dict` reads them back (a stored eval's `summary.json`; `None`, which
strict JSON writes for NaN, reads as NaN).
Does not cover: computing the figures (`summary.py`) or writing files (`records.py`).

Conventions: floats are NaN where a figure has no value (no scored sample, one
task for an interval, zero cost for "solved per cost"); `pass_at` and
`pass_hat` always hold k = 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

_PASS_KEY = re.compile(r"^pass([@^])(\d+)$")


def _num(x: Any) -> Any:
    """A stored number: None (NaN written as strict JSON) reads as NaN; ints stay ints."""
    return math.nan if x is None else x


@dataclass(frozen=True)
class Estimate:
    """A mean over tasks with a two-sided confidence interval (NaN ends with fewer than two tasks)."""

    value: float
    ci_low: float
    ci_high: float
    n_tasks: int  # tasks with an estimate (for pass@k: tasks with at least k scored samples)

    @property
    def ci(self) -> list[float]:
        return [self.ci_low, self.ci_high]


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p95: float


@dataclass
class TaskResult:
    """One task's figures, its repeats pooled; only OK verdicts count towards `n` and `c`."""

    task_id: str
    n: int  # scored samples
    c: int  # of those, passing
    errors: int  # samples whose verdict errored or timed out
    pass_rate: float
    mean_score: float
    tokens_in: float
    tokens_out: float
    latency_s: float  # mean generation time per response
    cost: float
    flip_rate: float  # NaN with fewer than two repeats
    flaky: bool
    pass_at: dict[int, float] = field(default_factory=dict)  # k -> unbiased pass@k (NaN when n < k)
    pass_hat: dict[int, float] = field(default_factory=dict)  # k -> pass^k

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task_id": self.task_id, "n": self.n, "c": self.c, "errors": self.errors, "pass_rate": self.pass_rate,
            "mean_score": self.mean_score, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
            "latency_s": self.latency_s, "cost": self.cost, "flip_rate": self.flip_rate, "flaky": self.flaky,
        }
        for k, v in self.pass_at.items():
            out[f"pass@{k}"] = v
            out[f"pass^{k}"] = self.pass_hat.get(k, math.nan)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskResult:
        pass_at: dict[int, float] = {}
        pass_hat: dict[int, float] = {}
        for key, value in d.items():
            m = _PASS_KEY.match(key)
            if m:
                (pass_at if m.group(1) == "@" else pass_hat)[int(m.group(2))] = _num(value)
        return cls(
            task_id=d["task_id"], n=d["n"], c=d["c"], errors=d.get("errors", 0), pass_rate=_num(d.get("pass_rate")),
            mean_score=_num(d.get("mean_score")), tokens_in=d.get("tokens_in", 0), tokens_out=d.get("tokens_out", 0),
            latency_s=_num(d.get("latency_s")), cost=_num(d.get("cost")), flip_rate=_num(d.get("flip_rate")),
            flaky=bool(d.get("flaky", False)), pass_at=pass_at, pass_hat=pass_hat,
        )


@dataclass
class EvalSummary:
    """An evaluation's suite-level figures and its per-task results (`tasks`, in suite order)."""

    n_tasks: int
    n_tasks_unscored: int  # tasks whose every verdict errored: no estimate
    n_samples: int
    samples_per_task: int
    repeats: int
    n_errors: int
    status: dict[str, int]  # verdict status -> responses
    ks: list[int]
    confidence: float
    pass_at: dict[int, Estimate]  # k -> pass@k over tasks, interval clipped to [0, 1]
    pass_hat: dict[int, Estimate]  # k -> pass^k over tasks (every one of k draws passes)
    mean_score: Estimate  # interval not clipped: a score need not lie in [0, 1]
    passes: int  # passing responses ("solved")
    tokens_in: float
    tokens_out: float
    tokens_in_per_sample: float
    tokens_out_per_sample: float
    cost: float
    cost_per_task: float
    cost_per_solved: float
    solved_per_cost: float
    latency: Percentiles  # over all responses
    task_latency: Percentiles  # over tasks' mean latencies
    success_latency: Percentiles  # over passing responses
    seconds_per_solved: float
    verifiers: list[str]
    flip_rate: float = math.nan  # mean run-to-run flip rate; only with repeats > 1
    flaky_tasks: list[str] = field(default_factory=list)  # only with repeats > 1
    tasks: list[TaskResult] = field(default_factory=list)

    @property
    def pass1(self) -> float:
        """pass@1 (always computed): the number most tables lead with."""
        return self.pass_at[1].value

    def to_dict(self, tasks: bool = True) -> dict[str, Any]:
        """The JSON of `summary.json` and `--json`, key for key; `tasks=False` leaves the per-task list out."""
        out: dict[str, Any] = {
            "n_tasks": self.n_tasks, "n_tasks_unscored": self.n_tasks_unscored, "n_samples": self.n_samples,
            "samples_per_task": self.samples_per_task, "repeats": self.repeats, "n_errors": self.n_errors,
            "status": dict(self.status), "ks": list(self.ks), "confidence": self.confidence,
        }
        for k in self.ks:
            at, hat = self.pass_at[k], self.pass_hat[k]
            out[f"pass@{k}"], out[f"pass@{k}_ci"], out[f"pass@{k}_tasks"] = at.value, at.ci, at.n_tasks
            out[f"pass^{k}"], out[f"pass^{k}_ci"] = hat.value, hat.ci
        out["mean_score"], out["mean_score_ci"] = self.mean_score.value, self.mean_score.ci
        out.update(
            passes=self.passes, tokens_in=self.tokens_in, tokens_out=self.tokens_out,
            tokens_in_per_sample=self.tokens_in_per_sample, tokens_out_per_sample=self.tokens_out_per_sample,
            cost=self.cost, cost_per_task=self.cost_per_task, cost_per_solved=self.cost_per_solved,
            solved_per_cost=self.solved_per_cost, latency_p50=self.latency.p50, latency_p95=self.latency.p95,
            task_latency_p50=self.task_latency.p50, task_latency_p95=self.task_latency.p95,
            success_latency_p50=self.success_latency.p50, success_latency_p95=self.success_latency.p95,
            seconds_per_solved=self.seconds_per_solved, verifiers=list(self.verifiers),
        )
        if self.repeats > 1:
            out["flip_rate"], out["flaky_tasks"] = self.flip_rate, list(self.flaky_tasks)
        if tasks:
            out["tasks"] = [t.to_dict() for t in self.tasks]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalSummary:
        """A summary read back from its JSON (a stored eval's `summary.json`, or `--json` output)."""
        ks = [int(k) for k in d["ks"]]

        def estimate(key: str, n_tasks: int) -> Estimate:
            lo, hi = d.get(f"{key}_ci") or [None, None]
            return Estimate(_num(d.get(key)), _num(lo), _num(hi), n_tasks)

        # pass^k has an estimate exactly where pass@k has one (both need k scored samples), the mean score
        # wherever a task has any scored sample: the JSON keeps only the pass@k count
        pass_at = {k: estimate(f"pass@{k}", d.get(f"pass@{k}_tasks", 0)) for k in ks}
        pass_hat = {k: estimate(f"pass^{k}", pass_at[k].n_tasks) for k in ks}
        latency = {name: Percentiles(_num(d.get(f"{name}_p50")), _num(d.get(f"{name}_p95")))
                   for name in ("latency", "task_latency", "success_latency")}
        return cls(
            n_tasks=d["n_tasks"], n_tasks_unscored=d.get("n_tasks_unscored", 0), n_samples=d["n_samples"],
            samples_per_task=d.get("samples_per_task", 0), repeats=d.get("repeats", 1), n_errors=d.get("n_errors", 0),
            status=dict(d.get("status", {})), ks=ks, confidence=d.get("confidence", 0.95),
            pass_at=pass_at, pass_hat=pass_hat,
            mean_score=estimate("mean_score", d["n_tasks"] - d.get("n_tasks_unscored", 0)),
            passes=d.get("passes", 0), tokens_in=d.get("tokens_in", 0), tokens_out=d.get("tokens_out", 0),
            tokens_in_per_sample=_num(d.get("tokens_in_per_sample")),
            tokens_out_per_sample=_num(d.get("tokens_out_per_sample")),
            cost=_num(d.get("cost")), cost_per_task=_num(d.get("cost_per_task")),
            cost_per_solved=_num(d.get("cost_per_solved")), solved_per_cost=_num(d.get("solved_per_cost")),
            latency=latency["latency"], task_latency=latency["task_latency"],
            success_latency=latency["success_latency"], seconds_per_solved=_num(d.get("seconds_per_solved")),
            verifiers=list(d.get("verifiers", [])), flip_rate=_num(d.get("flip_rate")),
            flaky_tasks=list(d.get("flaky_tasks", [])), tasks=[TaskResult.from_dict(t) for t in d.get("tasks", [])],
        )
