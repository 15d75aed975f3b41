"""benchmarks/scheduler_tokens.py's pure parts: tokens to a target (interpolated; not reached is a bound, never a
number), the ratio and its kinds, the curve at fixed budgets, the target rule, the summary, and the four arms'
configs; and the `sampled_tokens` step metric it counts."""

import sys
from pathlib import Path

import pytest
from _scheduler_fakes import group, tagged, traj

from benchmark_module import load_benchmark
from posttrain.config import load_config
from posttrain.rl.run_log import step_metrics
from posttrain.types import Group

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok():
    return load_benchmark("scheduler_tokens")


def test_tokens_to_target_interpolates_between_the_evaluations_around_the_first_crossing(tok):
    curve = [(0, 0.10), (1000, 0.20), (3000, 0.40), (4000, 0.10), (5000, 0.50)]
    # 0.30 lies halfway between 0.20 (1000 tokens) and 0.40 (3000): 2000; the later dip and rise do not count
    c = tok.tokens_to_target(curve, 0.30)
    assert c.reached and c.tokens == pytest.approx(2000.0) and c.bound == 3000
    assert tok.tokens_to_target(curve, 0.40).tokens == pytest.approx(3000.0)  # met exactly at an evaluation
    assert tok.tokens_to_target(curve, 0.05).tokens == 0.0  # the start is already there: it cost nothing
    with pytest.raises(ValueError):
        tok.tokens_to_target([(10, 0.1), (5, 0.2)], 0.15)


def test_an_arm_that_never_reaches_the_target_gets_a_bound_never_a_ratio_below_what_it_spent(tok):
    uniform = tok.tokens_to_target([(0, 0.1), (40_000, 0.2), (80_000, 0.3)], 0.2)
    # the planted failure: an arm that stays below the target all the way to its budget. A capped reading (its
    # last tokens taken as its tokens to target, or the budget's mark it stopped at) would give 1 or below
    stuck = tok.tokens_to_target([(0, 0.1), (40_000, 0.15), (80_000, 0.19)], 0.2)
    assert not stuck.reached and stuck.tokens is None and stuck.bound == 80_000
    r = tok.token_ratio(stuck, uniform)
    assert r.kind == "lower_bound" and r.value == pytest.approx(2.0) and r.value >= 1.0
    # an arm stopped early by the wall clock (its curve ends at 10k tokens, below target): still only a bound,
    # here below 1, and never reported as exact
    short = tok.tokens_to_target([(0, 0.1), (10_000, 0.15)], 0.2)
    r = tok.token_ratio(short, uniform)
    assert r.kind == "lower_bound" and r.value == pytest.approx(0.25)
    summary = tok.summarise([{"scheduler": r, "dapo": r, "learnability": r}])
    assert summary["scheduler"]["median"] is None and summary["scheduler"]["kinds"] == ["lower_bound"]


def test_the_ratio_kinds(tok):
    fast = tok.Crossing(True, 10_000.0, 20_000.0)
    slow = tok.Crossing(True, 40_000.0, 40_000.0)
    never = tok.Crossing(False, None, 80_000.0)
    at_start = tok.Crossing(True, 0.0, 0.0)
    assert tok.token_ratio(fast, slow) == tok.Ratio(0.25, "exact")
    assert tok.token_ratio(fast, never) == tok.Ratio(0.125, "upper_bound")  # below 10k / 80k
    assert tok.token_ratio(never, never).kind == "undefined"
    assert tok.token_ratio(fast, at_start).kind == "undefined"


def test_the_curve_at_fixed_budgets_is_interpolated_and_not_extrapolated(tok):
    curve = [(0, 0.1), (100, 0.3), (300, 0.2)]
    assert tok.value_at(curve, 0) == 0.1
    assert tok.value_at(curve, 50) == pytest.approx(0.2)
    assert tok.value_at(curve, 200) == pytest.approx(0.25)
    assert tok.value_at(curve, 300) == pytest.approx(0.2)
    assert tok.value_at(curve, 301) is None


def test_the_target_rule(tok):
    t, rule = tok.choose_target(0.30, 0.40, 0.50)
    assert rule == "uniform_gain" and t == pytest.approx(0.35)
    t, rule = tok.choose_target(0.30, 0.31, 0.50)  # uniform's gain under MIN_GAIN: the scheduler's half-gain
    assert rule == "scheduler_gain" and t == pytest.approx(0.40)
    assert tok.choose_target(0.30, 0.29, 0.31) == (None, "no_gain")


def test_the_summary_takes_the_median_only_when_every_seed_is_exact(tok):
    e = [tok.Ratio(v, "exact") for v in (0.3, 0.5, 0.2)]
    s = tok.summarise([{"scheduler": r, "dapo": r, "learnability": r} for r in e])
    assert s["scheduler"]["median"] == pytest.approx(0.3) and s["dapo"]["per_seed"] == [0.3, 0.5, 0.2]
    mixed = [*e[:2], tok.Ratio(0.1, "upper_bound")]
    s = tok.summarise([{"scheduler": r, "dapo": r, "learnability": r} for r in mixed])
    assert s["scheduler"]["median"] is None


def test_competence_and_the_learnable_rule(tok):
    assert tok.competence({"a": 0.2, "b": 0.4, "c": 1.0}, ["a", "b"]) == pytest.approx(0.3)
    with pytest.raises(KeyError):
        tok.competence({"a": 0.2}, ["a", "b"])
    assert tok.learnable_rule(1, 32) and tok.learnable_rule(28, 32)
    assert not tok.learnable_rule(0, 32) and not tok.learnable_rule(30, 32) and not tok.learnable_rule(0, 0)


def test_the_four_arms_differ_only_in_sampling_and_filter(tok, tmp_path):
    cfgs = {}
    for arm in tok.ARMS:
        path = tmp_path / f"{arm.name}.toml"
        path.write_text(tok.config_text(tmp_path / "runs", arm, 3))
        cfgs[arm.name] = load_config(path)
    s, u, d, lrn = (cfgs[n] for n in ("scheduler", "uniform", "dapo", "learnability"))
    assert (s.train.curriculum, s.train.drop_zero_variance, s.scheduler.retire) == ("scheduler", True, True)
    assert (u.train.curriculum, u.train.drop_zero_variance) == ("uniform", False)
    assert (d.train.curriculum, d.train.drop_zero_variance) == ("uniform", True)
    assert (lrn.train.curriculum, lrn.scheduler.retire, lrn.scheduler.replay_share) == ("scheduler", False, 0.0)
    for c in cfgs.values():
        assert c.seed == 3 and c.domains == s.domains and c.train.max_fill_rounds == s.train.max_fill_rounds
        assert c.train.prompts_per_step == 32 and c.sampling.n == 4
    assert s.domains == load_config(tok.EXAMPLE).domains  # the example's entries, as written
    extra = load_config(_write(tmp_path, tok.config_text(tmp_path, tok.ARMS[0], 3, exclude=["rg:lcm"])))
    assert all("rg:lcm" in d.exclude for d in extra.domains)


def test_the_step_metric_counts_every_sampled_token_kept_or_dropped():
    a, b = tagged("a", "d"), tagged("b", "d")
    kept = Group(a, [traj(a, True, tokens=5), traj(a, False, tokens=7)])
    dropped = group(b, 0, 3)  # three trajectories of 3 tokens, all failing: dropped by the filter, still sampled
    m = step_metrics([kept, dropped], [kept], 1, 1, (0.0, 1.0, 2.0))
    assert m["sampled_tokens"] == 5 + 7 + 9


def test_the_evaluation_marks_are_equal_up_to_the_budget_and_halve_below_the_first(tok):
    assert tok.eval_marks(800, 8, 3) == [12.5, 25, 50, 100, 200, 300, 400, 500, 600, 700, 800]
    assert tok.eval_marks(800, 4, 0) == [200, 400, 600, 800]


SMALL = """# three arithmetic domains, for the end-to-end check
[[domains]]
source = "arith:add"
levels = [1, 2, 3]
"""


@pytest.mark.slow
def test_the_probe_and_one_seed_end_to_end_on_the_tiny_model(tiny_model_dir, tmp_path):
    import json
    import os
    import subprocess

    example = tmp_path / "small.toml"
    example.write_text(SMALL)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    bench = str(ROOT / "benchmarks" / "scheduler_tokens.py")
    common = ["--example", str(example), "--model", str(tiny_model_dir), "--seeds", "5", "--budget-tokens", "300",
              "--evals", "2", "--early-evals", "1", "--eval-size", "4"]
    # the probe runs first, over every domain of the config, and is written down before any arm
    probe = subprocess.run([sys.executable, bench, *common, "--out", str(tmp_path / "p")], env=env,
                           capture_output=True, text=True, timeout=600)
    record = json.loads((tmp_path / "p" / "learnable.json").read_text())
    assert record["domains"] == 3 and "seed 0" in record["rule"]
    if not record["learnable"]:  # the random model passed nothing: the run refuses, saying why
        assert probe.returncode != 0 and "no learnable domain" in probe.stderr
    # a given list: the four arms, each to its budget, and the last line's figures
    given = tmp_path / "learnable.json"
    given.write_text(json.dumps({"rule": "given", "learnable": ["arith:add@digits1", "arith:add@digits2"],
                                 "domains": 3, "passed": {"arith:add@digits1": [1, 4], "arith:add@digits2": [1, 4]}}))
    run = subprocess.run([sys.executable, bench, *common, "--learnable", str(given), "--out", str(tmp_path / "r")],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    last = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(last) >= {"tokens_ratio", "tokens_ratio_dapo", "tokens_ratio_learnability", "seeds", "target"}
    assert last["seeds"] == [5] and last["learnable"] == ["arith:add@digits1", "arith:add@digits2"]
    for arm in ("uniform", "dapo", "scheduler", "learnability"):
        res = json.loads((tmp_path / "r" / "seed5" / f"{arm}.json").read_text())
        assert res["points"][0]["tokens"] == 0 and res["points"][0]["n_tasks"] == {"arith:add@digits1": 4,
                                                                                    "arith:add@digits2": 4}
        assert res["tokens"] >= 300 or res["stopped"] in ("target", "wall")
        assert [p["tokens"] for p in res["points"]] == sorted(p["tokens"] for p in res["points"])
    # a second call reads the finished arms instead of running them again
    again = subprocess.run([sys.executable, bench, *common, "--learnable", str(given), "--out", str(tmp_path / "r")],
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "read from" in again.stdout
    assert json.loads(again.stdout.strip().splitlines()[-1])["runs"][0]["curves"] == last["runs"][0]["curves"]


def _write(tmp_path, text):
    path = tmp_path / "extra.toml"
    path.write_text(text)
    return path
