"""From graded records to the numbers a user reads: per-task results and suite-level metrics.

Covers: grouping records by task (repeats pooled), per-task pass@k / pass^k /
mean score / tokens / latency / cost / run-to-run flip rate, and the suite
summary: pass@k and pass^k averaged over tasks with clustered intervals,
mean score, infrastructure errors kept apart, token totals, cost, cost per
solved task and solved tasks per unit cost, latency p50/p95 over all
responses and over successful ones, and flaky tasks.
Does not cover: the formulas themselves (see `metrics.py`).

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
from typing import Any

from posttrain.eval.metrics import (
    Price,
    pass_at_k,
    pass_hat_k,
    percentile,
    safe_ratio,
    task_mean_ci,
)
from posttrain.eval.records import SampleRecord


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


def _unit(lo: float, hi: float) -> list[float]:
    return [lo if math.isnan(lo) else max(0.0, lo), hi if math.isnan(hi) else min(1.0, hi)]


def task_result(task_id: str, recs: Sequence[SampleRecord], ks: Sequence[int], price: Price) -> dict[str, Any]:
    ok = [r for r in recs if r.ok]
    n, c = len(ok), sum(r.passed for r in ok)
    tokens_in = sum(r.tokens_in or 0 for r in recs)
    tokens_out = sum(r.tokens_out or 0 for r in recs)
    latency = [r.latency_s for r in recs if r.latency_s is not None]
    by_repeat: dict[int, dict[int, bool]] = defaultdict(dict)
    for r in recs:
        by_repeat[r.repeat][r.sample] = bool(r.passed and r.ok)
    flips = flip_rate(by_repeat)
    out: dict[str, Any] = {
        "task_id": task_id,
        "n": n,
        "c": c,
        "errors": len(recs) - n,
        "pass_rate": c / n if n else math.nan,
        "mean_score": sum(r.score for r in ok) / n if n else math.nan,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "latency_s": sum(latency) / len(latency) if latency else math.nan,
        "cost": price.cost(tokens_in, tokens_out, sum(latency)),
        "flip_rate": flips,
        "flaky": bool(flips > 0) if not math.isnan(flips) else False,
    }
    for k in ks:
        out[f"pass@{k}"] = pass_at_k(n, c, k) if n else math.nan
        out[f"pass^{k}"] = pass_hat_k(n, c, k) if n else math.nan
    return out


def summarize(
    records: Iterable[SampleRecord],
    ks: Sequence[int] = (1,),
    price: Price | None = None,
    task_order: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """The suite-level metrics and per-task results (under `tasks`) of a list of records."""
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
    out: dict[str, Any] = {
        "n_tasks": len(tasks),
        "n_tasks_unscored": sum(1 for t in tasks if t["n"] == 0),
        "n_samples": len(records),
        "samples_per_task": max((len(v) for v in by_task.values()), default=0),
        "repeats": len({r.repeat for r in records}) or 0,
        "n_errors": len(records) - len(ok),
        "status": dict(Counter(r.status for r in records)),
        "ks": ks,
        "confidence": confidence,
    }
    for k in ks:
        iv = task_mean_ci([t[f"pass@{k}"] for t in tasks], confidence)
        out[f"pass@{k}"] = iv.mean
        out[f"pass@{k}_ci"] = _unit(iv.lo, iv.hi)  # the truth lies in [0, 1]: clipping never loses coverage
        out[f"pass@{k}_tasks"] = iv.n  # tasks with at least k scored samples
        hat = task_mean_ci([t[f"pass^{k}"] for t in tasks], confidence)
        out[f"pass^{k}"] = hat.mean
        out[f"pass^{k}_ci"] = _unit(hat.lo, hat.hi)
    score = task_mean_ci([t["mean_score"] for t in tasks], confidence)
    out["mean_score"], out["mean_score_ci"] = score.mean, [score.lo, score.hi]
    task_latency = [t["latency_s"] for t in tasks]
    success_latency = [r.latency_s for r in ok if r.passed and r.latency_s is not None]
    out.update(
        passes=passes,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        tokens_in_per_sample=safe_ratio(tokens_in, len(records)),
        tokens_out_per_sample=safe_ratio(tokens_out, len(records)),
        cost=cost,
        cost_per_task=safe_ratio(cost, len(tasks)),
        cost_per_solved=safe_ratio(cost, passes),
        solved_per_cost=safe_ratio(passes, cost),
        latency_p50=percentile(latencies, 50),
        latency_p95=percentile(latencies, 95),
        task_latency_p50=percentile(task_latency, 50),
        task_latency_p95=percentile(task_latency, 95),
        success_latency_p50=percentile(success_latency, 50),
        success_latency_p95=percentile(success_latency, 95),
        seconds_per_solved=safe_ratio(sum(latencies), passes),
        verifiers=sorted({r.verifier for r in records if r.verifier}),
    )
    if out["repeats"] > 1:
        flips = [t["flip_rate"] for t in tasks if not math.isnan(t["flip_rate"])]
        out["flip_rate"] = sum(flips) / len(flips) if flips else math.nan
        out["flaky_tasks"] = [t["task_id"] for t in tasks if t["flaky"]]
    out["tasks"] = tasks
    return out


def headline(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without the per-task list (for tables and the run store)."""
    return {k: v for k, v in summary.items() if k != "tasks"}
