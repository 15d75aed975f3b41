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


def _check_worked(solution: str, a: int, b: int) -> None:
    """A worked solution is a chain of true equalities ending in the product (or the bare product)."""
    if ";" not in solution:
        assert int(solution) == a * b
        return
    *steps, total = solution.split(";")
    parts = []
    for step in steps:
        lhs, rhs = step.split("=")
        x, y = lhs.split("*")
        assert int(x) == a and int(x) * int(y) == int(rhs)
        parts.append(int(rhs))
    lhs, rhs = total.split("=")
    assert [int(p) for p in lhs.split("+")] == parts
    assert int(rhs) == sum(parts) == a * b


def test_worked_solution_matches_the_paper_method():
    from posttrain.tasks.arithmetic import worked_solution

    assert worked_solution(47, 38) == "47*8=376;47*30=1410;376+1410=1786"
    assert worked_solution(53, 5) == "265"  # a one-digit multiplier is its one product
    assert worked_solution(5, 123) == "5*3=15;5*20=100;5*100=500;15+100+500=615"
    for a, b in [(0, 0), (0, 99), (99, 0), (10, 10), (99, 99), (7, 40), (123, 4567)]:
        _check_worked(worked_solution(a, b), a, b)


@pytest.mark.slow
def test_worked_tasks_keep_the_product_as_answer_and_the_split():
    plain = ArithmeticSource(family="mul", digits=2, held_out_fraction=0.15)
    worked = ArithmeticSource(family="mul", digits=2, held_out_fraction=0.15, worked=True)
    rng = random.Random(0)
    for _ in range(300):
        t = worked.sample(rng)
        a, b = map(int, t.prompt[:-1].split("*"))
        assert t.answer == str(a * b)
        _check_worked(t.meta["solution"], a, b)
        assert len(t.meta["solution"]) <= worked.max_solution_chars
    # the same problems are held out in both formats: a worked base never saw a bare held-out product
    assert all(plain.split_of(t) == "held_out" for t in worked.take(1000))
    assert all(plain.split_of(worked.sample(rng)) == "train" for _ in range(300))
    with pytest.raises(ValueError, match="mul and chain only"):
        ArithmeticSource(family="add", worked=True)


def test_worked_chains_are_running_totals():
    from posttrain.tasks.arithmetic import worked_chain

    assert worked_chain([12, 34, 7], ["+", "+", "-"]) == "12+34=46;46-7=39"
    assert worked_chain([3, 50, 9], ["+", "-", "-"]) == "3-50=-47;-47-9=-56"
    src = ArithmeticSource(family="chain", digits=2, worked=True)
    rng = random.Random(2)
    for _ in range(300):
        t = src.sample(rng)
        steps = t.meta["solution"].split(";")
        assert len(steps) == src.terms - 1 and len(t.meta["solution"]) <= src.max_solution_chars
        for step in steps:
            lhs, rhs = step.rsplit("=", 1)
            assert eval(lhs) == int(rhs)  # each step is a true equality
        assert steps[-1].rsplit("=", 1)[1] == t.answer == str(eval(t.prompt[:-1]))
