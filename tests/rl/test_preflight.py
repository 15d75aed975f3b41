"""Configs that cannot learn say so: a group of one, greedy sampling, a completion cap no gold answer fits."""

from __future__ import annotations

import pytest

from posttrain.config import ConfigError, load_config
from posttrain.models import char_tokenizer
from posttrain.rl.build import build
from posttrain.rl.preflight import answer_room, check_answer_room
from posttrain.types import Task


@pytest.mark.parametrize("override, fix", [
    ("sampling.n=1", "set sampling.n >= 2"),
    ("sampling.temperature=0", "train at a temperature > 0"),
])
def test_settings_with_zero_advantage_everywhere_are_one_line_errors(override, fix):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert fix in str(err.value) and "\n" not in str(err.value)
    load_config(None, ["sampling.n=2", "sampling.temperature=0.5"])  # the smallest settings that can learn pass


def test_a_cap_no_gold_answer_fits_is_an_error_naming_the_length(tiny_config):
    cfg = tiny_config.model_copy(update={"sampling": tiny_config.sampling.model_copy(update={"max_tokens": 1}),
                                         "tasks": tiny_config.tasks.model_copy(update={"digits": 2, "min_digits": 2})})
    with pytest.raises(ConfigError, match=r"max_tokens = 1 cannot hold any gold answer of arith:add .*at least 3") as err:
        build(cfg, store=False)
    assert "\n" not in str(err.value)


def test_a_cap_that_holds_some_answers_warns_and_one_that_holds_all_is_silent(recwarn):
    tok = char_tokenizer()
    tasks = [Task(str(i), "q", "7" * (1 + i % 4)) for i in range(8)]  # answers of 1..4 characters
    check_answer_room([answer_room("d", tasks, tok, 4)])
    assert not recwarn.list
    with pytest.warns(UserWarning, match="holds only 2 of 8 sampled gold answers of d"):
        check_answer_room([answer_room("d", tasks, tok, 1)])
    worked = [Task("w", "47*8=", "376", {"solution": "47*8=8*40+8*7=320+56=376"})]
    with pytest.raises(ConfigError, match="shortest takes 24 tokens"):  # a worked solution is what must fit
        check_answer_room([answer_room("mul", worked, tok, 8)])
    check_answer_room([answer_room("code", [Task("c", "write f", None)], tok, 1)])  # no gold answer: nothing to check
