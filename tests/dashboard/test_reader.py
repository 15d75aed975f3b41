"""The dashboard's reads: read-only connections (a write through them fails), incremental step columns, a
resume's truncation noticed, the scheduler's tables when present and a clear absence when not."""

from __future__ import annotations

import sqlite3

import pytest
from dashboard_runs import make_run, write_step

from posttrain.dashboard.reader import RunReader, connect, find_runs


def test_connections_are_read_only_and_find_runs(tmp_path):
    store = make_run(tmp_path / "runs" / "a", 3)
    with pytest.raises(sqlite3.OperationalError):
        connect(store.path).execute("DELETE FROM steps")
    assert find_runs([tmp_path / "runs"]) == [tmp_path / "runs" / "a"] == find_runs([tmp_path / "runs" / "a"])
    assert find_runs([tmp_path / "nothing"]) == []


def test_steps_are_incremental_and_a_truncation_resets(tmp_path):
    store = make_run(tmp_path / "a", 5)
    reader = RunReader(tmp_path / "a")
    first = reader.steps_after(-1)
    assert first["steps"] == [1, 2, 3, 4, 5] and first["cols"]["reward"][-1] == 0.15 and not first["reset"]
    assert reader.steps_after(5)["steps"] == []
    write_step(store, 6)
    got = reader.steps_after(5)
    assert got["steps"] == [6] and got["cols"]["kl"] == [0.06]
    store.truncate_after(3)  # a resume from step 3's checkpoint
    again = reader.steps_after(6)
    assert again["reset"] and again["steps"] == [1, 2, 3]


def test_groups_carry_the_advantages_the_update_used(tmp_path):
    make_run(tmp_path / "a", 2)
    g = RunReader(tmp_path / "a").groups(2)
    used, dropped = g["groups"]
    assert used["advantages"] == pytest.approx([-0.866, 0.866, -0.866, 0.866], abs=1e-3)  # (r - 0.5) / std (unbiased)
    assert dropped["advantages"] is None and not dropped["used"] and len(used["samples"]) == 4


def test_scheduler_tables_read_when_present_and_said_absent_when_not(tmp_path):
    make_run(tmp_path / "a", 4)
    make_run(tmp_path / "b", 4, domains=False)
    a, b = RunReader(tmp_path / "a"), RunReader(tmp_path / "b")
    d = a.domains()
    assert d["present"] and d["latest"]["code"]["pass_rate"] == 0.7 and d["series"]["add"]["steps"] == [1, 2, 3, 4]
    assert b.domains() == {"present": False, "latest": {}, "series": {}}
    f = a.failures()
    assert f["source"] == "failures" and {c["category"]: c["count"] for c in f["categories"]} == {"timeout": 4, "wrong_answer": 3}
    assert b.failures()["source"] == "samples"
    assert a.staleness()["cols"]["max"] == [0, 0, 0, 0]  # samples drawn by policy version step - 1
    assert a.summary()["alerts"] == 1 and a.alerts()[0]["kind"] == "grad_norm_spike"
    assert a.episode(3, 0)["turns"][0]["observation"] == "value=42"


def test_a_long_run_comes_decimated_with_spikes_and_the_newest_step_kept(tmp_path):
    store = make_run(tmp_path / "a", 3, domains=False)
    with store.db:
        store.db.executemany("INSERT INTO steps(step, time, metrics) VALUES (?, ?, ?)",
                             [(s, float(s), '{"grad_norm": %s, "reward": %s}' % (50.0 if s == 777 else 1.0, s / 1e4))
                              for s in range(4, 5001)])
    got = RunReader(tmp_path / "a").steps_after(-1, max_points=500)
    assert len(got["steps"]) <= 501 and got["bucket"] == 20
    assert max(got["cols"]["grad_norm"]) == 50.0  # the one-step spike survives
    assert got["steps"][-1] == 5000 and got["cols"]["reward"][-1] == 0.5  # the newest value exactly
    assert got["steps"] == sorted(got["steps"])
    assert RunReader(tmp_path / "a").steps_after(-1, max_points=10_000)["steps"] == list(range(1, 5001))  # short: all


def test_per_token_records_are_sent_only_when_asked_and_read_as_absent_from_an_older_store(tmp_path):
    from dashboard_runs import PLANTED_GAP

    store = make_run(tmp_path / "a", 3)
    reader = RunReader(tmp_path / "a")
    assert "per_token" not in reader.samples()[0] and "per_token" not in reader.groups(3)["groups"][0]["samples"][0]
    g, j, k, gap = PLANTED_GAP
    row = next(s for s in reader.samples(tokens=True) if (s["step"], s["group"], s["sample"]) == (3, g, j))
    tok = row["per_token"]
    assert "".join(tok["pieces"]) == row["completion"] == "3+1"
    assert tok["learner_logp"][k] - tok["sampler_logp"][k] == pytest.approx(gap, abs=0.01)
    dropped = reader.groups(3, tokens=True)["groups"][1]["samples"][0]["per_token"]
    assert dropped["learner_logp"] == [None] * 3 and dropped["loss_mask"] == [0, 0, 0]
    with store.db:  # a store from before the per-token records
        store.db.execute("DROP TABLE step_tokens")
        store.db.execute("DROP TABLE sample_tokens")
    assert all(s["per_token"] is None for s in reader.samples(tokens=True))
    assert reader.groups(3, tokens=True)["groups"][0]["samples"][0]["per_token"] is None
