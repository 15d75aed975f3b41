import random

import pytest

from posttrain.tasks import ArithmeticSource, split_of


@pytest.mark.parametrize("family", ["add", "sub", "addsub", "mul", "chain"])
def test_answers_are_correct(family):
    src = ArithmeticSource(family=family, digits=2)
    rng = random.Random(0)
    for _ in range(200):
        t = src.sample(rng)
        assert t.prompt.endswith("=")
        assert int(t.answer) == eval(t.prompt[:-1])  # the prompt is a plain Python expression


@pytest.mark.parametrize("family", ["add", "sub", "mul", "chain"])
def test_train_and_held_out_never_overlap(family):
    """Disjoint by construction: every drawn train task hashes to train, every held-out one to held_out."""
    src = ArithmeticSource(family=family, digits=2, held_out_fraction=0.2)
    rng = random.Random(1)
    train = {src.sample(rng, "train").meta["split_key"] for _ in range(3000)}
    held = {t.meta["split_key"] for t in src.take(300, "held_out")}
    assert held and train
    assert not train & held


def test_commuted_problems_share_a_split():
    """a+b and b+a are one problem: a held-out sum never shows up in training written the other way round."""
    src = ArithmeticSource(family="add", digits=3)
    for t in src.take(200, "held_out"):
        a, b = t.prompt[:-1].split("+")
        key = f"{min(int(a), int(b))}+{max(int(a), int(b))}"
        assert t.meta["split_key"] == key
        assert split_of(key, 0.05) == "held_out"
        assert src.split_of(t) == "held_out"


def test_held_out_set_is_deterministic_and_distinct():
    src = ArithmeticSource()
    a, b = src.take(500, "held_out", seed=3), src.take(500, "held_out", seed=3)
    assert [t.id for t in a] == [t.id for t in b]
    assert len({t.id for t in a}) == 500


def test_difficulty_knob_changes_operand_size():
    rng = random.Random(0)
    easy = ArithmeticSource(digits=1).sample(rng)
    hard = ArithmeticSource(digits=6).sample(rng)
    assert max(len(x) for x in easy.prompt[:-1].split("+")) == 1
    assert max(len(x) for x in hard.prompt[:-1].split("+")) >= 4


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="family"):
        ArithmeticSource(family="div")
    with pytest.raises(ValueError, match="digits"):
        ArithmeticSource(digits=0)
