"""Trajectories as turns: the learner's token view, segments where history is rewritten, trainability."""

from __future__ import annotations

import pytest

from posttrain.types import Completion, FinishReason, Group, RolloutStatus, Task, Trajectory, Turn, Verdict, VerdictStatus

TASK = Task("t", "p")


def _c(ids, version=0):
    return Completion(list(ids), "", [-0.5 - i for i in range(len(ids))], FinishReason.STOP, policy_version=version)


def test_single_turn_view_masks_only_sampled_tokens():
    t = Trajectory.single_turn(TASK, [1, 2, 3], _c([7, 8], version=4), Verdict(1.0, True))
    v = t.token_view()
    assert v.ids == [1, 2, 3, 7, 8]
    assert v.mask == [False, False, False, True, True]
    assert v.logprobs == [0.0, 0.0, 0.0, -0.5, -1.5]
    assert v.versions == [-1, -1, -1, 4, 4]
    assert t.prompt_ids == [1, 2, 3] and t.completion.token_ids == [7, 8] and t.sampled_tokens == 2


def test_append_only_turns_are_one_view_with_observations_masked():
    turns = [
        Turn([1, 2], _c([5, 6], 1), observation_ids=[9, 9]),
        Turn([1, 2, 5, 6, 9, 9, 4], _c([8], 2), observation_ids=[3]),  # template token 4 after the observation
    ]
    v = Trajectory(TASK, turns).token_view()
    assert v.ids == [1, 2, 5, 6, 9, 9, 4, 8]  # the final observation is dropped: nothing after it is trained on
    assert v.mask == [False, False, True, True, False, False, False, True]
    assert v.versions == [-1, -1, 1, 1, -1, -1, -1, 2]


def test_a_turn_that_does_not_train_is_context_of_the_next_one():
    turns = [
        Turn([1, 2], _c([5, 6], 1), observation_ids=[9], trains=False),  # a sampled opening, not trained
        Turn([1, 2, 5, 6, 9], _c([8], 2)),
    ]
    v = Trajectory(TASK, turns).token_view()
    assert v.ids == [1, 2, 5, 6, 9, 8]  # the same ids as when it trains: only what the learner weighs changes
    assert v.mask == [False, False, False, False, False, True]
    assert v.logprobs == [0.0] * 5 + [-0.5] and v.versions == [-1] * 5 + [2]
    trained = Trajectory(TASK, [Turn(t.context_ids, t.completion, t.observation_ids) for t in turns]).token_view()
    assert trained.ids == v.ids and sum(trained.mask) == 3  # the planted difference: with it trained, 2 more
    alone = Trajectory(TASK, [turns[0]], Verdict(1.0, True)).token_view()  # an episode that ended at its opening
    assert not any(alone.mask) and alone.ids == [1, 2, 5, 6, 9]


def test_rewritten_history_splits_into_segments():
    turns = [
        Turn([1, 2], _c([5, 6]), observation_ids=[9]),
        Turn([1, 2, 5, 6, 9], _c([7])),
        Turn([1, 3], _c([4])),  # compaction: the context is not an extension of the previous one
    ]
    t = Trajectory(TASK, turns)
    segs = t.segments()
    assert [s.ids for s in segs] == [[1, 2, 5, 6, 9, 7], [1, 3, 4]]
    assert [sum(s.mask) for s in segs] == [3, 1]
    with pytest.raises(ValueError, match="2 segments"):
        t.token_view()


def test_logprob_count_must_match_tokens():
    bad = Completion([1, 2], "", [0.0], FinishReason.STOP)
    with pytest.raises(ValueError, match="2 tokens but 1 logprobs"):
        Trajectory.single_turn(TASK, [1], bad).segments()


def test_environment_failures_are_not_trainable():
    ok = Trajectory.single_turn(TASK, [1], _c([2]), Verdict(0.0, False))
    env = Trajectory.single_turn(TASK, [1], _c([2]), Verdict(0.0, False))
    env.status = RolloutStatus.ENV_ERROR
    errored = Trajectory.single_turn(TASK, [1], _c([2]), Verdict(0.0, False, VerdictStatus.ERROR))
    truncated = Trajectory.single_turn(TASK, [1], _c([2]), Verdict(1.0, True))
    truncated.status = RolloutStatus.TRUNCATED
    assert Group(TASK, [ok, env, errored, truncated]).valid == [True, False, False, True]
