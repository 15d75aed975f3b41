import pytest

from posttrain.rewards import score_sync
from posttrain.tasks import TaskFileError
from posttrain.tasks.suites import list_suites, load_suite, parse_suite_options
from posttrain.tasks.validate import validate_suite


def test_suite_options_parse_toml_literals_and_bare_words():
    opts = parse_suite_options(["size=50", "answer_format=tag", "ratio=0.5", "name='x y'", "flags=[1, 2]"])
    assert opts == {"size": 50, "answer_format": "tag", "ratio": 0.5, "name": "x y", "flags": [1, 2]}
    with pytest.raises(TaskFileError, match="KEY=VALUE"):
        parse_suite_options(["size"])


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(TaskFileError, match="arith:<name>"):
        load_suite("no-such-suite")
    assert ("humaneval" in {name for name, _ in list_suites()})


def test_arith_suite_gold_scores_full_marks():
    suite = load_suite("arith:add", limit=20)
    assert len(suite.tasks) == 20
    assert all(v.passed for v in score_sync(suite.verifier, suite.tasks, [t.answer for t in suite.tasks]))


def test_validate_uses_the_reference_response_when_answers_must_be_tagged():
    suite = load_suite("rg:leg_counting", size=6, answer_format="tag")
    assert all(t.meta["reference_response"].startswith("<answer>") for t in suite.tasks)
    report = validate_suite(suite)
    assert report.ok and report.passed == len(suite.tasks)
