"""The run monitors' checks: one small pure function per failure, over a step series, with its thresholds.

Covers: entropy collapse, KL blow-up, response-length drift, reward hacking (training reward rising while a
held-out score falls), verifier-error spikes, gradient-norm spikes, a starved domain (no informative groups),
sandbox failures and an agent's call format breaking down. Each takes plain lists (oldest first; the last
value is the newest step) and returns a `Finding` when the failure is there at the newest step, else None.
Thresholds are the `MonitorsConfig` fields (`config.py`), documented there.
Does not cover: which metric feeds which check, de-duplication or what happens on an alert (`watch.py`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class MonitorKind(str, Enum):
    """What a monitor watches for (the `kind` of the alert it raises)."""

    ENTROPY_COLLAPSE = "entropy_collapse"
    KL_BLOWUP = "kl_blowup"
    LENGTH_DRIFT = "length_drift"
    REWARD_HACKING = "reward_hacking"
    VERIFIER_ERRORS = "verifier_errors"
    GRAD_NORM_SPIKE = "grad_norm_spike"
    DOMAIN_STARVED = "domain_starved"
    SANDBOX_FAILURES = "sandbox_failures"
    FORMAT_COLLAPSE = "format_collapse"


@dataclass(frozen=True)
class Finding:
    """What a check saw at the newest step: the value it judged and the threshold it crossed."""

    kind: MonitorKind
    message: str
    value: float
    threshold: float


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def baseline_and_recent(values: Sequence[float], baseline: int, window: int) -> tuple[float, float] | None:
    """(the median of the first `baseline` values, the mean of the last `window`), or None until there are
    `baseline + window` finite values: what the checks that compare a series with its own start judge."""
    xs = _finite(values)
    if len(xs) < baseline + window:
        return None
    return statistics.median(xs[:baseline]), _mean(xs[-window:])


def entropy_collapse(entropy: Sequence[float], baseline: int, window: int, drop: float, floor: float) -> Finding | None:
    """Mean policy entropy over the last `window` steps below `drop` x its baseline (the median of the first
    `baseline` steps), or below the absolute `floor` (nats per token): the policy has become near-deterministic."""
    seen = baseline_and_recent(entropy, baseline, window)
    if seen is None:
        return None
    base, recent = seen
    limit = max(drop * base, floor)
    if recent < limit:
        return Finding(MonitorKind.ENTROPY_COLLAPSE, f"entropy {recent:.4g} over the last {window} steps is below "
                       f"{limit:.4g} ({drop:g} x its baseline {base:.4g}, floor {floor:g})", recent, limit)
    return None


def spike(values: Sequence[float], window: int, factor: float, floor: float) -> tuple[float, float] | None:
    """(newest, limit) when the newest value exceeds `factor` x the median of the `window` values before it and
    the absolute `floor`; None otherwise or with too short a history."""
    xs = _finite(values)
    if len(xs) < window + 1:
        return None
    limit = max(factor * statistics.median(xs[-window - 1:-1]), floor)
    return (xs[-1], limit) if xs[-1] > limit else None


def kl_blowup(kl: Sequence[float], window: int, factor: float, kl_max: float, floor: float) -> Finding | None:
    """KL to the reference above `kl_max` (nats per token), or jumping above `factor` x its recent median
    (and above `floor`): the policy is running away from the reference."""
    xs = _finite(kl)
    if xs and xs[-1] > kl_max:
        return Finding(MonitorKind.KL_BLOWUP, f"KL to the reference {xs[-1]:.4g} exceeds {kl_max:g}", xs[-1], kl_max)
    hit = spike(xs, window, factor, floor)
    if hit is not None:
        return Finding(MonitorKind.KL_BLOWUP, f"KL to the reference jumped to {hit[0]:.4g} (over {factor:g} x its "
                       f"median of the previous {window} steps)", *hit)
    return None


def length_drift(lengths: Sequence[float], baseline: int, window: int, ratio: float) -> Finding | None:
    """Mean response length over the last `window` steps more than `ratio` x, or less than 1/`ratio` x, its
    baseline (the median of the first `baseline` steps)."""
    seen = baseline_and_recent(lengths, baseline, window)
    if seen is None or seen[0] <= 0:
        return None
    base, recent = seen
    r = recent / base
    if r > ratio or r < 1 / ratio:
        return Finding(MonitorKind.LENGTH_DRIFT, f"mean response length {recent:.4g} tokens is {r:.2f} x its baseline "
                       f"{base:.4g} (allowed 1/{ratio:g} .. {ratio:g})", r, ratio if r > ratio else 1 / ratio)
    return None


def reward_hacking(reward: Sequence[tuple[int, float]], held_out: Sequence[tuple[int, float]], window: int,
                   rise: float, drop: float, smooth: int = 1) -> Finding | None:
    """Training reward up by >= `rise` while a held-out score (measured by a strict, independent check) is down by
    >= `drop` from its best: compared are the mean reward over the `window` steps up to the held-out best and
    over the last `window` steps, and the newest held-out value against that best. Held-out values are first
    averaged over `smooth` consecutive evaluations (the best of single noisy evaluations is biased up: one lucky
    evaluation followed by an unlucky one would look like a fall). Both series are (step, value)."""
    raw = [(s, v) for s, v in held_out if v is not None and math.isfinite(v)]
    ho = [(raw[i][0], _mean([v for _, v in raw[i - smooth + 1:i + 1]])) for i in range(smooth - 1, len(raw))]
    if len(ho) < 2:
        return None
    best_step, best = max(ho, key=lambda sv: (sv[1], sv[0]))  # the latest of equal bests
    last_step, last = ho[-1]
    if last_step <= best_step or best - last < drop:
        return None  # (decided before reading the long reward series: the usual case, every step)
    rw = [(s, v) for s, v in reward if v is not None and math.isfinite(v)]
    since = [v for s, v in rw if s > best_step]
    # the reward the held-out best was measured at; the first steps' when that best is the initial model's
    before = [v for s, v in rw if s <= best_step][-window:] or since[:window]
    after = since[-window:]
    if len(since) < 2:
        return None
    gain = _mean(after) - _mean(before)
    if gain >= rise:
        return Finding(MonitorKind.REWARD_HACKING, f"training reward rose {gain:+.3f} since step {best_step} while "
                       f"held-out fell {last - best:+.3f} ({best:.3f} -> {last:.3f}): the reward may be hackable",
                       best - last, drop)
    return None


def rate_above(counts: Sequence[float], totals: Sequence[float], window: int, limit: float,
               kind: MonitorKind, what: str) -> Finding | None:
    """The share counts/totals over the last `window` steps at or above `limit` (`what` names the counted thing)."""
    pairs = [(c, t) for c, t in zip(counts, totals) if c is not None and t]
    if len(pairs) < window:
        return None
    c, t = sum(p[0] for p in pairs[-window:]), sum(p[1] for p in pairs[-window:])
    share = c / t
    if share >= limit:
        return Finding(kind, f"{what}: {share:.1%} of the last {window} steps' samples (limit {limit:.0%})", share, limit)
    return None


def grad_norm_spike(grad_norm: Sequence[float], window: int, factor: float, floor: float) -> Finding | None:
    """The newest gradient norm (before clipping) above `factor` x the median of the `window` before it (and `floor`)."""
    hit = spike(grad_norm, window, factor, floor)
    if hit is None:
        return None
    return Finding(MonitorKind.GRAD_NORM_SPIKE, f"gradient norm {hit[0]:.4g} is over {factor:g} x its median of the "
                   f"previous {window} steps", *hit)


def domain_starved(informative: Sequence[float], patience: int, domain: str) -> Finding | None:
    """No informative group (reward variance) in `domain` for the last `patience` steps it was sampled in."""
    xs = _finite(informative)
    if len(xs) < patience or any(x > 0 for x in xs[-patience:]):
        return None
    return Finding(MonitorKind.DOMAIN_STARVED, f"domain {domain}: no informative group (all rewards equal) in the last "
                   f"{patience} steps", 0.0, float(patience))


def sandbox_failures(failures: Sequence[float], window: int, limit: float) -> Finding | None:
    """At least `limit` sandbox worker failures over the last `window` steps (each rebuilt a worker)."""
    xs = _finite(failures)
    total = sum(xs[-window:])
    if xs and total >= limit:
        return Finding(MonitorKind.SANDBOX_FAILURES, f"{total:g} sandbox worker failures in the last {window} steps "
                       f"(limit {limit:g})", total, limit)
    return None


def format_collapse(rates: Sequence[float], baseline: int, window: int, factor: float, limit: float) -> Finding | None:
    """An agent's malformed-call rate over the last `window` steps at or above `limit` and at or above `factor` x its
    baseline (the median of the first `baseline` steps): the call format is breaking down, and a policy whose
    replies no longer parse gets no reward to recover with (too high a learning rate does this within a few steps)."""
    seen = baseline_and_recent(rates, baseline, window)
    if seen is None:
        return None
    base, recent = seen
    threshold = max(limit, factor * base)
    if recent >= threshold:
        return Finding(MonitorKind.FORMAT_COLLAPSE, f"malformed calls {recent:.1%} of the last {window} steps' turns "
                       f"(baseline {base:.1%}; limit {threshold:.1%}: {factor:g} x the baseline, at least {limit:.0%})",
                       recent, threshold)
    return None
