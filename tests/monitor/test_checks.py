"""Every monitor check catches its planted failure and stays quiet on a clean series of the same shape."""

from __future__ import annotations

import random

import pytest

from posttrain.config import MonitorsConfig
from posttrain.monitor import checks
from posttrain.monitor.checks import MonitorKind

C = MonitorsConfig()


def noisy(level: float, n: int, rel: float = 0.1, seed: int = 0, drift: float = 0.0) -> list[float]:
    rng = random.Random(seed)
    return [max(0.0, level * (1 + drift * i / n) * (1 + rng.gauss(0, rel))) for i in range(n)]


def test_entropy_collapse_caught_and_a_slow_decline_is_not():
    clean = noisy(0.8, 60, drift=-0.4)  # entropy falling 40% over a run: normal RL sharpening
    assert checks.entropy_collapse(clean, C.baseline, C.window, C.entropy_drop, C.entropy_floor) is None
    collapsed = noisy(0.8, 10) + [0.8 * 0.5 ** k for k in range(1, 11)]
    f = checks.entropy_collapse(collapsed, C.baseline, C.window, C.entropy_drop, C.entropy_floor)
    assert f is not None and f.kind is MonitorKind.ENTROPY_COLLAPSE and f.value < f.threshold
    # the absolute floor catches a series that starts near zero and goes to zero
    assert checks.entropy_collapse([0.004] * 12, C.baseline, C.window, C.entropy_drop, C.entropy_floor) is not None
    assert checks.entropy_collapse(collapsed[:C.baseline], C.baseline, C.window, C.entropy_drop, C.entropy_floor) is None


def test_kl_blowup_caught_by_the_limit_and_by_a_jump():
    clean = noisy(0.02, 50, rel=0.3)
    assert all(checks.kl_blowup(clean[:i], C.spike_window, C.kl_factor, C.kl_max, C.kl_floor) is None
               for i in range(1, 51))
    assert checks.kl_blowup(clean + [1.5], C.spike_window, C.kl_factor, C.kl_max, C.kl_floor).kind is MonitorKind.KL_BLOWUP
    jump = checks.kl_blowup(clean + [0.5], C.spike_window, C.kl_factor, C.kl_max, C.kl_floor)
    assert jump is not None and "jumped" in jump.message
    # a tiny KL jumping by a large factor stays under the floor
    assert checks.kl_blowup([1e-4] * 20 + [0.01], C.spike_window, C.kl_factor, C.kl_max, C.kl_floor) is None


@pytest.mark.parametrize("factor", [3.0, 0.3])
def test_length_drift_caught_both_ways(factor):
    clean = noisy(20.0, 80)
    assert all(checks.length_drift(clean[:i], C.baseline, C.window, C.length_ratio) is None for i in range(1, 81))
    drifted = clean[:30] + noisy(20.0 * factor, 10, seed=1)
    f = checks.length_drift(drifted, C.baseline, C.window, C.length_ratio)
    assert f is not None and f.kind is MonitorKind.LENGTH_DRIFT


def test_reward_hacking_needs_both_the_rise_and_the_fall():
    steps = range(1, 101)
    rising = [(s, 0.3 + 0.5 * s / 100) for s in steps]
    held_falls = [(s, 0.5 - 0.3 * max(0, s - 20) / 80) for s in range(0, 101, 10)]
    held_rises = [(s, 0.5 + 0.2 * s / 100) for s in range(0, 101, 10)]
    flat = [(s, 0.5) for s in steps]
    f = checks.reward_hacking(rising, held_falls, C.hack_window, C.hack_rise, C.hack_drop)
    assert f is not None and f.kind is MonitorKind.REWARD_HACKING and "step 20" in f.message
    # the best is the initial model (an evaluation before step 1): the first steps are the reward it is compared with
    assert checks.reward_hacking(rising, [(0, 0.5), (50, 0.3), (100, 0.2)], C.hack_window, C.hack_rise, C.hack_drop)
    assert checks.reward_hacking(rising, held_rises, C.hack_window, C.hack_rise, C.hack_drop) is None  # honest gains
    assert checks.reward_hacking(flat, held_falls, C.hack_window, C.hack_rise, C.hack_drop) is None  # plain regression
    assert checks.reward_hacking(rising, held_falls[:1], C.hack_window, C.hack_rise, C.hack_drop) is None  # one eval


def test_verifier_error_rate_caught():
    totals = [64.0] * 20
    clean = [1.0] * 20  # 1.6% of samples: an occasional timeout
    assert checks.rate_above(clean, totals, C.window, C.verifier_error_rate, MonitorKind.VERIFIER_ERRORS, "x") is None
    spiked = clean[:15] + [40.0] * 5
    f = checks.rate_above(spiked, totals, C.window, C.verifier_error_rate, MonitorKind.VERIFIER_ERRORS, "errors")
    assert f is not None and f.value == pytest.approx((40 * 5) / (64 * 5))


def test_grad_norm_spike_caught_and_noise_is_not():
    clean = noisy(0.5, 100, rel=0.5, seed=3)
    assert all(checks.grad_norm_spike(clean[:i], C.spike_window, C.grad_factor, C.grad_floor) is None for i in range(101))
    f = checks.grad_norm_spike(clean + [40.0], C.spike_window, C.grad_factor, C.grad_floor)
    assert f is not None and f.value == 40.0


def test_starved_domain_caught_after_patience():
    mixed = [0.5, 0.25, 0.0, 0.75] * 5
    assert checks.domain_starved(mixed, C.starve_patience, "d") is None
    starved = mixed + [0.0] * C.starve_patience
    assert checks.domain_starved(starved, C.starve_patience, "d").kind is MonitorKind.DOMAIN_STARVED
    assert checks.domain_starved(starved[:-1], C.starve_patience, "d") is None


def test_sandbox_failures_caught():
    assert checks.sandbox_failures([0, 0, 1, 0, 0, 0, 1, 0], C.window, C.sandbox_limit) is None
    assert checks.sandbox_failures([0, 0, 1, 1, 0, 2], C.window, C.sandbox_limit).kind is MonitorKind.SANDBOX_FAILURES


def test_reward_hacking_smoothing_ignores_one_unlucky_evaluation_but_not_a_sustained_fall():
    rising = [(s, 0.1 + 0.8 * s / 100) for s in range(1, 101)]
    lucky_then_unlucky = [(0, 0.5), (10, 0.5), (20, 0.58), (30, 0.5), (40, 0.46)]
    assert checks.reward_hacking(rising[:40], lucky_then_unlucky, 10, 0.1, 0.1, smooth=1) is not None  # a false alarm
    assert checks.reward_hacking(rising[:40], lucky_then_unlucky, 10, 0.1, 0.1, smooth=2) is None
    sustained = lucky_then_unlucky + [(50, 0.4), (60, 0.35)]
    assert checks.reward_hacking(rising[:60], sustained, 10, 0.1, 0.1, smooth=2) is not None


# `agent/format_error_rate` per step of four real runs (benchmarks/RESULTS.md, 2026-12-07): the agent recipe at lr 5e-4
# (the call format broke: pass rate 0 from step 9) and at 2e-4 (50 steps, +24 points), and the docs recipe at 5e-4
# (broke) and 1e-4 (30 steps, +9.1)
AGENT_BROKE = [0.183, 0.299, 0.179, 0.224, 0.192, 0.235, 0.249, 0.643, 0.472, 0.98, 0.54, 0.509, 0.556, 0.665, 0.921,
               0.665, 0.66, 0.666, 0.688, 0.683]
AGENT_CLEAN = [0.179, 0.299, 0.273, 0.089, 0.018, 0.179, 0.313, 0.138, 0.412, 0.228, 0.204, 0.242, 0.356, 0.253, 0.265,
               0.214, 0.317, 0.184, 0.261, 0.206, 0.281, 0.163, 0.235, 0.171, 0.196, 0.2, 0.192, 0.143, 0.235, 0.206,
               0.271, 0.18, 0.202, 0.125, 0.206, 0.221, 0.167, 0.226, 0.188, 0.207, 0.14, 0.256, 0.13, 0.249, 0.135,
               0.185, 0.115, 0.158, 0.213, 0.151]
DOCS_BROKE = [0.191, 0.159, 0.293, 0.457, 0.265, 0.671, 0.831, 0.999, 1.0, 1.0, 0.999, 0.999]
DOCS_CLEAN = [0.262, 0.207, 0.253, 0.336, 0.29, 0.207, 0.229, 0.298, 0.132, 0.151, 0.181, 0.17, 0.194, 0.298, 0.162,
              0.116, 0.139, 0.252, 0.244, 0.14, 0.297, 0.175, 0.202, 0.162, 0.276, 0.301, 0.256, 0.211, 0.293, 0.254]


def first_format_alert(rates: list[float]) -> int | None:
    """The first step (1-based) at which `format_collapse` fires on the series up to it."""
    for i in range(1, len(rates) + 1):
        if checks.format_collapse(rates[:i], C.baseline, C.window, C.format_factor, C.format_error_rate) is not None:
            return i
    return None


def test_format_collapse_caught_in_two_real_runs_and_quiet_in_their_clean_twins():
    # the first step the check can judge (it waits for `baseline` + `window` steps); pass rate 0.0 from step 9
    assert first_format_alert(AGENT_BROKE) == C.baseline + C.window == 10
    assert first_format_alert(DOCS_BROKE) == 10  # format errors 0.83 at step 7, 1.00 from 8
    assert first_format_alert(AGENT_BROKE[:9] + [0.2] * 11) is None  # the same start, recovering
    assert first_format_alert(AGENT_CLEAN) is None and first_format_alert(DOCS_CLEAN) is None
    f = checks.format_collapse(AGENT_BROKE, C.baseline, C.window, C.format_factor, C.format_error_rate)
    assert f.kind is MonitorKind.FORMAT_COLLAPSE and f.value >= f.threshold and "malformed calls" in f.message
    # a base that starts high must double before it alerts: 40% -> 60% is not a collapse, 40% -> 85% is
    assert first_format_alert([0.4] * 5 + [0.6] * 10) is None
    assert first_format_alert([0.4] * 5 + [0.85] * 10) is not None
