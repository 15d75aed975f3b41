"""The asynchronous loop: staleness-0 identity with the synchronous loop, the staleness bound, the buffer's
accounting, importance weights by hand, weight-version acknowledgement, a dying producer, resume."""

from __future__ import annotations

import math
import time

import pytest
import torch

from posttrain.rl.async_loop import Producer, WeightBoard
from posttrain.rl.buffer import FinishedRollout, GroupBuffer, group_version
from posttrain.rl.losses import clipped_policy_loss, truncated_importance_weights
from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore
from posttrain.types import Completion, FinishReason, Group, Task, Trajectory, Verdict, VerdictStatus

TIMING = ("rollout_s", "learn_s", "step_s", "verifier_latency_p50", "verifier_latency_p95", "verifier_latency_max")


def _with(cfg, **sections):
    update = {}
    for name, values in sections.items():
        section = getattr(cfg, name)
        update[name] = section.model_copy(update=values) if hasattr(section, "model_copy") else values
    return cfg.model_copy(update=update)


@pytest.fixture
def cfg(tiny_config):
    return _with(tiny_config, reward={"verifier": "numeric", "tolerance": 4.0}, eval={"every": 0})


def _train(cfg, name, **rollout):
    cfg = _with(cfg.model_copy(update={"name": name}), rollout=rollout)
    trainer = Trainer(cfg)
    trainer.run()
    trainer.close()
    return trainer, cfg


def _steps(cfg):
    with RunStore(cfg.path / "run.sqlite") as store:
        return store.steps(), store.count("samples")


@pytest.mark.slow
def test_async_with_staleness_zero_is_the_synchronous_run(cfg):
    sync, sync_cfg = _train(cfg, "sync")
    asyn, async_cfg = _train(cfg, "async", mode="async", max_staleness=0, producer_kind="thread")
    for (k, a), (_, b) in zip(sync.model.state_dict().items(), asyn.model.state_dict().items()):
        assert torch.equal(a, b), k
    (s1, n1), (s2, n2) = _steps(sync_cfg), _steps(async_cfg)
    assert n1 == n2
    for (st1, m1), (st2, m2) in zip(s1, s2):
        assert st1 == st2
        assert {k: v for k, v in m1.items() if k not in TIMING} == {k: m2[k] for k in m1 if k not in TIMING}
        assert m2["staleness_max"] == 0 and m2["dropped_stale_groups"] == 0


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the producer process samples with one torch thread: the same float reductions
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_async_with_staleness_zero_in_producer_processes_is_the_synchronous_run(cfg, one_thread):
    sync, _ = _train(cfg, "sync")
    asyn, async_cfg = _train(cfg, "async", mode="async", max_staleness=0, producer_kind="process")
    for (k, a), (_, b) in zip(sync.model.state_dict().items(), asyn.model.state_dict().items()):
        assert torch.equal(a, b), k
    steps, _ = _steps(async_cfg)
    assert all(m["staleness_max"] == 0 for _, m in steps)


def test_no_consumed_group_is_older_than_max_staleness(cfg):
    cfg = _with(cfg, train={"steps": 6})
    trainer, run_cfg = _train(cfg, "k2", mode="async", max_staleness=2, producer_kind="thread")
    steps, _ = _steps(run_cfg)
    seen = set()
    for _, m in steps:
        assert m["staleness_max"] <= 2
        hist = [m[f"staleness_hist/{s}"] for s in range(3)]
        assert sum(hist) == m["groups_sampled"]  # every consumed group is in the histogram
        seen.update(s for s in range(3) if hist[s])
        assert m["dropped_stale_groups"] == 0  # look-ahead never produces a group stale on arrival
        for key in ("buffer_occupancy", "learner_idle_frac", "producer_idle_frac", "mismatch_kl", "mismatch_max"):
            assert key in m
    assert seen - {0}, "look-ahead never sampled ahead of the learner"
    assert trainer.learner.importance_sampling  # stale behaviour policies are corrected
    with RunStore(run_cfg.path / "run.sqlite") as store:
        rows = store.db.execute("SELECT step, policy_version FROM samples").fetchall()
    # per stored sample, not through the loop's own metric: step s trains the weights of version s - 1
    lags = [(step - 1) - version for step, version in rows]
    assert len(rows) == sum(m["groups_sampled"] for _, m in steps) * cfg.sampling.n
    assert min(lags) == 0 and max(lags) <= 2 and any(lag > 0 for lag in lags)


def _group(task_id: str, versions: list[int]) -> Group:
    task = Task(task_id, "p", "a")
    trajs = [Trajectory.single_turn(task, [1], Completion([2], "x", [-0.5], FinishReason.STOP, policy_version=v),
                                    Verdict(1.0, True, VerdictStatus.OK, "v")) for v in versions]
    return Group(task, trajs)


def test_buffer_drops_and_counts_stale_groups():
    buf = GroupBuffer(capacity=8)
    req = buf.submit([Task(f"t{i}", "p", "a") for i in range(3)], 2, for_step=5, min_version=0)
    assert req is not None and buf.occupancy() == 3
    running = buf.next_request(timeout=1)
    assert running is req
    groups = [_group("t0", [4, 4]), _group("t1", [1, 4]), _group("t2", [2, 3])]  # oldest token decides
    assert [group_version(g) for g in groups] == [4, 1, 2]
    buf.finish(FinishedRollout(req, groups, 1, 0.5, 0))
    taken = buf.take(req, version=4, max_staleness=2)
    assert [g.task.id for g in taken.groups] == ["t0", "t2"] and taken.staleness == [0, 2]
    assert taken.dropped == 1 and buf.dropped_stale == 1 and buf.occupancy() == 0
    assert buf.finished_durations == [0.5]


def test_buffer_backpressure_cancel_and_drop_all():
    buf = GroupBuffer(capacity=4)
    tasks = [Task(f"t{i}", "p", "a") for i in range(3)]
    a = buf.submit(tasks, 1, 1, 0, ahead=True)
    assert a is not None
    assert buf.submit(tasks, 1, 2, 0, ahead=True) is None  # would exceed the bound: refused
    b = buf.submit(tasks, 1, 1, 0)  # the learner's own request is always admitted
    assert b is not None and buf.occupancy() == 6
    assert buf.cancel(b.id) and buf.occupancy() == 3
    assert not buf.cancel(999)
    assert buf.drop_all() == 3 and buf.dropped_pending == 3 and buf.occupancy() == 0


def test_every_request_ends_in_one_state_and_a_planted_loss_shows():
    from posttrain.rl.buffer import RequestState

    buf = GroupBuffer(capacity=16)
    tasks = [Task(f"t{i}", "p", "a") for i in range(3)]
    taken, cancelled, dying, dropped = (buf.submit(tasks, 1, k, 0) for k in range(4))
    assert None not in (taken, cancelled, dying, dropped)
    got = buf.next_request(timeout=1)
    assert got is taken
    buf.finish(FinishedRollout(got, [_group(t.id, [0]) for t in tasks], 0, 0.1, 0))
    buf.take(got, 0, 1)
    buf.finish(FinishedRollout(got, [_group(t.id, [0]) for t in tasks], 0, 0.1, 1))  # a second result: never delivered
    held = buf.next_request(timeout=1)
    assert held is cancelled and buf.cancel(held.id)  # cancelled while running: its result is discarded later
    buf.finish(FinishedRollout(held, [_group(t.id, [0]) for t in tasks], 0, 0.1, 0))
    assert buf.next_request(timeout=1) is dying  # planted: a producer takes it and dies without handing it back
    before_close = buf.ledger()
    assert before_close["lost"] == 0 and before_close["pending"] == 6  # still running, and the last one queued
    assert buf.drop_all() == 3  # the queued one; the running one is not the learner's to drop
    buf.close()
    ledger = buf.ledger()
    assert ledger == {"submitted": 12, "taken": 3, "cancelled": 3, "dropped_pending": 3, "pending": 0, "lost": 3,
                      "taken_twice": 0, "requeued": 0, "late_results": 1}
    assert [buf.state_of(r.id) for r in (taken, cancelled, dying, dropped)] == [
        RequestState.TAKEN, RequestState.CANCELLED, RequestState.LOST, RequestState.DROPPED]
    assert not buf.cancel(taken.id)  # an ended request stays in its one state


def test_a_request_handed_back_after_drop_all_is_dropped_and_a_requeue_is_counted():
    buf = GroupBuffer(capacity=16)
    tasks = [Task("t0", "p", "a")]
    a, b = buf.submit(tasks, 1, 0, 0), buf.submit(tasks, 1, 1, 0)
    ra = buf.next_request(timeout=1)
    buf.requeue(ra)  # a producer failed: sampled again, not lost
    assert buf.next_request(timeout=1) is a and a.requeues == 1
    rb = buf.next_request(timeout=1)
    assert rb is b
    buf.drop_all()
    buf.finish(FinishedRollout(a, [_group("t0", [0])], 0, 0.1, 0))  # handed back after the end: dropped
    buf.requeue(rb)  # ...and so is one that failed after it
    buf.close()
    ledger = buf.ledger()
    assert ledger["dropped_pending"] == 2 and ledger["lost"] == 0 and ledger["requeued"] == 1 and ledger["taken"] == 0


def test_truncated_importance_weights_and_decoupled_clip_by_hand():
    learner_old = torch.tensor([[math.log(0.5), math.log(0.2), math.log(0.9)]])
    behaviour = torch.tensor([[math.log(0.25), math.log(0.4), math.log(0.3)]])
    w = truncated_importance_weights(learner_old, behaviour, cap=2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 2.0]]))  # 0.5/0.25 = 2, 0.2/0.4 = 0.5, 0.9/0.3 = 3 -> cap 2
    # the clip is taken against the learner's own pre-update policy, not the behaviour policy
    logp = torch.tensor([[math.log(0.7), math.log(0.2), math.log(0.9)]])
    pg, clipped = clipped_policy_loss(logp, learner_old, torch.tensor([1.0]), 0.2, 0.28)
    ratios = [0.7 / 0.5, 1.0, 1.0]
    expected = [-min(r, min(max(r, 0.8), 1.28)) for r in ratios]
    assert torch.allclose(pg, torch.tensor([expected]))
    assert clipped.tolist() == [[True, False, False]]
    weighted = pg * w
    assert torch.allclose(weighted, torch.tensor([[expected[0] * 2.0, expected[1] * 0.5, expected[2] * 2.0]]))


class _Runner:
    """A stand-in producer runner: `fail_load` makes its first load raise, as a half-applied update would."""

    def __init__(self, board, fail_load):
        self.board, self.fail_load, self.version, self.ran_with = board, fail_load, -1, []
        self.sandbox_lines: list[str] | str = []  # what `sandbox_failures` answers next ("raise": it fails)

    def load(self, board):
        if self.fail_load:
            raise RuntimeError("weights mismatch")
        self.version = board.version
        return self.version

    def run(self, request):
        self.ran_with.append(self.version)
        return [_group(t.id, [self.version] * request.n) for t in request.tasks]

    def sandbox_failures(self):
        lines, self.sandbox_lines = self.sandbox_lines, []
        if lines == "raise":
            raise RuntimeError("pipe closed")
        return lines

    def sampler_state(self):
        return None

    def load_sampler_state(self, state):
        pass

    def close(self):
        pass


def test_a_producer_that_fails_to_load_never_samples_with_the_new_version():
    board = WeightBoard({"w": torch.zeros(2)}, 0, shared=False)
    buf = GroupBuffer(capacity=8)
    runners = []

    def make():
        runners.append(_Runner(board, fail_load=len(runners) == 1))  # only the second runner built fails to load
        return runners[-1]

    producer = Producer(0, make, buf, board, requeue_on_new=False)
    producer.start()
    first = buf.submit([Task("a", "p", "x")], 2, for_step=1, min_version=0)
    assert buf.take(first, 0, 0, timeout=10).groups[0].trajectories[0].turns[0].completion.policy_version == 0
    producer.runner = make()  # the next runner fails its first load
    board.publish({"w": torch.ones(2)}, 1)
    second = buf.submit([Task("b", "p", "x")], 2, for_step=2, min_version=1)
    taken = buf.take(second, 1, 0, timeout=10)
    producer.close()
    assert [f.request for f in producer.failures] == [second.id]  # in the record, and re-queued
    assert runners[1].ran_with == []  # the runner whose load failed sampled nothing
    assert runners[2].ran_with == [1]  # its replacement acknowledged version 1 before sampling
    assert taken.staleness == [0] and buf.requeued == 1


def test_sandbox_failures_in_a_producers_process_reach_the_loop_and_never_cost_its_groups():
    board = WeightBoard({"w": torch.zeros(2)}, 0, shared=False)
    buf = GroupBuffer(capacity=8)
    runner = _Runner(board, fail_load=False)
    runner.sandbox_lines = ["sandbox worker 1 died (RayActorError: gone); rebuilt, its executions re-submitted"]
    producer = Producer(3, lambda: runner, buf, board, requeue_on_new=False)
    producer.start()
    first = buf.submit([Task("a", "p", "x")], 2, for_step=1, min_version=0)
    assert len(buf.take(first, 0, 0, timeout=10).groups) == 1
    runner.sandbox_lines = "raise"  # the runner cannot say: the groups still arrive, and the gap is on record
    second = buf.submit([Task("b", "p", "x")], 2, for_step=1, min_version=0)
    assert len(buf.take(second, 0, 0, timeout=10).groups) == 1
    deadline = time.time() + 10
    while len(producer.sandbox_failures) < 2 and time.time() < deadline:
        time.sleep(0.01)
    producer.close()
    assert [f.producer for f in producer.sandbox_failures] == [3, 3]
    assert "sandbox worker 1 died" in producer.sandbox_failures[0].message
    assert "pipe closed" in producer.sandbox_failures[1].message


@pytest.mark.slow
def test_a_killed_producer_process_has_its_request_requeued_and_the_run_continues(cfg, one_thread):
    cfg = _with(cfg.model_copy(update={"name": "fault"}), train={"steps": 4},
                rollout={"mode": "async", "max_staleness": 1, "producer_kind": "process"})
    killed = []

    def kill(result):
        if result.step == 1:
            proc = trainer.async_loop.producers[0].runner.process
            proc.kill()
            killed.append(proc.pid)

    trainer = Trainer(cfg, on_step=kill)
    with pytest.warns(UserWarning, match="rollout producer 0 failed"):
        trainer.run()
    trainer.close()
    assert killed
    with RunStore(cfg.path / "run.sqlite") as store:
        steps = store.steps()
        assert [s for s, _ in steps] == [1, 2, 3, 4]
        assert sum(m["producer_failures"] for _, m in steps) >= 1
        assert sum(m["requeued_requests"] for _, m in steps) >= 1
        assert any(a["kind"] == "producer_failure" for a in store.alerts())
        # every consumed group stored once: no request lost, none used twice
        assert store.count("samples") == sum(int(m["groups_sampled"]) for _, m in steps) * cfg.sampling.n
        rows = list(store.db.execute("SELECT step, group_idx, COUNT(*) FROM groups GROUP BY step, group_idx"))
        assert all(c == 1 for _, _, c in rows)
    ledger = trainer.async_loop.buffer.ledger()
    assert ledger["lost"] == 0 and ledger["taken_twice"] == 0 and ledger["taken"] > 0


@pytest.mark.slow
def test_async_resume_at_staleness_zero_is_the_uninterrupted_run(cfg):
    base = _with(cfg, train={"steps": 6, "checkpoint_every": 3},
                 rollout={"mode": "async", "max_staleness": 0, "producer_kind": "thread"})
    full = Trainer(base.model_copy(update={"name": "full"}))
    full.run()
    full.close()
    cut_cfg = base.model_copy(update={"name": "cut"})
    first = Trainer(cut_cfg)
    first.run(stop_at=4)
    first.close()
    resumed = Trainer(cut_cfg, resume=True)
    assert resumed.step == 3
    resumed.run()
    resumed.close()
    for (k, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), k
    with RunStore(cut_cfg.path / "run.sqlite") as store:
        assert store.info()["resume_dropped_groups"] == 0


@pytest.mark.slow
def test_async_resume_drops_and_counts_the_pending_look_ahead(cfg):
    base = _with(cfg.model_copy(update={"name": "ahead"}), train={"steps": 4, "checkpoint_every": 2},
                 rollout={"mode": "async", "max_staleness": 1, "producer_kind": "thread"})
    first = Trainer(base)
    first.run(stop_at=3)
    first.close()
    resumed = Trainer(base, resume=True)
    resumed.run()
    resumed.close()
    with RunStore(base.path / "run.sqlite") as store:
        assert store.info()["resume_dropped_groups"] >= base.train.prompts_per_step  # step 3's look-ahead
        assert [s for s, _ in store.steps()] == [1, 2, 3, 4]


def test_live_progress_shows_staleness_and_idle_fractions():
    from posttrain.cli.train import HeldOut, step_info

    step = {"reward": 0.5, "pass_rate": 0.25, "groups_kept": 2, "staleness_max": 2, "staleness_mean": 1.25,
            "learner_idle_frac": 0.1, "producer_idle_frac": 0.5}
    assert "stale 2/1.2  idle L 10% P 50%" in step_info(step, HeldOut("greedy_accuracy"))
    assert "stale" not in step_info({"reward": 0.5, "pass_rate": 0.25, "groups_kept": 2}, HeldOut("greedy_accuracy"))


def test_scheduler_hooks_submit_cancel_and_durations(cfg):
    cfg = _with(cfg.model_copy(update={"name": "hooks"}), train={"steps": 2},
                rollout={"mode": "async", "max_staleness": 1, "producer_kind": "thread"})
    trainer = Trainer(cfg)
    loop = trainer.async_loop
    extra = loop.submit(trainer.curriculum.sample(2), 2, for_step=1)
    later = loop.submit(trainer.curriculum.sample(2), 2, for_step=2)
    assert extra is not None and later is not None
    taken = loop.buffer.take(extra, 0, 1, timeout=60)
    assert len(taken.groups) == 2 and taken.duration_s > 0
    assert loop.cancel(later)
    trainer.run()
    trainer.close()
    ledger = loop.buffer.ledger()
    assert ledger["cancelled"] == 2 and ledger["lost"] == 0 and ledger["taken_twice"] == 0
    assert len(loop.durations()) >= 3 and all(d > 0 for d in loop.durations())


def test_update_mode_samples_each_turn_with_the_newest_weights_and_keeps_its_version():
    from posttrain.engine.base import Engine
    from posttrain.engine.mock import MockEngine
    from posttrain.rl.follow import FollowWeights
    from posttrain.rl.producer import follow
    from posttrain.types import SamplingParams, Turn

    board = WeightBoard({"w": torch.zeros(2)}, 0, shared=False)
    mock = MockEngine(["x"], cycle=True)
    engine = FollowWeights(mock, follow(board))
    assert isinstance(engine, Engine)
    first = engine.generate(["turn 1"], SamplingParams(n=1))[0][0]
    board.publish({"w": torch.ones(2)}, 1)  # the learner publishes between the episode's two turns
    second = engine.generate(["turn 2"], SamplingParams(n=1))[0][0]
    assert (first.policy_version, second.policy_version) == (0, 1)
    assert torch.equal(mock.weights["w"], torch.ones(2))
    task = Task("t", "p", "a")
    episode = Trajectory(task, [Turn([1], first), Turn([1, 2], second)], Verdict(1.0, True, VerdictStatus.OK, "v"))
    group = Group(task, [episode])
    assert group_version(group) == 0  # the oldest turn decides the staleness
    assert [turn.completion.policy_version for turn in episode.turns] == [0, 1]  # each turn keeps its own


@pytest.mark.parametrize("policy", ["update", "requeue"])
@pytest.mark.slow
def test_in_flight_policies_keep_the_bound(cfg, policy):
    cfg = _with(cfg, train={"steps": 4})
    trainer, run_cfg = _train(cfg, policy, mode="async", max_staleness=1, producer_kind="thread", on_new_weights=policy)
    steps, _ = _steps(run_cfg)
    assert [s for s, _ in steps] == [1, 2, 3, 4]
    assert all(m["staleness_max"] <= 1 for _, m in steps)
    ledger = trainer.async_loop.buffer.ledger()
    assert ledger["lost"] == 0 and ledger["taken_twice"] == 0
    if policy == "requeue":  # a look-ahead request still running when the weights changed is sampled again
        assert sum(m["requeued_requests"] for _, m in steps) == trainer.async_loop.buffer.requeued


_CHILD = """
import sys, torch
from posttrain.config import RunConfig
from posttrain.rl.trainer import Trainer
torch.set_num_threads(int(sys.argv[2]))
cfg = RunConfig.model_validate_json(open(sys.argv[1]).read())
Trainer(cfg).run()
"""


@pytest.mark.slow
def test_sigkilled_async_run_resumes_to_the_uninterrupted_run(cfg, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time as _time

    base = _with(cfg, train={"steps": 8, "checkpoint_every": 2},
                 rollout={"mode": "async", "max_staleness": 0, "producer_kind": "thread"})
    full = Trainer(base.model_copy(update={"name": "full"}))
    full.run()
    full.close()

    cut = base.model_copy(update={"name": "killed"})
    (tmp_path / "cfg.json").write_text(cut.model_dump_json())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path / "cfg.json"), str(torch.get_num_threads())],
                             env=env)
    deadline = _time.monotonic() + 300
    while not list((cut.path / "checkpoints").glob("step_*[0-9]")) and child.poll() is None:
        assert _time.monotonic() < deadline, "no checkpoint appeared"
        _time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    resumed = Trainer(cut, resume=True)
    assert 2 <= resumed.step < 8
    resumed.run()
    resumed.close()
    for (k, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), k
    with RunStore(cut.path / "run.sqlite") as store:
        assert [s for s, _ in store.steps()] == list(range(1, 9))
        assert store.info()["resume_dropped_groups"] == 0  # nothing is pending between steps at staleness 0


@pytest.mark.slow
def test_cli_train_with_set_rollout_mode_async(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli import app

    cfg = tmp_path / "run.toml"
    cfg.write_text(f"""
name = "cli_async"
run_dir = "{tmp_path / 'runs'}"
tensorboard = false
[model]
path = "{tiny_model_dir}"
[tasks]
digits = 1
[reward]
verifier = "numeric"
tolerance = 4.0
[sampling]
n = 4
max_tokens = 4
[train]
steps = 3
prompts_per_step = 2
checkpoint_every = 0
[eval]
every = 0
size = 10
""")
    res = CliRunner().invoke(app, ["train", str(cfg), "--set", "rollout.mode='async'", "--set", "rollout.max_staleness=1"])
    assert res.exit_code == 0, res.output
    with RunStore(tmp_path / "runs" / "cli_async" / "run.sqlite") as store:
        steps = store.steps()
    assert [s for s, _ in steps] == [1, 2, 3] and all(m["staleness_max"] <= 1 for _, m in steps)


def test_the_learner_leaves_the_producer_processes_their_cores():
    from posttrain.rl.async_loop import learner_thread_budget

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert learner_thread_budget(1, cores=2) == 1 and torch.get_num_threads() == 1
        torch.set_num_threads(2)
        assert learner_thread_budget(3, cores=2) == 1  # never below one thread
        torch.set_num_threads(2)
        assert learner_thread_budget(1, cores=8) == 2  # room for both: never raised, never lowered
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_update_mode_in_producer_processes_keeps_the_bound(cfg, one_thread):
    """`on_new_weights = "update"` on the process back end (threads: above; Ray: tests/distributed)."""
    cfg = _with(cfg, train={"steps": 3})
    trainer, run_cfg = _train(cfg, "proc_update", mode="async", max_staleness=1, producer_kind="process",
                              on_new_weights="update")
    steps, _ = _steps(run_cfg)
    assert [s for s, _ in steps] == [1, 2, 3] and all(m["staleness_max"] <= 1 for _, m in steps)
    assert trainer.async_loop.buffer.ledger()["lost"] == 0
