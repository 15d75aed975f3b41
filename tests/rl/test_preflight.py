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


def test_hundreds_of_domains_measure_a_few_tasks_each_within_one_budget():
    from types import SimpleNamespace

    from posttrain.rl.preflight import BUDGET, MIN_SAMPLE, SAMPLE, domain_rooms, sample_size

    assert sample_size(1) == SAMPLE and sample_size(500) == BUDGET // 500 and sample_size(10_000) == MIN_SAMPLE
    asked: list[int] = []

    class Source:
        def take(self, n, split, seed=0):
            asked.append(n)
            return [Task(f"{split}{i}", "q", "1") for i in range(n)]

    def domain(i: int, rollouter: str = "single_turn"):
        src = Source()
        return SimpleNamespace(name=f"d{i}", rollouter=rollouter, source=src,
                               held_out=lambda n, seed=0, src=src: src.take(n, "held_out", seed))

    domains = [domain(i) for i in range(500)] + [domain(500, "agent")]  # an agent domain is not measured
    rooms = domain_rooms(domains, [8] * len(domains), char_tokenizer())
    assert len(rooms) == 500 and sum(asked) <= 2 * BUDGET + 500 and set(asked) == {1, sample_size(500)}
    assert all(len(r.lengths) == 2 * sample_size(500) for r in rooms)


def test_a_generator_that_takes_seconds_a_task_is_measured_on_one_task_of_each_split():
    import time
    from types import SimpleNamespace

    from posttrain.rl.preflight import SLOW_S, domain_rooms

    class Slow:
        def take(self, n, split, seed=0):
            time.sleep(SLOW_S * 1.5 * n)
            return [Task(f"{split}{i}", "q", "1") for i in range(n)]

    src = Slow()
    slow = SimpleNamespace(name="slow", rollouter="single_turn", source=src,
                           held_out=lambda n, seed=0: src.take(n, "held_out", seed))
    t0 = time.perf_counter()
    (room,) = domain_rooms([slow], [8], char_tokenizer())
    assert len(room.lengths) == 2 and time.perf_counter() - t0 < 10 * SLOW_S
