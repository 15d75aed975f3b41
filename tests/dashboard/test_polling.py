"""What a poll costs the trainer: an unchanged store answers 304 with no SQLite read, every query the page's polls
issue is a primary-key range (never a scan of `samples`), the views over samples read only the new steps, and the
page asks for nothing and draws nothing while no store changes (an off-screen chart is drawn when scrolled to)."""

from __future__ import annotations

import sqlite3
import time

import httpx
import pytest
from dashboard_runs import make_run, write_step

from posttrain.dashboard import reader as reader_mod
from posttrain.dashboard.headless import Browser
from posttrain.dashboard.reader import RunReader, store_version
from posttrain.store.run_store import SampleRow


def test_an_unchanged_store_answers_304_and_a_commit_changes_the_etag(served_runs):
    server, stores = served_runs
    for path in ("/api/runs", "/api/runs/0/steps?after=20", "/api/runs/0/staleness?after=-1", "/api/runs/0/evals",
                 "/api/runs/0/failures", "/api/runs/0/domains", "/api/runs/0/alerts"):
        first = httpx.get(server.url + path)
        tag = first.headers["etag"]
        again = httpx.get(server.url + path, headers={"If-None-Match": tag})
        assert again.status_code == 304 and again.content == b"", path
    write_step(stores[0], 21)
    changed = httpx.get(server.url + "/api/runs/0/steps?after=20", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.json()["steps"] == [21]
    runs = httpx.get(server.url + "/api/runs").json()
    assert runs[0]["version"] == store_version(stores[0].path) and runs[0]["steps"] == 21


def test_a_live_poll_is_one_request_with_the_new_steps_of_the_runs_held(served_runs):
    server, stores = served_runs
    url = server.url + "/api/poll?after=0:20,1:12"
    first = httpx.get(url)
    body = first.json()
    assert [r["id"] for r in body["runs"]] == [0, 1] and body["runs"][0]["steps"] == 20
    assert body["steps"]["0"]["steps"] == [] and body["steps"]["1"]["steps"] == []
    again = httpx.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""  # no store changed: nothing read, nothing sent
    write_step(stores[0], 21)
    changed = httpx.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert changed.status_code == 200
    got = changed.json()
    assert got["steps"]["0"]["steps"] == [21] and got["steps"]["1"]["steps"] == []
    assert got["runs"][0]["version"] == store_version(stores[0].path)
    assert "0" not in httpx.get(server.url + "/api/poll?after=1:12").json()["steps"]  # only the runs named
    assert httpx.get(server.url + "/api/poll?after=7:1").json()["steps"] == {}  # no such run: nothing, no error
    bad = httpx.get(server.url + "/api/poll?after=0-20")
    assert bad.status_code == 400 and "run:step" in bad.json()["detail"]


def test_polls_query_by_primary_key_range_only(tmp_path, monkeypatch):
    store = make_run(tmp_path / "a", 6, domains=False)
    issued: list[str] = []
    connect = reader_mod.connect

    def traced(path):
        db = connect(path)
        db.set_trace_callback(issued.append)
        return db

    monkeypatch.setattr(reader_mod, "connect", traced)
    r = RunReader(tmp_path / "a")
    r.steps_after(-1), r.staleness(-1), r.failures(), r.summary(), r.evals(), r.alerts(), r.domains()
    write_step(store, 7)
    issued.clear()
    r.steps_after(6), r.staleness(6), r.failures(), r.summary()
    plain = sqlite3.connect(store.path)
    for sql in issued:
        if sql.startswith("PRAGMA"):
            continue
        plan = " ".join(row[-1] for row in plain.execute("EXPLAIN QUERY PLAN " + sql.replace("?", "6")))
        scans = "SCAN samples" in plan or "SCAN groups" in plan or ("SCAN steps" in plan and not sql.endswith("LIMIT 1"))
        assert not scans and "TEMP B-TREE" not in plan, (sql, plan)  # a newest-row read walks back one row
    assert any("step > " in sql and "FROM samples" in sql for sql in issued)  # the incremental reads happened
    issued.clear()
    r.failures(), r.memo("summary", r.summary), r.memo("summary", r.summary)
    assert [s for s in issued if "samples" in s] == []  # unchanged store: the memo answers, nothing is read


def test_views_over_samples_are_incremental_and_reset_on_truncation(tmp_path):
    store = make_run(tmp_path / "a", 4, domains=False)
    r = RunReader(tmp_path / "a")
    assert r.failures()["categories"] == [] and r.staleness(-1)["steps"] == [1, 2, 3, 4]
    bad = [SampleRow(0, j, "t0", f"out{j}", 3, "length", None, None, "timeout", "exact@abc", "slow", 2, 0.5) for j in range(3)]
    store.log_step(5, {"reward": 0.0}, [], bad)
    got = r.failures()
    assert [(c["category"], c["count"]) for c in got["categories"]] == [("timeout", 3)]
    assert got["categories"][0]["examples"][0]["step"] == 5
    assert r.staleness(4) == {"reset": False, "steps": [5], "cols": {"min": [2], "max": [2], "mean": [2.0], "samples": [3]}}
    store.truncate_after(3)
    assert r.failures()["categories"] == []  # the failures of the dropped steps are gone
    assert r.staleness(5)["reset"] and r.staleness(-1)["steps"] == [1, 2, 3]


@pytest.mark.slow  # a browser: ~5 s on a loaded machine
def test_an_idle_page_asks_for_nothing_and_off_screen_charts_wait(served_runs):
    server, stores = served_runs
    with Browser() as browser:
        page = browser.open(server.url + "/")
        page.wait_for("document.body.dataset.ready === '1' && document.body.dataset.complete === '1'")
        ev = page.evaluate
        count = "window.dashboard.stepReads"  # new steps read, by a live poll's answer or a run's steps route
        time.sleep(0.3)
        before, polls = ev(count), ev("window.dashboard.polls")
        page.wait_for(f"window.dashboard.polls >= {polls + 3}", timeout=10)  # three polls of unchanged stores
        assert ev(count) == before
        # a new step: the on-screen charts are redrawn, the off-screen ones only marked
        bottom = "verifier_errors"
        ev("document.querySelector('.chart[data-key=reward]').scrollIntoView()")
        page.wait_for("window.dashboard.onScreen['reward'] === true", timeout=5)
        assert ev(f"window.dashboard.onScreen['{bottom}']") is False
        draws = ev("window.dashboard.draws")
        ev("window.dashboard.staleCharts[0].mark = 'kept'; document.getElementById('domains').firstChild.dataset.mark = 'kept'")
        write_step(stores[0], 21)
        page.wait_for("JSON.parse(document.body.dataset.lastSteps)['0'] === 21", timeout=10)
        assert ev(count) > before
        assert ev(f"window.dashboard.charts['{bottom}'] === undefined")  # never near the screen: not even built
        offscreen = ev("Object.keys(window.dashboard.charts).filter(k => !window.dashboard.onScreen[k])")
        assert offscreen and all(ev(f"window.dashboard.dirty['{k}']") is True for k in offscreen)  # marked, not drawn
        assert 0 < ev("window.dashboard.draws") - draws < len(ev("Object.keys(window.dashboard.charts)"))
        # the slow views: the staleness chart extended in place; the unchanged domains table not drawn again
        page.wait_for("window.dashboard.staleCharts[0].data[0].length === 21", timeout=10)
        assert ev("window.dashboard.staleCharts[0].mark") == "kept"
        assert ev("document.getElementById('domains').firstChild.dataset.mark") == "kept"
        ev(f"document.querySelector('.chart[data-key={bottom}]').scrollIntoView()")
        page.wait_for(f"window.dashboard.charts['{bottom}'].data[0].length === 21", timeout=5)
        assert page.console_errors() == []
