"""Which series feed which monitor, during a run: `Watch` keeps the step and held-out series and raises alerts.

Covers: `Watch.observe_step` (after each step's metrics, with the scheduler's per-domain state when the store
has it) and `Watch.observe_eval` (after each held-out evaluation) run every enabled check of `checks.py` on the
series so far and return the new `Alert`s; an alert fires once when its condition appears and re-arms after the
condition has cleared, so a persisting failure is one alert, not one per step. `Watch.load` rebuilds the series
of a resumed run from its store; `Watch.replay` runs a stored run through the monitors as they are now (the alerts
it would raise), and `stored_scores` turns the store's evaluation rows into the scores a trainer feeds.
Does not cover: the checks themselves (`checks.py`) or what an alert does (the trainer warns, stores it, and
stops when `train.on_alert = "stop"`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from posttrain.config import MonitorsConfig
from posttrain.monitor import checks
from posttrain.monitor.checks import Finding, MonitorKind

HELD_OUT = "greedy_accuracy"  # the in-training held-out metric (`Trainer.evaluate`); suites add "<name>/pass@1"


def stored_scores(evals: Iterable[tuple[int, str, Mapping[str, float]]]) -> list[tuple[int, dict[str, float]]]:
    """The run store's evaluation rows (`RunStore.evals()`: step, name, metrics) as the held-out scores the trainer
    fed `observe_eval` when they ran: the held-out split's greedy accuracy, and each suite's pass@1."""
    return [(s, {HELD_OUT if n == "held_out" else f"{n}/pass@1": m.get("pass@1", m.get(HELD_OUT, 0.0))})
            for s, n, m in evals]


class MonitorAlert(UserWarning):
    """The warning category of a monitor's alert (a caller that shows alerts its own way can silence it)."""


@dataclass(frozen=True)
class Alert:
    """One monitor alert as the run store keeps it (`RunStore.add_alert(alert.to_dict())`)."""

    step: int
    kind: str  # a `MonitorKind` value
    subject: str  # the series or domain it is about
    message: str
    value: float
    threshold: float
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "source": "monitor"}


def held_out_keys(metrics: Mapping[str, float]) -> list[str]:
    """The held-out scores an evaluation reported: the overall one and each suite's pass@1."""
    return [k for k in metrics if k == HELD_OUT or k.endswith("/pass@1")]


class Watch:
    """The monitors of one run.

    >>> watch = Watch(MonitorsConfig(), samples_per_group=8)
    >>> watch.observe_step(1, {"entropy": 0.5, "reward": 0.2})
    []
    """

    def __init__(self, cfg: MonitorsConfig, samples_per_group: int) -> None:
        self.cfg = cfg
        self.enabled = {MonitorKind(k) for k in cfg.enabled}
        self.n = samples_per_group
        self.series: dict[str, list[tuple[int, float]]] = {}
        self.domains: dict[str, list[tuple[int, dict[str, float]]]] = {}
        self.held: dict[str, list[tuple[int, float]]] = {}
        self.active: set[tuple[MonitorKind, str]] = set()

    def load(self, steps: Iterable[tuple[int, Mapping[str, float]]], evals: Iterable[tuple[int, Mapping[str, float]]],
             domains: Iterable[tuple[int, str, Mapping[str, float]]] = ()) -> None:
        """The series of a resumed run, from its store (no alerts: those were raised when the steps ran)."""
        for step, m in steps:
            self._add_step(step, m)
        for step, m in evals:
            self._add_eval(step, m)
        for step, name, d in domains:
            self.domains.setdefault(name, []).append((step, dict(d)))

    def replay(self, steps: Iterable[tuple[int, Mapping[str, float]]],
               evals: Iterable[tuple[int, Mapping[str, float]]]) -> list[Alert]:
        """Every alert a run with these step metrics and held-out scores (`stored_scores`) raises, in the order a
        trainer meets them: an evaluation at step s after step s's metrics (one at step 0 before any step)."""
        by_step: dict[int, list[Mapping[str, float]]] = {}
        for step, m in evals:
            by_step.setdefault(step, []).append(m)
        alerts = [a for m in by_step.pop(0, []) for a in self.observe_eval(0, m)]
        for step, metrics in steps:
            alerts += self.observe_step(step, metrics)
            alerts += [a for m in by_step.pop(step, []) for a in self.observe_eval(step, m)]
        return alerts

    def _add_step(self, step: int, metrics: Mapping[str, float]) -> None:
        for k, v in metrics.items():
            if isinstance(v, (int, float)):
                self.series.setdefault(k, []).append((step, float(v)))

    def _add_eval(self, step: int, metrics: Mapping[str, float]) -> None:
        for k in held_out_keys(metrics):
            self.held.setdefault(k, []).append((step, float(metrics[k])))

    def observe_step(self, step: int, metrics: Mapping[str, float],
                     domains: Mapping[str, Mapping[str, float]] | None = None) -> list[Alert]:
        """Add a step's metrics (and the scheduler's per-domain state) and return the alerts it raises."""
        self._add_step(step, metrics)
        for name, d in (domains or {}).items():
            self.domains.setdefault(name, []).append((step, dict(d)))
        return self._fire(step, self.findings())

    def observe_eval(self, step: int, metrics: Mapping[str, float]) -> list[Alert]:
        """Add a held-out evaluation's scores and return the alerts it raises."""
        self._add_eval(step, metrics)
        return self._fire(step, self.findings())

    def values(self, key: str) -> list[float]:
        return [v for _, v in self.series.get(key, [])]

    def findings(self) -> list[tuple[str, Finding]]:
        """(subject, finding) for every failure present at the newest step."""
        c, on = self.cfg, self.enabled
        found: list[tuple[str, Finding | None]] = []
        if MonitorKind.ENTROPY_COLLAPSE in on:
            found.append(("entropy", checks.entropy_collapse(self.values("entropy"), c.baseline, c.window,
                                                             c.entropy_drop, c.entropy_floor)))
        if MonitorKind.KL_BLOWUP in on:
            found.append(("kl", checks.kl_blowup(self.values("kl"), c.spike_window, c.kl_factor, c.kl_max, c.kl_floor)))
        if MonitorKind.LENGTH_DRIFT in on:
            found.append(("completion_tokens", checks.length_drift(self.values("completion_tokens"), c.baseline,
                                                                   c.window, c.length_ratio)))
        if MonitorKind.REWARD_HACKING in on:
            found += self._hacking()
        if MonitorKind.VERIFIER_ERRORS in on:
            totals = [v * self.n for v in self.values("groups_sampled")]
            found.append(("verifier_errors", checks.rate_above(
                self.values("verifier_errors"), totals, c.window, c.verifier_error_rate, MonitorKind.VERIFIER_ERRORS,
                "verifier errors")))
        if MonitorKind.GRAD_NORM_SPIKE in on:
            found.append(("grad_norm", checks.grad_norm_spike(self.values("grad_norm"), c.spike_window, c.grad_factor,
                                                              c.grad_floor)))
        if MonitorKind.DOMAIN_STARVED in on:
            found += self._starved()
        if MonitorKind.SANDBOX_FAILURES in on:
            found.append(("sandbox", checks.sandbox_failures(self.values("sandbox_worker_failures"), c.window,
                                                             c.sandbox_limit)))
        if MonitorKind.FORMAT_COLLAPSE in on and "agent/format_error_rate" in self.series:
            found.append(("agent/format_error_rate", checks.format_collapse(
                self.values("agent/format_error_rate"), c.baseline, c.window, c.format_factor, c.format_error_rate)))
        return [(s, f) for s, f in found if f is not None]

    def _hacking(self) -> list[tuple[str, Finding | None]]:
        """The run's reward against every held-out score; with per-domain state, a domain's pass rate against its
        own held-out suite (`held_out:<domain>/pass@1`)."""
        c = self.cfg
        out: list[tuple[str, Finding | None]] = [
            (key, checks.reward_hacking(self.series.get("reward", []), held, c.hack_window, c.hack_rise, c.hack_drop,
                                        c.hack_smooth))
            for key, held in self.held.items()]
        for name, rows in self.domains.items():
            held = self.held.get(f"held_out:{name}/pass@1")
            if held:
                rate = [(s, d["pass_rate"]) for s, d in rows if "pass_rate" in d]
                out.append((name, checks.reward_hacking(rate, held, c.hack_window, c.hack_rise, c.hack_drop,
                                                        c.hack_smooth)))
        return out

    def _starved(self) -> list[tuple[str, Finding | None]]:
        """Per domain from the scheduler's state when the store has it; else the run's one pool of groups."""
        p = self.cfg.starve_patience
        if self.domains:
            return [(name, checks.domain_starved([d.get("informative_frac", 1.0) for _, d in rows], p, name))
                    for name, rows in self.domains.items()]
        informative = [1.0 - v for v in self.values("zero_variance_frac")]
        return [("all", checks.domain_starved(informative, p, "(all tasks)"))]

    def _fire(self, step: int, found: list[tuple[str, Finding]]) -> list[Alert]:
        now = {(f.kind, subject): f for subject, f in found}
        self.active &= set(now)  # a cleared condition re-arms
        alerts = [Alert(step, f.kind.value, subject, f"step {step}: {f.message}", f.value, f.threshold)
                  for (kind, subject), f in now.items() if (kind, subject) not in self.active]
        self.active |= set(now)
        return alerts
