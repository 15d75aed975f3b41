import pytest

from posttrain.rewards import score_sync
from posttrain.tasks import TaskFileError
from posttrain.tasks.domains import list_domains, load_domain, parse_options
from posttrain.tasks.validate import validate_suite


def test_suite_options_parse_toml_literals_and_bare_words():
    opts = parse_options(["size=50", "answer_format=tag", "ratio=0.5", "name='x y'", "flags=[1, 2]"])
    assert opts == {"size": 50, "answer_format": "tag", "ratio": 0.5, "name": "x y", "flags": [1, 2]}
    with pytest.raises(TaskFileError, match="KEY=VALUE"):
        parse_options(["size"])


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(TaskFileError, match="arith:<name>"):
        load_domain("no-such-suite").suite()
    assert ("humaneval" in {name for name, _ in list_domains()})


def test_arith_suite_gold_scores_full_marks():
    suite = load_domain("arith:add", limit=20).suite()
    assert len(suite.tasks) == 20
    assert all(v.passed for v in score_sync(suite.verifier, suite.tasks, [t.answer for t in suite.tasks]))


def test_validate_uses_the_reference_response_when_answers_must_be_tagged():
    suite = load_domain("rg:leg_counting", size=6, answer_format="tag").suite()
    assert all(t.meta["reference_response"].startswith("<answer>") for t in suite.tasks)
    report = validate_suite(suite)
    assert report.ok and report.passed == len(suite.tasks)
