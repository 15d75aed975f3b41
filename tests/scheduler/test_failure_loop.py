"""benchmarks/failure_loop.py's regression gate: which checkpoint an arm keeps, read from the ordinary problems'
selection half only."""

from pathlib import Path

import pytest

from benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def loop():
    return load_benchmark("failure_loop")


def test_the_gate_keeps_the_latest_step_within_the_tolerance(loop):
    start = (220, 250)  # 88.0%
    curve = {20: (221, 250), 40: (219, 250), 60: (217, 250), 80: (218, 250), 100: (210, 250)}
    assert loop.gate(start, curve, tolerance=1.0) == 80  # 87.2 >= 87.0; 100 regressed by 4 points
    assert loop.gate(start, curve, tolerance=0.0) == 20  # only step 20 is not below the start
    assert loop.gate(start, curve, tolerance=5.0) == 100


def test_a_gate_every_step_fails_keeps_the_start_model(loop):
    assert loop.gate((240, 250), {20: (230, 250), 40: (200, 250)}, tolerance=1.0) == 0
    assert loop.gate((240, 250), {}, tolerance=1.0) == 0


def test_the_gate_accepts_exactly_the_tolerance(loop):
    # 1 point of 200 tasks is 2 tasks: 178/200 = 89.0 against 180/200 = 90.0 is on the line, kept despite rounding
    assert loop.gate((180, 200), {10: (178, 200)}, tolerance=1.0) == 10
    assert loop.gate((180, 200), {10: (177, 200)}, tolerance=1.0) == 0
