"""``benchmarks/recipe_matrix.py``'s summary: a run that only hurt shows as a final-model regression even
though its `best/` (chosen among checkpoints that include the step-0 base) is the base itself."""

from __future__ import annotations

from pathlib import Path

from benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _summary():
    return load_benchmark("recipe_matrix").summary


def _cell(before: float, after: float, final: float) -> dict:
    return {"gain": after - before, "pass1_gain": 0.0, "greedy_before": before, "greedy_after": after,
            "greedy_final": final, "base_in_band": True}


def test_a_run_that_only_hurt_is_a_final_regression_not_a_best_one():
    helped, hurt = _cell(0.40, 0.70, 0.68), _cell(0.50, 0.50, 0.31)  # hurt: best/ fell back to the step-0 base
    out = _summary()([helped, hurt, {"failed": True}])
    assert out["regressions"] == 0 and out["final_regressions"] == 1
    assert abs(out["worst_final_gain"] - (0.31 - 0.50)) < 1e-12 and out["cells"] == 2 and out["failed_cells"] == 1
    assert _summary()([helped])["final_regressions"] == 0
