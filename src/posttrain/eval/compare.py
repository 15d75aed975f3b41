"""Item-paired comparison of two evaluations of one suite, and the regression gate built on it.

Covers: pairing tasks by id; the change in pass@1 (B - A) with a paired
bootstrap interval over tasks; McNemar's exact test when each side has one
sample per task; per-task Fisher exact tests with Benjamini-Hochberg
control, listing tasks that regressed or improved; the cost and latency of
each side next to its accuracy (the "standard vs high-speed model" view);
and the verdict `regression`, true when B is significantly worse overall
or any task regressed after FDR control.
Does not cover: the statistics themselves (see `stats.py`) or printing.

A is the baseline, B the candidate: "regressed" always means B is worse.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from posttrain.eval.metrics import Interval, Price
from posttrain.eval.records import EvalRun
from posttrain.eval.results import EvalSummary
from posttrain.eval.stats import (
    benjamini_hochberg,
    fisher_exact,
    mcnemar_exact,
    paired_bootstrap_ci,
)
from posttrain.eval.summary import summarize
from posttrain.tasks.jsonl import TaskFileError


@dataclass
class TaskChange:
    task_id: str
    a_n: int
    a_c: int
    b_n: int
    b_c: int
    p: float  # Fisher's exact, two-sided
    q: float  # Benjamini-Hochberg adjusted

    @property
    def a_rate(self) -> float:
        return self.a_c / self.a_n if self.a_n else math.nan

    @property
    def b_rate(self) -> float:
        return self.b_c / self.b_n if self.b_n else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "a_rate": self.a_rate, "b_rate": self.b_rate}


@dataclass
class Comparison:
    a: str
    b: str
    suite: str
    alpha: float
    n_paired: int
    only_a: list[str]
    only_b: list[str]
    a_pass1: float
    b_pass1: float
    diff: Interval  # B - A in pass@1, paired bootstrap over tasks
    mcnemar: dict[str, float] | None  # {"a_only": b, "b_only": c, "p": p} for single-sample runs
    regressed: list[TaskChange]
    improved: list[TaskChange]
    sides: dict[str, dict[str, float]]  # "A"/"B" -> accuracy, cost and latency figures
    regression: bool
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["diff"] = self.diff.as_dict()
        d["regressed"] = [t.to_dict() for t in self.regressed]
        d["improved"] = [t.to_dict() for t in self.improved]
        return d


def side_figures(s: EvalSummary) -> dict[str, float]:
    """One side's accuracy, cost and latency figures, under the names `compare --json` has always used."""
    return {
        "pass@1": s.pass1, "mean_score": s.mean_score.value, "cost": s.cost, "cost_per_task": s.cost_per_task,
        "cost_per_solved": s.cost_per_solved, "solved_per_cost": s.solved_per_cost, "tokens_in": s.tokens_in,
        "tokens_out": s.tokens_out, "latency_p50": s.latency.p50, "latency_p95": s.latency.p95,
        "task_latency_p50": s.task_latency.p50, "task_latency_p95": s.task_latency.p95,
        "success_latency_p50": s.success_latency.p50, "success_latency_p95": s.success_latency.p95,
        "seconds_per_solved": s.seconds_per_solved,
    }


def _counts(run: EvalRun) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = {}
    for r in run.records:
        nc = out.setdefault(r.task_id, [0, 0])
        if r.ok:
            nc[0] += 1
            nc[1] += int(r.passed)
    return {k: (v[0], v[1]) for k, v in out.items()}


def compare(
    a: EvalRun,
    b: EvalRun,
    alpha: float = 0.05,
    prices: tuple[Price | None, Price | None] = (None, None),
    reps: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Compare candidate `b` against baseline `a` (same suite, paired by task id)."""
    suite_a, suite_b = a.meta.get("suite"), b.meta.get("suite")
    if suite_a != suite_b:
        raise TaskFileError(f"compare: {a.name} evaluated suite {suite_a!r} but {b.name} evaluated {suite_b!r}")
    ca, cb = _counts(a), _counts(b)
    paired = [t for t in ca if t in cb and ca[t][0] > 0 and cb[t][0] > 0]
    if not paired:
        raise TaskFileError(f"compare: {a.name} and {b.name} share no scored tasks")
    def rate(nc: tuple[int, int]) -> float:
        return nc[1] / nc[0]

    diff = paired_bootstrap_ci([rate(ca[t]) for t in paired], [rate(cb[t]) for t in paired], 1 - alpha, reps, seed)

    mcnemar = None
    if all(ca[t][0] == 1 and cb[t][0] == 1 for t in paired):
        a_only = sum(ca[t][1] == 1 and cb[t][1] == 0 for t in paired)
        b_only = sum(ca[t][1] == 0 and cb[t][1] == 1 for t in paired)
        mcnemar = {"a_only": a_only, "b_only": b_only, "p": mcnemar_exact(a_only, b_only)}

    pvals = [fisher_exact([[ca[t][1], ca[t][0] - ca[t][1]], [cb[t][1], cb[t][0] - cb[t][1]]]) for t in paired]
    qvals = benjamini_hochberg(pvals)
    changes = [TaskChange(t, *ca[t], *cb[t], p, q) for t, p, q in zip(paired, pvals, qvals)]
    regressed = sorted((c for c in changes if c.q <= alpha and c.b_rate < c.a_rate), key=lambda c: c.q)
    improved = sorted((c for c in changes if c.q <= alpha and c.b_rate > c.a_rate), key=lambda c: c.q)

    reasons = []
    if diff.hi < 0:
        reasons.append(f"pass@1 fell by {-diff.mean:.3f} (paired {1 - alpha:.0%} interval {diff.lo:+.3f}..{diff.hi:+.3f})")
    if mcnemar and mcnemar["p"] <= alpha and mcnemar["a_only"] > mcnemar["b_only"]:
        reasons.append(f"McNemar p = {mcnemar['p']:.3g}: {mcnemar['a_only']} tasks lost, {mcnemar['b_only']} gained")
    if regressed:
        reasons.append(f"{len(regressed)} task(s) regressed at FDR {alpha}")

    keep = set(paired)
    sides = {}
    for side, run, price in (("A", a, prices[0]), ("B", b, prices[1])):
        s = summarize([r for r in run.records if r.task_id in keep], [1], price)
        sides[side] = {"name": run.name, **side_figures(s)}
    return Comparison(
        a=a.name, b=b.name, suite=str(suite_a), alpha=alpha, n_paired=len(paired),
        only_a=sorted(set(ca) - set(cb)), only_b=sorted(set(cb) - set(ca)),
        a_pass1=sides["A"]["pass@1"], b_pass1=sides["B"]["pass@1"], diff=diff, mcnemar=mcnemar,
        regressed=regressed, improved=improved, sides=sides, regression=bool(reasons), reasons=reasons,
    )
