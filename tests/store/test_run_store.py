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
