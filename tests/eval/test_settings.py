"""`posttrain eval`'s settings: a run's `[eval]` section with the given flags over it, as an `EvalSpec`."""

from __future__ import annotations

import pytest

from posttrain.config import EvalConfig
from posttrain.eval.settings import spec_of, with_flags


def test_no_section_and_no_flags_are_the_defaults_posttrain_eval_always_had():
    spec = spec_of(with_flags(None), "m", "arith:add", max_tokens=8, batch=32)
    assert (spec.n, spec.ks, spec.temperature, spec.top_p, spec.seed, spec.repeat) == (1, (1,), 0.0, 1.0, 0, 1)
    assert (spec.max_tokens, spec.batch) == (8, 32)  # the caller's defaults where the section leaves them unset
    assert with_flags(None).split == "reporting"


def test_a_flag_given_wins_over_the_section_and_one_left_out_does_not():
    section = EvalConfig(samples=4, temperature=0.8, ks=[1, 4], max_tokens=12, batch=5, split="selection")
    merged = with_flags(section, samples=None, temperature=1.0, ks=(8, 1, 8), max_tokens=None, split="train")
    assert (merged.samples, merged.temperature, merged.ks, merged.max_tokens, merged.split) == (4, 1.0, [1, 8], 12, "train")
    spec = spec_of(merged, "m", "s", max_tokens=99, batch=99, label="x")
    assert (spec.n, spec.ks, spec.max_tokens, spec.batch, spec.label) == (4, (1, 8), 12, 5, "x")


def test_greedy_with_several_samples_is_refused_in_the_section_and_in_the_merged_spec():
    from posttrain.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="copies of one greedy answer"):
        load_config(None, ["eval.samples=4"])
    merged = with_flags(EvalConfig(samples=4, temperature=0.7), temperature=0.0)  # a flag undoing the section's
    with pytest.raises(ValueError, match="copies of one greedy answer"):
        spec_of(merged, "m", "s", max_tokens=8, batch=32)
