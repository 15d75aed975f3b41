import json
import sqlite3

from posttrain.store import RunStore, SampleRow


def test_steps_groups_samples_roundtrip(tmp_path):
    with RunStore(tmp_path / "run.sqlite") as s:
        s.set_info(config={"a": 1}, code={"git": "abc"})
        s.log_step(
            1,
            {"reward": 0.5},
            groups=[(0, "t1", [1.0, 0.0], True)],
            samples=[SampleRow(0, 0, "t1", "4", 1, "stop", 1.0, 1, "ok", "exact@x", "", 0)],
        )
        s.log_step(2, {"reward": 0.7})
        s.log_eval(2, "held_out", {"greedy_accuracy": 0.4}, {"t9": 1.0})
        s.log_checkpoint(2, "/ckpt/2")
        assert s.info()["config"] == {"a": 1}
        assert s.metrics("reward") == [(1, 0.5), (2, 0.7)]
        assert s.evals("held_out")[0][2]["greedy_accuracy"] == 0.4
        assert s.checkpoints() == [(2, "/ckpt/2")]
        assert s.count("samples") == 1 and s.count("groups") == 1


def test_truncate_after_removes_redone_steps(tmp_path):
    with RunStore(tmp_path / "run.sqlite") as s:
        for step in range(1, 6):
            s.log_step(step, {"x": step}, groups=[(0, "t", [0.0], False)])
            s.log_eval(step, "held_out", {"a": 0.0}, {})
        s.truncate_after(3)
        assert [st for st, _ in s.steps()] == [1, 2, 3]
        assert s.count("groups") == 3 and len(s.evals()) == 3


def test_readable_by_plain_sqlite_while_open(tmp_path):
    path = tmp_path / "run.sqlite"
    with RunStore(path) as s:
        s.log_step(1, {"reward": 1.0})
        other = sqlite3.connect(path)
        assert other.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == 1
        other.close()


def test_verdict_info_is_stored_beside_details(tmp_path):
    from posttrain.store import EvalSampleRow

    info = {"passed": 2, "total": 3, "failures": [{"name": "line 3", "error": "assertion failed"}]}
    with RunStore(tmp_path / "run.sqlite") as s:
        s.log_step(1, {"reward": 0.5}, samples=[SampleRow(0, 0, "t1", "x", 1, "stop", 0.6, 0, "ok", "python_tests@x",
                                                           "2/3 tests passed", 0, 0.1, info)])
        s.log_eval_samples(1, "held_out", [EvalSampleRow("t1", 0, "x", 0.6, 0, "ok", "python_tests@x", "2/3 tests passed", info),
                                           EvalSampleRow("t2", 0, "y", 1.0, 1, "ok", "exact@x", "")])
        (stored,) = s.db.execute("SELECT info FROM samples").fetchone()
        assert json.loads(stored) == info
        by_task = {r["task_id"]: r for r in s.eval_samples("held_out")}
        assert by_task["t1"]["info"] == info and by_task["t1"]["details"] == "2/3 tests passed"
        assert by_task["t2"]["info"] == {}


def test_a_store_from_before_info_is_migrated_and_its_rows_read_as_empty_info(tmp_path):
    path = tmp_path / "run.sqlite"
    old = sqlite3.connect(path)
    old.executescript("""
CREATE TABLE samples (step INTEGER NOT NULL, group_idx INTEGER NOT NULL, sample_idx INTEGER NOT NULL,
    task_id TEXT NOT NULL, completion TEXT NOT NULL, n_tokens INTEGER NOT NULL, finish TEXT NOT NULL,
    score REAL, passed INTEGER, status TEXT NOT NULL, verifier TEXT NOT NULL, details TEXT NOT NULL,
    policy_version INTEGER NOT NULL, PRIMARY KEY (step, group_idx, sample_idx));
CREATE TABLE eval_samples (step INTEGER NOT NULL, name TEXT NOT NULL, task_id TEXT NOT NULL, sample_idx INTEGER NOT NULL,
    response TEXT NOT NULL, score REAL, passed INTEGER, status TEXT NOT NULL, verifier TEXT NOT NULL, details TEXT NOT NULL,
    PRIMARY KEY (step, name, task_id, sample_idx));
INSERT INTO samples VALUES (1, 0, 0, 't', 'x', 1, 'stop', 1.0, 1, 'ok', 'exact@x', '', 0);
INSERT INTO eval_samples VALUES (1, 'held_out', 't', 0, 'x', 1.0, 1, 'ok', 'exact@x', '{"passed": 1}');
""")
    old.commit()
    old.close()
    with RunStore(path) as s:
        assert s.db.execute("SELECT latency_s, info FROM samples").fetchone() == (None, "{}")
        (row,) = s.eval_samples()
        assert row["info"] == {} and row["details"] == '{"passed": 1}'  # old details kept as they were
        s.log_step(2, {"r": 1.0}, samples=[SampleRow(0, 0, "t", "x", 1, "stop", 1.0, 1, "ok", "e@x", "", 0, None, {"k": 1})])
        assert json.loads(s.db.execute("SELECT info FROM samples WHERE step = 2").fetchone()[0]) == {"k": 1}


def test_a_trajectory_row_carries_its_verdicts_info():
    from posttrain.types import Completion, FinishReason, Task, Trajectory, Verdict

    c = Completion([1, 2], "x", [0.0, 0.0], FinishReason.STOP)
    t = Trajectory.single_turn(Task("t", "p"), [5], c, Verdict(0.5, False, details="1/2 tests passed", info={"passed": 1}))
    row = SampleRow.of(0, 1, t)
    assert (row.details, row.info) == ("1/2 tests passed", {"passed": 1})
    assert SampleRow.of(0, 2, Trajectory.single_turn(Task("t", "p"), [5], c)).info == {}


def test_agent_episodes_round_trip(tmp_path):
    from posttrain.store.run_store import EpisodeRow, RunStore

    with RunStore(tmp_path / "run.sqlite") as store:
        store.log_episodes(0, [EpisodeRow(0, "a", "solved", 1, 1.0, 3, 100, 20, 0.5, 0.0, {"turns": [1]}),
                               EpisodeRow(1, "b", "env_error", 0, None, 1, 10, 2, 0.1, 0.0, {})])
        store.log_episodes(2, [EpisodeRow(0, "a", "failed", 0, 0.0, 5, 10, 2, 0.1, 0.0, {})])
        rows = store.episodes()
        assert [(s, r.task_id, r.status) for s, r in rows] == [(0, "a", "solved"), (0, "b", "env_error"),
                                                                (2, "a", "failed")]
        assert rows[0][1].transcript == {} and store.episodes(0, transcripts=True)[0][1].transcript == {"turns": [1]}
        assert rows[1][1].reward is None
        store.truncate_after(1)
        assert store.count("episodes") == 2


def test_per_token_records_round_trip_within_float16(tmp_path):
    import math

    from posttrain.store.tokens import StepTokens, TokenRow

    sampler = [-0.1234, -2.5, -17.25, -0.0]
    learner = [-0.1236, -5.75, math.nan, -0.001]
    entropy = [0.01, 2.4567, math.nan, 1e-5]
    row = TokenRow(1, 3, ["4", "2", "", "<"], sampler, learner, entropy, [True, True, False, True])
    with RunStore(tmp_path / "run.sqlite") as s:
        s.log_step(4, {"reward": 1.0}, tokens=StepTokens.from_rows([row, TokenRow(0, 0, [], [], [], [], [])]))
        back = {(r.group_idx, r.sample_idx): r for r in s.sample_tokens(4)}
        assert s.sample_tokens(3) == [] and back[(0, 0)].pieces == []
        got = back[(1, 3)]
        assert got.pieces == row.pieces and got.loss_mask == row.loss_mask
        for want, have in ((sampler, got.sampler_logp), (learner, got.learner_logp), (entropy, got.entropy)):
            for a, b in zip(want, have):
                assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 2e-3 * max(1.0, abs(a))  # float16: 11 bits
        assert got.to_json()["learner_logp"] == [-0.124, -5.75, None, -0.001]
        # one row for the step: 2 bytes per value, one per mask entry, 4 per id: 4 tokens x (3 x 2 + 1 + 4)
        (size,) = s.db.execute("SELECT length(sampler_logp) + length(learner_logp) + length(entropy) + length(loss_mask)"
                               " + length(ids) FROM step_tokens WHERE step = 4").fetchone()
        assert size == 44 and s.count("step_tokens") == 1
        assert s.db.execute("SELECT COUNT(*) FROM token_pieces").fetchone()[0] == 4  # each text once
        s.log_step(5, {"reward": 1.0}, tokens=StepTokens.from_rows([row]))  # the same texts again: stored once
        assert s.db.execute("SELECT COUNT(*) FROM token_pieces").fetchone()[0] == 4
        s.truncate_after(4)
        assert s.count("step_tokens") == 1 and s.sample_tokens(5) == []
        s.truncate_after(3)
        assert s.count("step_tokens") == 0


def test_per_token_records_of_a_store_from_before_one_row_per_step(tmp_path):
    import json
    import math

    from posttrain.store.tokens import pack_f16

    with RunStore(tmp_path / "run.sqlite") as s:  # the one-row-per-sample table older stores hold
        s.db.execute("INSERT INTO sample_tokens VALUES (2, 0, 1, ?, ?, ?, ?, ?)",
                     (json.dumps(["a", "b"]), pack_f16([-0.5, -1.0]), None, pack_f16([0.25, 0.5]), bytes([1, 0])))
        (got,) = s.sample_tokens(2)
        assert (got.group_idx, got.sample_idx, got.pieces, got.loss_mask) == (0, 1, ["a", "b"], [True, False])
        assert got.sampler_logp == [-0.5, -1.0] and all(math.isnan(x) for x in got.learner_logp)


def test_float16_blobs_clamp_infinities_and_keep_nan():
    import math

    from posttrain.store.tokens import pack_f16, unpack_f16

    back = unpack_f16(pack_f16([-math.inf, 1e9, math.nan, 0.5]))
    assert back[:2] == [-65504.0, 65504.0] and math.isnan(back[2]) and back[3] == 0.5
    assert unpack_f16(None) == []


def test_a_store_from_before_per_token_records_gains_the_table(tmp_path):
    path = tmp_path / "run.sqlite"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE steps (step INTEGER PRIMARY KEY, time REAL NOT NULL, metrics TEXT NOT NULL)")
    old.commit()
    old.close()
    with RunStore(path) as s:
        assert s.sample_tokens(1) == [] and s.count("sample_tokens") == 0 and s.count("step_tokens") == 0


def test_a_read_only_store_never_writes_and_never_creates(tmp_path):
    """Readers (reports, `posttrain failures`, `--replay`) open the store read-only: a missing store is an error,
    not a new empty file; a write fails; a store from before a table or column was added is brought up to date once."""
    import pytest

    path = tmp_path / "run.sqlite"
    with pytest.raises(FileNotFoundError, match="no run store"):
        RunStore(path, readonly=True)
    assert not path.exists()
    with RunStore(path) as s:
        s.log_step(1, {"reward": 0.5})
        with RunStore(path, readonly=True) as r:  # beside the open writer
            assert r.metrics("reward") == [(1, 0.5)]
            with pytest.raises(sqlite3.OperationalError):
                r.log_step(2, {"reward": 1.0})
        s.log_step(2, {"reward": 0.7})  # the reader took no lock the writer waits on
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.executescript("CREATE TABLE steps (step INTEGER PRIMARY KEY, time REAL NOT NULL, metrics TEXT NOT NULL);"
                     "INSERT INTO steps VALUES (1, 0.0, '{\"reward\": 0.25}');")
    db.commit()
    db.close()
    with RunStore(old, readonly=True) as r:
        assert r.metrics("reward") == [(1, 0.25)] and r.failures() == [] and r.eval_samples() == []
