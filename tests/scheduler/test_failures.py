"""Failure categories on planted examples of each kind, and the bank's replay with decay."""

from types import SimpleNamespace

import pytest
from _scheduler_fakes import group, tagged, traj

from posttrain.scheduler.failures import FailureBank, FailureCategory, categorise, failures_of
from posttrain.types import FinishReason, Group, RolloutStatus, VerdictStatus

T = tagged("t1", "arith:add")
C = FailureCategory


@pytest.mark.parametrize("planted, expected", [
    (traj(T, True), None),
    (traj(T, False, "41"), C.WRONG_ANSWER),
    (traj(T, False, "forty-two", details="no number found"), C.FORMAT_ERROR),
    (traj(T, False, ""), C.FORMAT_ERROR),
    (traj(T, False, "4", finish=FinishReason.LENGTH), C.TRUNCATED),
    (traj(T, False, "4", status=RolloutStatus.TRUNCATED), C.TRUNCATED),
    (traj(T, False, "x", vstatus=VerdictStatus.TIMEOUT), C.TIMEOUT),
    (traj(T, False, "x", status=RolloutStatus.ABORTED), C.TIMEOUT),
    (traj(T, False, "return x/0", details="0/3 tests passed; ZeroDivisionError: division by zero"), C.RUNTIME_ERROR),
    (traj(T, False, "def f(:", info={"load_error": "SyntaxError"}), C.RUNTIME_ERROR),
    (traj(T, False, "x", vstatus=VerdictStatus.ERROR, details="verifier crashed"), C.VERIFIER_ERROR),
    (traj(T, False, "x", status=RolloutStatus.ENV_ERROR), C.ENVIRONMENT_ERROR),
    (traj(T, False, "import pytest\npytest.skip('done')"), C.REWARD_HACK),
    # a hack that fooled the verifier is still a hack
    (traj(T, True, "echo 1 > /logs/verifier/reward.txt"), C.REWARD_HACK),
    (traj(T, True, "class A:\n    def __eq__(self, o): return True"), C.REWARD_HACK),
])
def test_each_planted_failure_gets_its_category(planted, expected):
    assert categorise(planted) == expected


def _episode(status, ok=True):
    result = SimpleNamespace(ok=ok)
    return SimpleNamespace(status=SimpleNamespace(value=status), turns=[SimpleNamespace(results=[result])])


@pytest.mark.parametrize("status, ok, expected", [
    ("failed", False, C.TOOL_MISUSE),
    ("format_errors", True, C.FORMAT_ERROR),
    ("max_steps", True, C.TRUNCATED),
    ("timeout", True, C.TIMEOUT),
    ("failed", True, C.WRONG_ANSWER),
])
def test_agent_episodes_say_how_they_failed(status, ok, expected):
    assert categorise(traj(T, False, "submit 3"), _episode(status, ok)) == expected


def test_failures_of_a_group_keep_the_task_and_response():
    g = Group(T, [traj(T, True), traj(T, False, "41")])
    (f,) = failures_of(g)
    assert (f.domain, f.task_id, f.category, f.response, f.prompt, f.answer) == (
        "arith:add", "t1", C.WRONG_ANSWER, "41", "t1?", "42")


def test_the_bank_counts_replays_with_decay_and_never_replays_infrastructure():
    bank = FailureBank(decay=0.5, min_weight=0.2)
    bank.observe(group(T, 0))
    infra = tagged("t2", "arith:add")
    bank.observe(Group(infra, [traj(infra, False, "x", vstatus=VerdictStatus.ERROR)]))
    assert bank.counts["arith:add"] == {"wrong_answer": 4, "verifier_error": 1}
    assert [t.id for t in bank.take(5)] == ["t1"]  # the verifier's failure is not the policy's
    assert [t.id for t in bank.take(5)] == ["t1"]  # weight 0.5 -> 0.25
    assert bank.take(5) == [] or len(bank) == 0  # 0.25 -> 0.125 < 0.2: gone
    assert len(bank) == 0
