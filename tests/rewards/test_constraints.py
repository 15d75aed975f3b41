"""Constraint verifiers: length limits, must / must-not contain, named predicates with task arguments."""

import pytest

from posttrain.rewards import make_verifier, safe_verify
from posttrain.rewards.constraints import (
    ContainsConstraint,
    LengthLimit,
    PredicateConstraint,
    count_tokens_estimate,
    count_words,
    predicate_names,
    register_predicate,
)
from posttrain.types import Task, VerdictStatus

T = Task(id="c", prompt="?", answer="Paris")


def test_counts():
    assert count_words("  one two\nthree  ") == 3
    assert count_tokens_estimate("Hello, world!") == 4
    assert count_words("") == 0


def test_length_limits():
    v = LengthLimit(max_words=5, min_chars=3)
    assert safe_verify(v, T, "a short reply").passed
    long = safe_verify(v, T, "one two three four five six")
    assert not long.passed and "6 words > max 5" in long.details
    short = safe_verify(v, T, "ab")
    assert not short.passed and "2 chars < min 3" in short.details
    assert not safe_verify(LengthLimit(max_tokens=3), T, "a, b, c").passed


def test_length_limits_from_task_meta():
    task = Task(id="m", prompt="?", meta={"max_words": 2})
    assert not safe_verify(make_verifier("length"), task, "three words here").passed
    assert safe_verify(make_verifier("length"), task, "two words").passed


def test_contains_and_must_not():
    v = ContainsConstraint(must=["paris"], must_not=["London"])
    assert safe_verify(v, T, "The capital is PARIS.").passed  # case-insensitive by default
    bad = safe_verify(v, T, "London, not paris")
    assert not bad.passed and "forbidden 'London' present" in bad.details
    strict = ContainsConstraint(must=["paris"], case_sensitive=True)
    assert not safe_verify(strict, T, "Paris").passed


def test_contains_whole_word_partial_credit_and_meta():
    v = ContainsConstraint(must=["cat"], whole_word=True)
    assert not safe_verify(v, T, "concatenate").passed
    assert safe_verify(v, T, "a cat.").passed
    partial = ContainsConstraint(must=["a", "b", "c"], must_not=["z"], partial=True)
    out = safe_verify(partial, T, "a b z")
    assert out.score == pytest.approx(0.5) and not out.passed
    task = Task(id="m", prompt="?", meta={"must_contain": ["sun"], "must_not_contain": "moon"})
    assert safe_verify(make_verifier("contains"), task, "the sun").passed
    assert not safe_verify(make_verifier("contains"), task, "sun and moon").passed
    assert safe_verify(make_verifier("contains"), T, "x").status is VerdictStatus.ERROR  # no constraints at all


def test_builtin_predicates():
    assert safe_verify(PredicateConstraint("starts_with", {"prefix": "Dear"}), T, "Dear Sir").passed
    assert not safe_verify(PredicateConstraint("ends_with", {"suffix": "."}), T, "no stop").passed
    lines = safe_verify(PredicateConstraint("line_count", {"min": 2, "max": 3}), T, "one line")
    assert not lines.passed and "1 lines" in lines.details
    assert safe_verify(PredicateConstraint("is_json"), T, '{"a": 1}').passed
    assert safe_verify(PredicateConstraint("contains_answer"), T, "It is Paris.").passed
    assert safe_verify(PredicateConstraint("lowercase"), T, "all lower").passed
    assert not safe_verify(PredicateConstraint("no_digits"), T, "4 apples").passed
    assert safe_verify(PredicateConstraint("count_at_least", {"text": "la", "n": 3}), T, "la la La").passed


def test_predicate_from_task_meta_with_arguments():
    task = Task(id="p", prompt="?", meta={"predicate": "starts_with", "predicate_args": {"prefix": "Yes"}})
    v = make_verifier("predicate")
    assert safe_verify(v, task, "Yes.").passed
    assert not safe_verify(v, task, "No.").passed


def test_custom_predicate_partial_credit_and_bad_returns():
    @register_predicate("test_vowel_share")
    def vowel_share(response, task, target=0.5):
        letters = [c for c in response.lower() if c.isalpha()]
        share = sum(c in "aeiou" for c in letters) / max(len(letters), 1)
        return max(0.0, 1.0 - abs(share - target)), f"vowel share {share:.2f}"

    assert "test_vowel_share" in predicate_names()
    out = safe_verify(PredicateConstraint("test_vowel_share"), T, "aa bb")
    assert out.score == pytest.approx(1.0) and out.passed
    half = safe_verify(PredicateConstraint("test_vowel_share", {"target": 0.0}), T, "aa bb")
    assert half.score == pytest.approx(0.5) and not half.passed

    @register_predicate("test_out_of_range")
    def out_of_range(response, task):
        return 3.0

    assert safe_verify(PredicateConstraint("test_out_of_range"), T, "x").status is VerdictStatus.ERROR


def test_unknown_predicates_and_bad_arguments():
    with pytest.raises(ValueError, match="unknown predicate 'eval'"):
        make_verifier({"type": "predicate", "predicate": "eval"})
    task = Task(id="p", prompt="?", meta={"predicate": "__import__('os')"})
    assert safe_verify(make_verifier("predicate"), task, "x").status is VerdictStatus.ERROR
    wrong_args = safe_verify(PredicateConstraint("starts_with", {"prefx": "a"}), T, "a")
    assert wrong_args.status is VerdictStatus.ERROR and "prefx" in wrong_args.details


@pytest.mark.parametrize("response", ["", "\x00\ufffd", "}{" * 1000])
def test_garbage_is_judged_not_crashed(response):
    for spec in ({"type": "length", "max_chars": 10}, {"type": "contains", "must": ["x"]},
                 {"type": "predicate", "predicate": "is_json"}):
        out = safe_verify(make_verifier(spec), T, response)
        assert out.ok
