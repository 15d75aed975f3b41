"""benchmarks/scheduler_gain.py's pure parts: the domain list, the two arms' configs, the gain and ratio arithmetic
and the paired bootstrap; and one tiny end-to-end seed (slow)."""

import json
from pathlib import Path

import pytest

from benchmark_module import load_benchmark
from posttrain.config import load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gain():
    return load_benchmark("scheduler_gain")


def test_the_domain_list_has_both_kinds_and_at_least_eight(gain):
    gain.check_domains(gain.DOMAINS)
    names = [d.name for d in gain.DOMAINS]
    assert len(names) >= 8 and len(set(names)) == len(names)
    assert "arith:add@digits2" in gain.learnable_names()
    assert {"code:ops@digits1", "rg:chain_sum@level0"} <= set(names) - set(gain.learnable_names())
    assert gain.GainDomain("arith:add", {"min_digits": 1, "digits": 3}).name == "arith:add@digits3@min_digits1"


def test_check_domains_refuses_a_list_the_figure_cannot_use(gain):
    d = gain.GainDomain
    few = tuple(d("arith:add", {"digits": k}, learnable=k < 3) for k in range(1, 6))
    with pytest.raises(ValueError, match="at least 8"):
        gain.check_domains(few)
    same = tuple(d("arith:add", {"digits": k % 4 + 1}, learnable=k == 0) for k in range(8))
    with pytest.raises(ValueError, match="repeat"):
        gain.check_domains(same)
    all_learnable = tuple(d("arith:add", {"digits": k}, learnable=True) for k in range(1, 9))
    with pytest.raises(ValueError, match="both kinds"):
        gain.check_domains(all_learnable)


def test_the_arms_differ_only_in_the_curriculum(gain, tmp_path):
    texts = {arm: gain.config_text(tmp_path / "runs", arm, 3, 32, model="/m") for arm in gain.ARMS}
    a, b = (t.splitlines() for t in texts.values())
    assert [(x, y) for x, y in zip(a, b) if x != y] == [('name = "scheduler"', 'name = "uniform"'),
                                                       ('curriculum = "scheduler"', 'curriculum = "uniform"')]
    path = tmp_path / "s.toml"
    path.write_text(texts["scheduler"])
    cfg = load_config(path)
    assert cfg.train.curriculum == "scheduler" and cfg.seed == 3 and cfg.sampling.max_tokens == gain.MAX_TOKENS
    assert [d.name for d in cfg.domains] == [d.name for d in gain.DOMAINS]
    assert cfg.domains[3].options == {"digits": 3, "min_digits": 1}
    with pytest.raises(ValueError, match="arm"):
        gain.config_text(tmp_path, "pass_rate", 1, 8)


def test_gain_is_the_mean_over_learnable_domains_of_end_minus_start(gain):
    start = {"a": 0.5, "b": 0.2, "c": 0.0}
    end = {"a": 0.7, "b": 0.1, "c": 0.9}
    assert gain.domain_gains(start, end, ["a", "b"]) == pytest.approx({"a": 0.2, "b": -0.1})
    assert gain.mean_gain(start, end, ["a", "b"]) == pytest.approx(0.05)  # "c" is not learnable: not counted
    with pytest.raises(KeyError):
        gain.mean_gain(start, {"a": 0.7}, ["a", "b"])


def test_ratio_is_scheduler_over_uniform_and_none_without_a_uniform_gain(gain):
    assert gain.gain_ratio(0.12, 0.08) == pytest.approx(1.5)
    assert gain.gain_ratio(0.1, 0.0) is None
    assert gain.gain_ratio(0.1, -0.02) is None


def test_the_bootstrap_of_the_gain_difference(gain):
    # one seed, two domains of 4 tasks; scheduler ends with 2 more passes on "a", uniform with 1 more on "b"
    rows = [{"a": {"scheduler": ([0, 0, 1, 1], [1, 1, 1, 1]), "uniform": ([0, 0, 1, 1], [0, 0, 1, 1])},
             "b": {"scheduler": ([0, 0, 0, 0], [0, 0, 0, 0]), "uniform": ([0, 0, 0, 0], [1, 0, 0, 0])}}]
    point, lo, hi = gain.bootstrap_gain_diff(rows, samples=500)
    assert point == pytest.approx(100 * (0.5 - 0.25) / 2)
    assert lo <= point <= hi
    same = [{"a": {"scheduler": ([0, 1], [1, 1]), "uniform": ([0, 1], [1, 1])}}]
    assert gain.bootstrap_gain_diff(same, samples=50) == (0.0, 0.0, 0.0)
    # pooled over seeds: the mean of the seeds' differences
    two = gain.bootstrap_gain_diff(rows + same, samples=50)[0]
    assert two == pytest.approx(point / 2)


def test_summary_takes_the_median_of_the_seeds_ratios(gain):
    rows = [{"gain": {"scheduler": s, "uniform": u}, "ratio": gain.gain_ratio(s, u)}
            for s, u in ((0.3, 0.2), (0.2, 0.1), (0.1, 0.1))]
    out = gain.summarise(rows)
    assert out["real_gain_ratio"] == pytest.approx(1.5) and out["met"]
    assert out["ratio_of_mean_gains"] == pytest.approx(0.2 / (0.4 / 3))
    rows[2] = {"gain": {"scheduler": 0.1, "uniform": 0.0}, "ratio": None}
    assert gain.summarise(rows)["real_gain_ratio"] is None and not gain.summarise(rows)["met"]


@pytest.mark.slow
def test_one_seed_end_to_end_on_the_tiny_model(gain, tiny_model_dir, tmp_path, capsys):
    row = gain.one_seed(5, tmp_path / "seed5", budget_s=1.0, eval_size=4, model=str(tiny_model_dir))
    assert set(row["steps"]) == set(gain.ARMS) and all(s >= 1 for s in row["steps"].values())
    assert set(row["accuracy"]["scheduler"]["start"]) == {d.name for d in gain.DOMAINS}
    assert row["accuracy"]["scheduler"]["start"] == row["accuracy"]["uniform"]["start"]
    assert json.loads((tmp_path / "seed5" / "uniform.json").read_text())["arm"] == "uniform"
