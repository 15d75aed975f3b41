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
