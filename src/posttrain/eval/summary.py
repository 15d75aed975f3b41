"""From graded records to the numbers a user reads: per-task results and suite-level metrics.

Covers: grouping records by task (repeats pooled), per-task pass@k / pass^k /
mean score / tokens / latency / cost / run-to-run flip rate, and the suite
summary: pass@k and pass^k averaged over tasks with clustered intervals,
mean score, infrastructure errors kept apart, token totals, cost, cost per
solved task and solved tasks per unit cost, latency p50/p95 over all
responses and over successful ones, and flaky tasks.
Does not cover: the formulas themselves (see `metrics.py`) or the records'
JSON (`results.py`: `EvalSummary.to_dict` is `summary.json`).

Conventions: only verdicts with status OK count towards n and c; a task
whose every verdict errored has no estimate (NaN) and is counted in
`n_tasks_unscored`. "Solved" counts passing responses, so cost per solved
task = total cost / passing responses (the expected spend per success when
sampling once per attempt).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from posttrain.eval.metrics import (
    Price,
    pass_at_k,
    pass_hat_k,
    percentile,
    safe_ratio,
    task_mean_ci,
)
from posttrain.eval.records import SampleRecord
from posttrain.eval.results import Estimate, EvalSummary, Percentiles, TaskResult


def flip_rate(outcomes_by_repeat: dict[int, dict[int, bool]]) -> float:
    """Share of (repeat, repeat) pairs whose outcome differs, averaged over the sample slots all repeats have.

    `outcomes_by_repeat[r][j]` is whether sample j of repeat r passed. NaN with fewer than two repeats.
    """
    repeats = sorted(outcomes_by_repeat)
    if len(repeats) < 2:
        return math.nan
    slots = set.intersection(*(set(outcomes_by_repeat[r]) for r in repeats))
    if not slots:
        return math.nan
    pairs = len(repeats) * (len(repeats) - 1) / 2
    rates = []
    for j in sorted(slots):
        hits = sum(outcomes_by_repeat[r][j] for r in repeats)
        rates.append(hits * (len(repeats) - hits) / pairs)
    return sum(rates) / len(rates)


def _unit(lo: float, hi: float) -> tuple[float, float]:
    return lo if math.isnan(lo) else max(0.0, lo), hi if math.isnan(hi) else min(1.0, hi)


def _estimate(values: Sequence[float], confidence: float, clip: bool) -> Estimate:
    iv = task_mean_ci(values, confidence)
    lo, hi = _unit(iv.lo, iv.hi) if clip else (iv.lo, iv.hi)  # pass rates lie in [0, 1]: clipping never loses coverage
    return Estimate(iv.mean, lo, hi, iv.n)


def task_result(task_id: str, recs: Sequence[SampleRecord], ks: Sequence[int], price: Price) -> TaskResult:
    ok = [r for r in recs if r.ok]
    n, c = len(ok), sum(r.passed for r in ok)
    tokens_in = sum(r.tokens_in or 0 for r in recs)
    tokens_out = sum(r.tokens_out or 0 for r in recs)
    latency = [r.latency_s for r in recs if r.latency_s is not None]
    by_repeat: dict[int, dict[int, bool]] = defaultdict(dict)
    for r in recs:
        by_repeat[r.repeat][r.sample] = bool(r.passed and r.ok)
    flips = flip_rate(by_repeat)
    return TaskResult(
        task_id=task_id,
        n=n,
        c=c,
        errors=len(recs) - n,
        pass_rate=c / n if n else math.nan,
        mean_score=sum(r.score for r in ok) / n if n else math.nan,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        latency_s=sum(latency) / len(latency) if latency else math.nan,
        cost=price.cost(tokens_in, tokens_out, sum(latency)),
        flip_rate=flips,
        flaky=bool(flips > 0) if not math.isnan(flips) else False,
        pass_at={k: pass_at_k(n, c, k) if n else math.nan for k in ks},
        pass_hat={k: pass_hat_k(n, c, k) if n else math.nan for k in ks},
    )


def summarize(
    records: Iterable[SampleRecord],
    ks: Sequence[int] = (1,),
    price: Price | None = None,
    task_order: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> EvalSummary:
    """The suite-level metrics and per-task results (`tasks`, in `task_order` then by id) of a list of records."""
    price = price or Price()
    ks = sorted(set(ks) | {1})
    by_task: dict[str, list[SampleRecord]] = defaultdict(list)
    records = list(records)
    for r in records:
        by_task[r.task_id].append(r)
    order = [t for t in (task_order or []) if t in by_task] + sorted(t for t in by_task if t not in set(task_order or []))
    tasks = [task_result(t, by_task[t], ks, price) for t in order]

    ok = [r for r in records if r.ok]
    passes = sum(r.passed for r in ok)
    tokens_in = sum(r.tokens_in or 0 for r in records)
    tokens_out = sum(r.tokens_out or 0 for r in records)
    latencies = [r.latency_s for r in records if r.latency_s is not None]
    cost = price.cost(tokens_in, tokens_out, sum(latencies))
    task_latency = [t.latency_s for t in tasks]
    success_latency = [r.latency_s for r in ok if r.passed and r.latency_s is not None]
    repeats = len({r.repeat for r in records}) or 0
    flips = [t.flip_rate for t in tasks if not math.isnan(t.flip_rate)]
    return EvalSummary(
        n_tasks=len(tasks),
        n_tasks_unscored=sum(1 for t in tasks if t.n == 0),
        n_samples=len(records),
        samples_per_task=max((len(v) for v in by_task.values()), default=0),
        repeats=repeats,
        n_errors=len(records) - len(ok),
        status=dict(Counter(r.status for r in records)),
        ks=ks,
        confidence=confidence,
        pass_at={k: _estimate([t.pass_at[k] for t in tasks], confidence, clip=True) for k in ks},
        pass_hat={k: _estimate([t.pass_hat[k] for t in tasks], confidence, clip=True) for k in ks},
        mean_score=_estimate([t.mean_score for t in tasks], confidence, clip=False),
        passes=passes,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        tokens_in_per_sample=safe_ratio(tokens_in, len(records)),
        tokens_out_per_sample=safe_ratio(tokens_out, len(records)),
        cost=cost,
        cost_per_task=safe_ratio(cost, len(tasks)),
        cost_per_solved=safe_ratio(cost, passes),
        solved_per_cost=safe_ratio(passes, cost),
        latency=Percentiles(percentile(latencies, 50), percentile(latencies, 95)),
        task_latency=Percentiles(percentile(task_latency, 50), percentile(task_latency, 95)),
        success_latency=Percentiles(percentile(success_latency, 50), percentile(success_latency, 95)),
        seconds_per_solved=safe_ratio(sum(latencies), passes),
        verifiers=sorted({r.verifier for r in records if r.verifier}),
        flip_rate=(sum(flips) / len(flips) if flips else math.nan) if repeats > 1 else math.nan,
        flaky_tasks=[t.task_id for t in tasks if t.flaky] if repeats > 1 else [],
        tasks=tasks,
    )
