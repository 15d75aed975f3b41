"""TaskScheduler: weights, priorities, retirement and re-checks, the band, in-flight limits, and resume identity."""

import math
import random

import pytest
from _scheduler_fakes import group, tagged

from posttrain.scheduler.band import BandController
from posttrain.scheduler.task_scheduler import DomainSpec, DomainStatus, Priority, SchedulerSettings, TaskScheduler
from posttrain.tasks.jsonl import ListSource
from posttrain.types import DOMAIN_KEY, Group, Task


def _source(prefix: str, n: int) -> ListSource:
    return ListSource([Task(f"{prefix}{i}", f"{prefix}{i}?", "42") for i in range(n)])


def _sched(**settings) -> TaskScheduler:
    specs = [DomainSpec("a", _source("a", 4)), DomainSpec("b", _source("b", 4))]
    return TaskScheduler(specs, SchedulerSettings(**settings), seed=0)


def test_a_finite_source_is_sampled_in_proportion_to_learnability():
    s = _sched(min_attempts=1000, revisit=0.0)  # nothing retired, no revisits: the weights alone
    # in domain a: a0 half solved, a1 never in 16, a2/a3 unseen
    s.update([group(tagged("a0", "a"), 8, 16), group(tagged("a1", "a"), 0, 16)])
    d = s.domains["a"]
    assert s.weight_of(d, "a0") == pytest.approx(81 / 342)
    assert s.weight_of(d, "a1") == pytest.approx(17 / 342)
    assert s.weight_of(d, "a2") == 0.25
    counts = {f"a{i}": 0 for i in range(4)}
    for _ in range(20000):
        counts[s._pick_task(d).id] += 1
    total = 81 / 342 + 17 / 342 + 0.5
    for tid, w in (("a0", 81 / 342), ("a1", 17 / 342), ("a2", 0.25)):
        assert counts[tid] / 20000 == pytest.approx(w / total, abs=0.02)


def test_informative_tasks_of_a_large_source_are_revisited_and_leave_the_pool_when_they_stop_informing():
    specs = [DomainSpec("big", _source("t", 100_000))]
    s = TaskScheduler(specs, SchedulerSettings(revisit=0.5, pool_size=2), seed=0)
    s.update([group(tagged("t1", "big"), 2, 4), group(tagged("t2", "big"), 0, 4), group(tagged("t3", "big"), 1, 4)])
    d = s.domains["big"]
    assert [t.id for t in d.pool] == ["t1", "t3"]  # informative ones only
    drawn = [s._pick_task(d).id for _ in range(4000)]
    share = sum(x in ("t1", "t3") for x in drawn) / len(drawn)
    # half the draws revisit (each try accepted by weight, E[p(1-p)] of Beta(3,3) 0.214 or Beta(2,4) 0.19 over
    # 0.25, so some try of up to 20 is accepted); the other half come from 100k tasks
    assert share == pytest.approx(0.5, abs=0.03)
    s.update([group(tagged("t1", "big"), 4, 4)])  # all passed this time: no longer informative
    assert [t.id for t in d.pool] == ["t3"]
    s.update([group(tagged(f"n{i}", "big"), 1, 4) for i in range(3)])  # bounded: the oldest goes
    assert sorted(t.id for t in d.pool) == ["n1", "n2"]


def test_priorities_eval_then_retries_then_fresh():
    s = _sched(replay_share=0.5)
    ev = [tagged("e0", "a"), tagged("e1", "b")]
    retry = [tagged("r0", "a"), tagged("r1", "a"), tagged("r2", "b")]
    s.submit(retry, Priority.RETRY)
    s.submit(ev, Priority.EVAL)
    out = s.sample(6)
    assert [t.id for t in out[:2]] == ["e0", "e1"]  # evaluation first
    assert [t.id for t in out[2:5]] == ["r0", "r1", "r2"]  # then retries (up to replay_share of the draw)
    assert all(t.id[0] in "ab" for t in out[5:])  # then fresh tasks
    with pytest.raises(ValueError):
        s.submit([tagged("x", "a")], Priority.FRESH)


def test_retries_are_capped_by_replay_share_so_fresh_tasks_still_flow():
    s = _sched(replay_share=0.25)
    s.submit([tagged(f"r{i}", "a") for i in range(10)], Priority.RETRY)
    out = s.sample(8)
    assert sum(t.id.startswith("r") for t in out) == 2


def test_banked_failures_are_replayed_with_decay_and_leave_when_passed():
    s = _sched(replay_share=0.5, replay_decay=0.5)
    t = tagged("a3", "a")
    s.update([group(t, 0, 4)])  # failed: banked
    assert len(s.bank) == 1
    first = s.sample(2)
    assert first[0].id == "a3"  # replayed ahead of fresh tasks
    assert s.bank.items["a3"].weight == 0.5
    s.update([group(t, 2, 4)])  # now passed sometimes: out of the bank
    assert len(s.bank) == 0


def test_always_and_never_solved_tasks_retire_and_come_back_on_recheck():
    s = _sched(min_attempts=8, recheck_every=10)
    s.update([group(tagged("a0", "a"), 8, 8), group(tagged("a1", "a"), 0, 8)])
    d = s.domains["a"]
    assert s.weight_of(d, "a0") == 0.0 and s.weight_of(d, "a1") == 0.0
    drawn = [s._pick_task(d).id for _ in range(4000)]
    share = (drawn.count("a0") + drawn.count("a1")) / len(drawn)
    # a retired task is accepted 1 in recheck_every draws: weight 0.25/10 beside 0.25 for the two unseen ones,
    # so 2 * 0.025 / (2 * 0.025 + 2 * 0.25) = 0.0909 of the draws
    assert share == pytest.approx(0.0909, abs=0.02)


def _dead_domain_scheduler(backoff: float = 1.0):
    specs = [DomainSpec("dead", _source("d", 1000)), DomainSpec("live", _source("l", 1000))]
    return TaskScheduler(specs, SchedulerSettings(retire_after_groups=8, retire_informative=0.05, recheck_every=5,
                                                  recheck_backoff=backoff), seed=1)


def test_a_domain_that_never_passes_is_retired_and_probed_periodically():
    s = _dead_domain_scheduler()
    for step in range(1, 40):
        s.set_step(step)
        tasks = s.sample(8)
        s.update([group(t, 0 if t.meta[DOMAIN_KEY] == "dead" else 2, 4) for t in tasks])
    assert s.domains["dead"].status is DomainStatus.RETIRED
    assert s.domain_weight("dead") == 0.0
    # retired: only probes from now on, one every recheck_every steps, and the metrics count them as probes
    dead = probes = 0
    s.domain_metrics()
    for step in range(40, 60):
        s.set_step(step)
        tasks = s.sample(8)
        dead += sum(t.meta[DOMAIN_KEY] == "dead" for t in tasks)
        s.update([group(t, 0 if t.meta[DOMAIN_KEY] == "dead" else 2, 4) for t in tasks])
        m = s.domain_metrics()
        probes += m["dead"]["probes"]
        assert m["live"]["probes"] == 0
    assert 3 <= dead <= 5 and probes == dead
    # the domain moves (a probe shows variance): its share comes back
    s.set_step(100)
    probe = [t for t in s.sample(8) if t.meta[DOMAIN_KEY] == "dead"]
    assert probe
    s.update([group(probe[0], 2, 4)])
    assert s.domains["dead"].status is DomainStatus.ACTIVE and s.domain_weight("dead") > 0


def test_each_probe_that_finds_nothing_doubles_the_wait_for_the_next_up_to_eight_periods():
    s = _dead_domain_scheduler(backoff=2.0)
    probes, retired = [], None
    for step in range(1, 400):
        s.set_step(step)
        tasks = s.sample(8)
        if retired is not None:
            probes += [step] * sum(t.meta[DOMAIN_KEY] == "dead" for t in tasks)
        s.update([group(t, 0 if t.meta[DOMAIN_KEY] == "dead" else 2, 4) for t in tasks])
        if retired is None and s.domains["dead"].status is DomainStatus.RETIRED:
            retired = step
    waits = [b - a for a, b in zip([retired] + probes, probes)]
    assert waits[:5] == [5, 10, 20, 40, 40]
    # with a fixed period (backoff 1) the same 400 steps probe every 5 steps
    fixed = _dead_domain_scheduler(backoff=1.0)
    for step in range(1, 400):
        fixed.set_step(step)
        fixed.update([group(t, 0 if t.meta[DOMAIN_KEY] == "dead" else 2, 4) for t in fixed.sample(8)])
    assert fixed.domains["dead"].rechecks > 60 > len(probes)


def _partial(task: Task, passes: int, n: int = 4) -> Group:
    """A group whose scores vary below the pass mark (reasoning-gym's credit for an answer among other
    characters): 0.0, 0.25, 0.5, ... for the failures, 1.0 for the `passes` first."""
    from _scheduler_fakes import traj

    from posttrain.types import Verdict

    out = []
    for i in range(n):
        t = traj(task, i < passes)
        if i >= passes:
            t.verdict = Verdict(0.25 * (i % 3), False, t.verdict.status, "v")
        out.append(t)
    return Group(task, out)


def _run_partial(s: TaskScheduler, steps: range, dead_passes: int = 0) -> int:
    """Steps of 8 draws: "dead" groups vary only below the pass mark, "live" ones pass half. Returns the dead
    domain's draws."""
    dead = 0
    for step in steps:
        s.set_step(step)
        tasks = s.sample(8)
        dead += sum(t.meta[DOMAIN_KEY] == "dead" for t in tasks)
        s.update([_partial(t, dead_passes) if t.meta[DOMAIN_KEY] == "dead" else group(t, 2, 4) for t in tasks])
    return dead


def _partial_scheduler(dry: int) -> TaskScheduler:
    specs = [DomainSpec("dead", _source("d", 1000)), DomainSpec("live", _source("l", 1000))]
    return TaskScheduler(specs, SchedulerSettings(retire_dry_after=dry, recheck_every=50), seed=1)


def test_a_domain_whose_scores_vary_only_below_the_pass_mark_is_retired_after_retire_dry_after_groups():
    s = _partial_scheduler(dry=12)
    drawn = _run_partial(s, range(1, 200))
    d = s.domains["dead"]
    assert d.status is DomainStatus.RETIRED and not d.ever_passed
    # 12 groups (plus the rest of the step it retires in: 8 draws go out at once), then one probe per 50 steps: the
    # probes show variance and no pass, so it stays retired
    assert 12 <= drawn <= 12 + 7 + 4
    # the planted failure the rule exists for: without it, partial credit keeps the domain live and drawn
    off = _partial_scheduler(dry=0)
    assert _run_partial(off, range(1, 200)) > 300 and off.domains["dead"].status is DomainStatus.ACTIVE
    # a probe with a passing sample brings it back; the dry count starts again
    s.set_step(400)
    probe = [t for t in s.sample(8) if t.meta[DOMAIN_KEY] == "dead"]
    assert probe
    s.update([_partial(probe[0], 1)])
    assert d.status is DomainStatus.ACTIVE and d.dry == 0


@pytest.mark.parametrize("retired_at, probe_passes, back", [
    (0, 4, True),   # never solved, now always: it moved, though the probe has no variance
    (0, 0, False),
    (1, 4, False),  # always solved, still
    (1, 0, True),   # always solved, now never
    (1, 3, True),
])
def test_a_retired_domain_comes_back_when_a_probe_shows_it_moved_either_way(retired_at, probe_passes, back):
    s = _partial_scheduler(dry=12)
    for step in range(1, 30):
        s.set_step(step)
        s.update([group(t, 4 * retired_at if t.meta[DOMAIN_KEY] == "dead" else 2, 4) for t in s.sample(8)])
    d = s.domains["dead"]
    assert d.status is DomainStatus.RETIRED and d.retired_solved is bool(retired_at)
    s.set_step(200)
    probe = [t for t in s.sample(8) if t.meta[DOMAIN_KEY] == "dead"]
    s.update([group(probe[0], probe_passes, 4)])
    assert (d.status is DomainStatus.ACTIVE) is back


def test_a_domain_that_passes_now_and_then_is_not_dry():
    s = _partial_scheduler(dry=12)
    seen = 0
    for step in range(1, 200):
        s.set_step(step)
        tasks = s.sample(8)
        groups = []
        for t in tasks:
            if t.meta[DOMAIN_KEY] == "dead":  # one passing sample in every 8th of its groups
                seen += 1
                groups.append(_partial(t, int(seen % 8 == 0)))
            else:
                groups.append(group(t, 2, 4))
        s.update(groups)
    assert s.domains["dead"].status is DomainStatus.ACTIVE and s.domains["dead"].groups > 100


def _masked(task: Task, status) -> Group:
    from _scheduler_fakes import traj

    return Group(task, [traj(task, False, "", status=status, tokens=0) for _ in range(4)])


@pytest.mark.parametrize("status, retires", [("overlong", True), ("env_error", False)])
def test_a_domain_whose_prompts_never_fit_the_context_retires_and_a_flaky_environment_does_not(status, retires):
    """An OVERLONG group (nothing sampled: the model cannot read the prompt) counts as a failed attempt; an
    environment error says nothing about the domain and leaves it live."""
    from posttrain.types import RolloutStatus

    s = _dead_domain_scheduler()
    for step in range(1, 40):
        s.set_step(step)
        tasks = s.sample(8)
        s.update([_masked(t, RolloutStatus(status)) if t.meta[DOMAIN_KEY] == "dead" else group(t, 2, 4) for t in tasks])
    assert (s.domains["dead"].status is DomainStatus.RETIRED) is retires


def test_the_band_moves_difficulty_up_and_down_and_records_it():
    band = BandController(low=0.2, high=0.8, window=8)
    band.add("arith:add", 2, 1, 4)
    assert band.observe("arith:add", 8, 8, step=1) is not None  # 100% > high: harder
    assert band.level("arith:add") == 3
    assert band.observe("arith:add", 0, 8, step=2) is not None  # 0% < low: easier
    assert band.level("arith:add") == 2
    assert band.observe("arith:add", 4, 8, step=3) is None  # in the band: stays
    band.add("x", 4, 1, 4)
    assert band.observe("x", 8, 8, step=4) is None  # at its top already
    assert [(m.old, m.new, m.step) for m in band.history] == [(2, 3, 1), (3, 2, 2)]
    with pytest.raises(ValueError):
        BandController(low=0.9, high=0.1)


def test_the_scheduler_swaps_a_domains_source_when_the_band_moves_it():
    built = []

    def source_at(level):
        built.append(level)
        return _source(f"L{level}_", 50)

    spec = DomainSpec("g", source_at(2), level=2, band=(1, 3), source_at=source_at)
    s = TaskScheduler([spec], SchedulerSettings(band_window=8), seed=0)
    tasks = s.sample(2)
    s.update([group(t, 4, 4) for t in tasks])  # 8 of 8 passed: one level harder
    assert s.band.level("g") == 3 and built[-1] == 3
    assert all(t.id.startswith("L3_") for t in s.sample(4))
    assert s.domain_metrics()["g"]["difficulty"] == 3.0


def test_in_flight_limits_hold_per_domain():
    specs = [DomainSpec("slow", _source("s", 100), weight=10.0), DomainSpec("fast", _source("f", 100))]
    s = TaskScheduler(specs, SchedulerSettings(max_inflight=2), seed=0)
    out = s.sample(4)  # the heavy domain alone would take ~9 of 10: its limit holds it to 2
    assert sum(t.meta[DOMAIN_KEY] == "slow" for t in out) == 2
    s.update([group(t, 1, 2) for t in out if t.meta[DOMAIN_KEY] == "slow"])
    assert s.domains["slow"].inflight == 0


def test_costs_make_batches_by_budget_and_send_long_tasks_to_their_lane():
    s = _sched()
    for i in range(5):
        s.cost.observe("a", f"a{i}", 1.0, 10)
        s.cost.observe("b", f"b{i}", 40.0, 400)
    s.cost.observe("c", "c0", 1.0, 10)  # a third domain keeps the median short
    long_task, short_task = tagged("b1", "b"), tagged("a1", "a")
    assert s.lanes([short_task, long_task]) == ([short_task], [long_task])
    batch = s.sample_budget(seconds=5.0)
    assert 1 <= len(batch)
    assert sum(s.cost.expected(t.meta[DOMAIN_KEY], t.id).seconds for t in batch) <= 5.0 or len(batch) == 1
    assert s.timeout_s("b") == pytest.approx(800.0)


def _drive(s: TaskScheduler, steps: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    ids = []
    for step in range(steps):
        s.set_step(step)
        tasks = s.sample(6)
        ids += [t.id for t in tasks]
        s.observe_round([group(t, 1, 2) for t in tasks], 0.5)
        s.update([group(t, rng.randint(0, 4), 4) for t in tasks])
    return ids


def _assert_resumes_identically(build) -> None:
    """Ten steps, a state dict, ten more; a fresh scheduler loaded with the state makes the same ten decisions."""
    whole = build()
    _drive(whole, 10, seed=1)
    state = whole.state_dict()
    after = _drive(whole, 10, seed=2)
    resumed = build()
    resumed.load_state_dict(state)
    assert _drive(resumed, 10, seed=2) == after
    assert resumed.state_dict()["domains"] == whole.state_dict()["domains"]


def test_resume_from_state_dict_makes_identical_decisions():
    def build():
        specs = [DomainSpec("a", _source("a", 30)), DomainSpec("b", _source("b", 30), weight=2.0),
                 DomainSpec("g", _source("L2_", 30), level=2, band=(1, 3), source_at=lambda lv: _source(f"L{lv}_", 30))]
        return TaskScheduler(specs, SchedulerSettings(min_attempts=4, band_window=16, recheck_every=3), seed=7)

    _assert_resumes_identically(build)


def _ability(**settings) -> TaskScheduler:
    specs = [DomainSpec("a", _source("a", 1000)), DomainSpec("b", _source("b", 1000))]
    return TaskScheduler(specs, SchedulerSettings(task_model="ability", **settings), seed=0)


def test_an_unseen_tasks_weight_comes_from_its_domains_results():
    """Empirical Bayes: one group of 8 of 8 on a0 raises domain a's ability (variance 1 + drift 0.01, task
    variance 4, p = 1/2, g = 4, H = 2: S = 1 + 5.01 * 2 = 11.02, ability 1.01 * 4 / 11.02 = 0.3666, a0's difficulty
    -16 / 11.02 = -1.4519), and an unseen task of a starts at the mean difficulty of the tried ones, shrunk by one
    pseudo-task at 0: -1.4519 / 2 = -0.7260; so it is expected easier (further from 1/2) than one of the untouched
    domain b: E[p(1-p)] = sqrt(l2 / (2 pi s)) exp(-l2 mu^2 / (2 s)) with l2 = pi/8, s = 1 + 4 l2, mu = 1.0926."""
    s = _ability()
    s.update([group(tagged("a0", "a"), 8, 8)])
    a, b = s.domains["a"], s.domains["b"]
    assert a.ability == pytest.approx(1.01 * 4 / 11.02)
    assert a.typical_difficulty == pytest.approx(-16 / 11.02 / 2, abs=1e-3)  # packed to 1/4096 of a logit
    unseen_b = 0.25 / math.sqrt(1 + math.pi / 2)
    assert s.weight_of(b, "b7") == pytest.approx(unseen_b)
    l2, spread, mu = math.pi / 8, 1 + math.pi / 2, 1.01 * 4 / 11.02 + 16 / 11.02 / 2
    by_hand = math.sqrt(l2 / (2 * math.pi * spread)) * math.exp(-l2 * mu * mu / (2 * spread))
    assert s.weight_of(a, "a7") == pytest.approx(by_hand, abs=1e-4) == pytest.approx(0.1423, abs=1e-4)
    assert s.weight_of(a, "a7") < unseen_b
    # a0 (difficulty -1.4519, variance 1 / (1/4 + 8/4)): expected p(1-p) 0.1327
    assert s.weight_of(a, "a0") == pytest.approx(0.1327, abs=1e-3)
    # a domain that is always solved: after ten tasks of 8 of 8 its unseen tasks are worth little before any is
    # paid for, while the untouched domain's stay at the prior
    s.update([group(tagged(f"a{i}", "a"), 8, 8) for i in range(1, 10)])
    assert s.weight_of(a, "a99") < 0.5 * unseen_b
    assert s.weight_of(b, "b99") == pytest.approx(unseen_b)


def test_evidence_on_some_tasks_moves_the_expectation_of_the_others():
    """The model learns a domain, not a task: a task that failed 0 of 8 while the domain was weak is expected
    to be within reach once the domain's other tasks start passing, without being tried again."""
    s = _ability()
    s.update([group(tagged("hard", "a"), 0, 8), group(tagged("mid", "a"), 4, 8)])
    a = s.domains["a"]
    before = s.weight_of(a, "hard")
    for i in range(20):
        s.update([group(tagged(f"t{i}", "a"), 8, 8)])
    assert a.ability > 1.0
    assert s.weight_of(a, "hard") > before


def test_revisits_take_the_weightiest_task_not_already_out_and_the_pool_keeps_every_tried_task():
    s = _ability(revisit=1.0)
    s.update([group(tagged("a0", "a"), 0, 8), group(tagged("a1", "a"), 4, 8), group(tagged("a2", "a"), 8, 8)])
    a = s.domains["a"]
    assert sorted(t.id for t in a.pool) == ["a0", "a1", "a2"]  # all-fail and all-pass kept too
    assert s.weight_of(a, "a1") > max(s.weight_of(a, "a0"), s.weight_of(a, "a2"), s._fresh_scale(a))
    assert s._pick_task(a).id == "a1"
    # a0 failed while the domain's ability was 0 and is expected nearer 1/2 now than a2 (8 of 8 last)
    assert s.weight_of(a, "a0") > s._fresh_scale(a) > s.weight_of(a, "a2")
    a.busy.add("a1")  # handed out already: the next one down
    assert s._pick_task(a).id == "a0"
    a.busy.add("a0")  # and a2 weighs less than an unseen task: a fresh one
    assert s._pick_task(a).id not in ("a0", "a1", "a2")
    s.release([tagged("a1", "a")])
    assert s._pick_task(a).id == "a1"
    # no retirement by counts: 0 of 8 is not the end of a task, only a low weight
    assert s.weight_of(a, "a0") > 0.0


def test_ability_mode_retires_a_planted_dead_domain_within_n_groups_and_it_comes_back_when_it_moves():
    specs = [DomainSpec("dead", _source("d", 1000)), DomainSpec("live", _source("l", 1000))]
    s = TaskScheduler(specs, SchedulerSettings(task_model="ability", retire_after_groups=4, retire_informative=0.05,
                                               recheck_every=5, domain_floor=0.05), seed=1)
    retired_after = None
    for step in range(1, 60):
        s.set_step(step)
        tasks = s.sample(8)
        s.update([group(t, 0 if t.meta[DOMAIN_KEY] == "dead" else 2, 4) for t in tasks])
        if retired_after is None and s.domains["dead"].status is DomainStatus.RETIRED:
            retired_after = s.domains["dead"].groups
    assert retired_after is not None and retired_after <= 8
    s.set_step(200)
    probe = [t for t in s.sample(8) if t.meta[DOMAIN_KEY] == "dead"]
    assert probe
    s.update([group(probe[0], 2, 4)])  # its pass rate moved
    assert s.domains["dead"].status is DomainStatus.ACTIVE and s.domain_weight("dead") > 0


def test_ability_mode_resumes_to_identical_decisions():
    def build():
        specs = [DomainSpec("a", _source("a", 30)), DomainSpec("b", _source("b", 30), weight=2.0)]
        return TaskScheduler(specs, SchedulerSettings(task_model="ability", recheck_every=3), seed=7)

    _assert_resumes_identically(build)


def test_with_retire_off_nothing_is_retired_a_dead_domain_keeps_its_floor_and_a_never_solved_task_its_weight():
    """`retire = False` (plain learnability sampling): the planted dead domain, which the default retires within
    its first groups, stays live and drawn at its floor share; a task failed 16 of 16 keeps E[p(1-p)] > 0."""
    def run(retire: bool) -> tuple[TaskScheduler, int]:
        specs = [DomainSpec("dead", _source("d", 1000)), DomainSpec("live", _source("l", 1000))]
        s = TaskScheduler(specs, SchedulerSettings(retire=retire, replay_share=0.0, recheck_every=5), seed=1)
        dead = 0
        for step in range(1, 120):
            s.set_step(step)
            tasks = s.sample(8)
            dead += sum(t.meta[DOMAIN_KEY] == "dead" for t in tasks)
            s.update([group(t, 0 if t.meta[DOMAIN_KEY] == "dead" else 2, 4) for t in tasks])
        return s, dead

    on, dead_on = run(True)
    off, dead_off = run(False)
    assert on.domains["dead"].status is DomainStatus.RETIRED
    assert off.domains["dead"].status is DomainStatus.ACTIVE and off.domain_weight("dead") > 0
    assert off.domain_metrics()["dead"]["probes"] == 0
    # its share falls to the floor (weight 0.05 beside the live domain's ~0.6), never to 0: 119 steps x 8 draws
    assert 0.02 * 952 < dead_off < 0.25 * 952 and dead_off > dead_on
    off.update([group(tagged("d-x", "dead"), 0, 16)])
    assert off.weight_of(off.domains["dead"], "d-x") == pytest.approx(17 / (18 * 19))
    on.update([group(tagged("d-x", "dead"), 0, 16)])
    assert on.weight_of(on.domains["dead"], "d-x") == 0.0
