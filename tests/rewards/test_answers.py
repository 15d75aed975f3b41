"""Mathematical equivalence through math-verify: equal forms accepted, wrong ones and garbage rejected."""

import threading

import pytest

from posttrain.rewards import extract_answer, make_verifier, safe_verify
from posttrain.rewards.answers import MathEquivalence
from posttrain.types import Task, VerdictStatus


def _task(answer):
    return Task(id="m", prompt="?", answer=answer)


@pytest.mark.parametrize(
    "gold,response",
    [
        ("1/2", "The answer is 0.5"),
        ("0.5", r"so \boxed{\frac{1}{2}}"),
        (r"\frac{1}{2}", "<answer>1/2</answer>"),
        ("2x+1", r"\boxed{1+2x}"),
        ("x^2 - 1", r"\boxed{(x-1)(x+1)}"),
        (r"\sqrt{2}/2", r"\boxed{\frac{1}{\sqrt{2}}}"),
        (r"\{1, 2\}", r"\boxed{\{2, 1\}}"),
        ("[0, 1)", r"\boxed{[0,1)}"),
        ("42", "After some work, 40 + 2 = 42."),
        ("3", r"\boxed{x = 3}"),
    ],
)
@pytest.mark.slow
def test_equivalent_answers_pass(gold, response):
    v = safe_verify(MathEquivalence(), _task(gold), response)
    assert v.ok and v.passed and v.score == 1.0, v.details


@pytest.mark.parametrize(
    "gold,response",
    [
        ("1/2", r"\boxed{0.6}"),
        ("2x+1", r"\boxed{2x+2}"),
        ("[0, 1)", r"\boxed{(0,1]}"),
        (r"\{1, 2\}", r"\boxed{\{1, 3\}}"),
        ("42", "I think it is 41"),
        ("42", r"\boxed{42} was wrong, the answer is \boxed{43}"),
    ],
)
def test_wrong_answers_fail(gold, response):
    v = safe_verify(MathEquivalence(), _task(gold), response)
    assert v.ok and not v.passed and v.score == 0.0
    assert v.details


@pytest.mark.parametrize("response", ["", "\x00\ufffd}}{{\\boxed{", "no math here at all", r"\boxed{}", "<answer></answer>",
                                      "}" * 5000])
def test_garbage_is_wrong_not_a_crash(response):
    v = safe_verify(MathEquivalence(), _task("7"), response)
    assert v.status is VerdictStatus.OK and not v.passed


def test_overlong_extracted_answer_is_refused():
    v = safe_verify(MathEquivalence(max_answer_chars=50), _task("1"), r"\boxed{" + "1+" * 100 + "0}")
    assert not v.passed and "cap" in v.details


@pytest.mark.slow
def test_exponent_tower_is_bounded_on_the_main_thread():
    v = safe_verify(MathEquivalence(timeout_s=1), _task("5"), r"\boxed{9^{9^{9^{9}}}}")
    assert v.ok and not v.passed


def test_exponent_tower_refused_off_the_main_thread():
    box = {}
    t = threading.Thread(target=lambda: box.update(v=safe_verify(MathEquivalence(), _task("5"), r"\boxed{9^{9^{9^{9}}}}")))
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert box["v"].ok and not box["v"].passed and "nested exponents" in box["v"].details


def test_gold_that_does_not_parse_is_an_error():
    v = safe_verify(MathEquivalence(), _task(""), r"\boxed{1}")
    assert v.status is VerdictStatus.ERROR
    v = safe_verify(MathEquivalence(), Task(id="n", prompt="?"), r"\boxed{1}")
    assert v.status is VerdictStatus.ERROR and "no gold answer" in v.details


def test_registered_with_extraction_modes():
    v = make_verifier({"type": "math", "extract": "tag"})
    assert safe_verify(v, _task("1/2"), "<answer>0.5</answer>").passed
    assert not safe_verify(v, _task("1/2"), r"\boxed{0.5}").passed  # tag mode ignores \boxed{}


def test_auto_extraction_order():
    assert extract_answer(r"<answer>1</answer> \boxed{2}", "auto") == "2"
    assert extract_answer("<answer>1</answer> then 3", "auto") == "1"
    assert extract_answer("just 3 and 4", "auto") == "4"
    assert extract_answer("nothing", "auto") is None


def test_missing_extra_names_it(monkeypatch):
    import builtins

    from posttrain.rewards import answers

    real_import = builtins.__import__

    def no_math_verify(name, *args, **kwargs):
        if name == "math_verify":
            raise ImportError("no module")
        return real_import(name, *args, **kwargs)

    answers._math_verify.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_math_verify)
    try:
        with pytest.raises(ImportError, match=r"posttrain\[math\]"):
            MathEquivalence()
    finally:
        monkeypatch.undo()
        answers._math_verify.cache_clear()
