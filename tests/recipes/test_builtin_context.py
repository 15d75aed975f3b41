"""The built-in family's configurable context: `model.base.context` sets the positions a base holds, joins the
cache key only when set (the quickstart's bases keep their keys and figures), and a bad value is one line."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from posttrain.config import BaseModelConfig
from posttrain.models import load_model
from posttrain.recipes.builtin import base_key, ensure_base


def test_default_keys_are_unchanged():
    # pinned from main before the field existed: a change here would rebuild every cached base on every machine
    assert base_key(BaseModelConfig()) == "arith-add-d2-s0-9f199c7a74"
    assert base_key(BaseModelConfig(family="mul")) == "arith-mul-d2-s0-3ee1a4c88b"
    # changed on purpose (AGENT_BASE_FORMAT 8: the quoting oracle, 2 layers at lr 1e-3; was ...-1fc797abc2 at 6,
    # ...-b801b6bfeb at 5, the distractors and the chain-and-value split, and ...-aacc44c2e5 before)
    assert base_key(BaseModelConfig(family="lookup")) == "agent-lookup-h3-s0-5b13529847"
    assert base_key(BaseModelConfig(family="code:ops")) == "code-ops-d2-s0-5c265f40c2"
    assert base_key(BaseModelConfig(context=4096)) != base_key(BaseModelConfig())
    assert base_key(BaseModelConfig(context=4096)) != base_key(BaseModelConfig(context=2048))


def test_a_base_holds_the_context_it_was_given(tmp_path):
    small = dict(hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, digits=1, batch_size=8,
                 max_steps=1, eval_every=1, eval_size=16, cache_dir=str(tmp_path))
    long = ensure_base(BaseModelConfig(**small, context=2048))
    default = ensure_base(BaseModelConfig(**small))
    assert long.path != default.path
    assert load_model(long.path)[0].config.max_position_embeddings == 2048
    assert load_model(default.path)[0].config.max_position_embeddings == 128


def test_a_bad_context_is_refused():
    with pytest.raises(ValidationError, match="context"):
        BaseModelConfig(context=8)
