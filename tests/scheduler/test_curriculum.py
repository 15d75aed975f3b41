import pytest

from posttrain.scheduler import PassRateCurriculum
from posttrain.tasks import ListSource
from posttrain.types import Completion, FinishReason, Group, Task, Trajectory, Verdict


def _group(task, passes):
    trajs = [
        Trajectory.single_turn(task, [1], Completion([2], "", [0.0], FinishReason.STOP), Verdict(float(p), bool(p)))
        for p in passes
    ]
    return Group(task, trajs)


def test_tracks_pass_rates_and_skips_solved_and_hopeless_tasks():
    tasks = [Task(id=f"t{i}", prompt=str(i), answer=str(i)) for i in range(3)]
    cur = PassRateCurriculum(ListSource(tasks), seed=0, min_attempts=4)
    cur.update([_group(tasks[0], [1, 1, 1, 1]), _group(tasks[1], [0, 0, 0, 0]), _group(tasks[2], [1, 0, 1, 0])])
    assert cur.pass_rate("t0") == 1.0 and cur.pass_rate("t2") == 0.5
    drawn = {t.id for t in cur.sample(50)}
    assert drawn == {"t2"}
    assert cur.skipped > 0


def test_never_starves_when_every_task_is_uninformative():
    tasks = [Task(id="only", prompt="p", answer="a")]
    cur = PassRateCurriculum(ListSource(tasks), min_attempts=1, max_rejections=3)
    cur.update([_group(tasks[0], [1, 1])])
    assert [t.id for t in cur.sample(2)] == ["only", "only"]


def test_state_roundtrip_reproduces_future_samples():
    tasks = [Task(id=f"t{i}", prompt=str(i)) for i in range(20)]
    a = PassRateCurriculum(ListSource(tasks), seed=5)
    a.sample(7)
    state = a.state_dict()
    b = PassRateCurriculum(ListSource(tasks), seed=99)
    b.load_state_dict(state)
    assert [t.id for t in a.sample(10)] == [t.id for t in b.sample(10)]


def test_uniform_curriculum_draws_what_pass_rate_draws_before_skipping_and_never_skips():
    from posttrain.scheduler import UniformCurriculum

    tasks = [Task(id=f"t{i}", prompt=str(i), answer=str(i)) for i in range(3)]
    assert [t.id for t in UniformCurriculum(ListSource(tasks), seed=3).sample(30)] == \
        [t.id for t in PassRateCurriculum(ListSource(tasks), seed=3).sample(30)]
    cur = UniformCurriculum(ListSource(tasks), seed=0)
    cur.update([_group(tasks[0], [1, 1, 1, 1] * 4), _group(tasks[1], [0, 0, 0, 0] * 4)])  # solved, hopeless: kept
    assert {t.id for t in cur.sample(60)} == {"t0", "t1", "t2"}
    state = cur.state_dict()
    other = UniformCurriculum(ListSource(tasks), seed=99)
    other.load_state_dict(state)
    assert [t.id for t in cur.sample(10)] == [t.id for t in other.sample(10)]


@pytest.mark.slow
def test_train_curriculum_setting_picks_the_curriculum():
    from posttrain.config import load_config
    from posttrain.rl.build import build_curriculum, build_domains
    from posttrain.scheduler import UniformCurriculum
    from posttrain.scheduler.curriculum import DomainMixture

    cfg = load_config(None, ["train.curriculum='uniform'"])
    assert cfg.train.curriculum == "uniform" and load_config().train.curriculum == "pass_rate"
    domains = build_domains(cfg)
    assert isinstance(build_curriculum(domains, 0, cfg.train.curriculum), UniformCurriculum)
    assert isinstance(build_curriculum(domains, 0), PassRateCurriculum)
    mixed = build_curriculum(domains * 2, 0, "uniform")
    assert isinstance(mixed, DomainMixture) and all(isinstance(c, UniformCurriculum) for c in mixed.curricula.values())


def _levelled(n=300):
    """Generated-like tasks seen once each, at three difficulty levels."""
    return [Task(id=f"t{i}", prompt=str(i), answer=str(i), meta={"difficulty": 1 + i % 3}) for i in range(n)]


def test_levels_that_give_no_informative_groups_are_drawn_down_to_the_floor():
    """Level 3 never solved, level 1 always: both are drawn at about the floor, relative to level 2, whose
    groups carry signal; tasks are never repeated, so only the level statistics can tell."""
    tasks = _levelled()
    cur = PassRateCurriculum(ListSource(tasks), seed=0, level_floor=0.1)
    outcome = {1: [1, 1, 1, 1], 2: [1, 0, 0, 1], 3: [0, 0, 0, 0]}
    cur.update([_group(t, outcome[t.meta["difficulty"]]) for t in tasks[:60]])
    assert cur.level_weights() == {"1": 0.1, "2": 1.0, "3": 0.1}
    drawn = [t.meta["difficulty"] for t in cur.sample(600)]
    share = {lv: drawn.count(lv) / len(drawn) for lv in (1, 2, 3)}
    assert share[2] > 0.7 and 0.03 < share[1] < 0.15 and 0.03 < share[3] < 0.15, share


def test_a_level_comes_back_when_its_groups_carry_signal_again():
    tasks = _levelled()
    cur = PassRateCurriculum(ListSource(tasks), seed=0, level_decay=0.2)
    cur.update([_group(t, [0, 0, 0, 0] if t.meta["difficulty"] == 3 else [1, 0]) for t in tasks[:60]])
    assert cur.level_weights()["3"] == cur.level_floor
    cur.update([_group(t, [1, 0]) for t in tasks if t.meta["difficulty"] == 3][:20])  # the model now solves some
    assert cur.level_weights()["3"] > 0.9


def test_level_weighting_needs_two_trusted_levels_and_leaves_unlevelled_tasks_alone():
    tasks = _levelled()
    cur = PassRateCurriculum(ListSource(tasks), seed=0)
    cur.update([_group(t, [0, 0]) for t in tasks[:3]])  # one group per level: not trusted yet
    assert cur.level_weights() == {}
    plain = [Task(id=f"p{i}", prompt=str(i), answer=str(i)) for i in range(30)]
    a, b = PassRateCurriculum(ListSource(plain), seed=4), PassRateCurriculum(ListSource(plain), seed=4)
    a.update([_group(t, [1, 0]) for t in plain])
    assert a.levels == {} and [t.id for t in a.sample(40)] == [t.id for t in b.sample(40)]


def test_level_statistics_survive_a_resume_and_older_states_load():
    tasks = _levelled()
    a = PassRateCurriculum(ListSource(tasks), seed=1)
    a.update([_group(t, [0, 0, 0, 0] if t.meta["difficulty"] == 3 else [1, 0]) for t in tasks[:60]])
    b = PassRateCurriculum(ListSource(tasks), seed=7)
    b.load_state_dict(a.state_dict())
    assert b.level_weights() == a.level_weights()
    assert [t.id for t in a.sample(30)] == [t.id for t in b.sample(30)]
    old = {k: v for k, v in a.state_dict().items() if k != "levels"}  # a checkpoint written before levels existed
    c = PassRateCurriculum(ListSource(tasks), seed=7)
    c.load_state_dict(old)
    assert c.levels == {}


def test_level_weights_reach_the_step_metrics_of_one_domain_or_a_mixture():
    from posttrain.scheduler.curriculum import DomainMixture, level_metrics

    tasks = _levelled()
    cur = PassRateCurriculum(ListSource(tasks), seed=0)
    assert level_metrics(cur) == {}
    cur.update([_group(t, [0, 0] if t.meta["difficulty"] == 3 else [1, 0]) for t in tasks[:60]])
    assert level_metrics(cur) == {"curriculum/level_1": 1.0, "curriculum/level_2": 1.0, "curriculum/level_3": 0.1}
    mix = DomainMixture({"a": cur, "b": PassRateCurriculum(ListSource(tasks))}, {"a": 1.0, "b": 1.0})
    assert level_metrics(mix) == {"curriculum/a/level_3": 0.1, "curriculum/a/level_1": 1.0,
                                  "curriculum/a/level_2": 1.0}


def test_a_process_score_makes_a_level_informative_only_when_signal_comes_from_the_reward():
    """Level 3's episodes all fail, but a blended process score tells them apart (verdict.outcome
    is the verifier's own score): informative under train.signal_from = "reward", not under "outcome"."""

    def blended(task, processes):
        trajs = [Trajectory.single_turn(task, [1], Completion([2], "", [0.0], FinishReason.STOP),
                                        Verdict(0.25 * p, False, outcome=0.0))
                 for p in processes]
        return Group(task, trajs)

    tasks = _levelled()
    weights = {}
    for signal_from in ("outcome", "reward"):
        cur = PassRateCurriculum(ListSource(tasks), seed=0, signal_from=signal_from)
        cur.update([blended(t, [0.0, 0.5, 1.0, 0.5]) if t.meta["difficulty"] == 3 else _group(t, [1, 0])
                    for t in tasks[:60]])
        weights[signal_from] = cur.level_weights()["3"]
        assert cur.pass_rate(tasks[2].id) == 0.0  # passes are the verifier's either way
    assert weights == {"outcome": 0.1, "reward": 1.0}
