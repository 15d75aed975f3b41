"""The dashboard in headless Chromium: it renders with no console errors, shows the stored numbers, keeps run
text inert, and updates as the trainer appends steps (and as new runs start)."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from dashboard_runs import make_run, write_step

from posttrain.dashboard.headless import Browser

READY = "document.body.dataset.ready === '1'"


def last_steps(page) -> dict:
    return json.loads(page.evaluate("document.body.dataset.lastSteps || '{}'"))


def test_console_check_catches_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom'); notDefined();</script></body></html>")
    with Browser() as browser:
        page = browser.open(bad.resolve().as_uri())
        page.wait_for("document.readyState === 'complete'")
        time.sleep(0.2)
        errors = page.console_errors()
    assert any("boom" in e for e in errors) and any("notDefined" in e for e in errors)


@pytest.mark.slow
def test_page_renders_the_stored_run(served_runs):
    server, _ = served_runs
    html = httpx.get(server.url + "/").text
    assert "http://" not in html and "https://" not in html  # every asset is served from the package
    assert httpx.get(server.url + "/static/uPlot.iife.min.js").status_code == 200
    assert httpx.get(server.url + "/static/../app.py").status_code == 404
    with Browser() as browser:
        page = browser.open(server.url + "/")
        page.wait_for(READY)
        page.wait_for("document.querySelectorAll('.group').length === 2")
        page.wait_for("document.querySelectorAll('tr.episode').length === 1 && document.querySelectorAll('tr.sample').length > 0")
        ev = page.evaluate
        assert page.console_errors() == []
        assert ev("document.title") == "posttrain dashboard"  # the planted script in a completion never ran
        assert last_steps(page) == {"0": 20, "1": 12}
        keys = ev("Array.from(document.querySelectorAll('#charts .chart')).map(c => c.dataset.key)")
        assert keys[:4] == ["reward", "pass_rate", "kl", "entropy"] and "verifier_errors" in keys
        assert ev("document.querySelectorAll('#charts canvas').length") == len(keys)
        assert ev("document.querySelector('td[data-key=reward][data-run=\"0\"]').textContent") == "0.3000"
        assert ev("document.querySelector('td[data-key=kl][data-run=\"1\"]').textContent") == "0.1200"
        assert ev("document.querySelectorAll('#alerts tr.alert[data-kind=grad_norm_spike]').length") == 2
        assert ev("Array.from(document.querySelectorAll('tr[data-domain]')).map(r => r.dataset.domain)") == ["add", "code"]
        assert "no per-domain scheduler state" in ev("document.getElementById('domains').textContent")
        assert "timeout: 4" in ev("document.getElementById('failures').textContent")
        assert ev("Array.from(document.querySelectorAll('.group .adv')).map(a => a.textContent)") == \
            ["-0.8659", "0.8659", "-0.8659", "0.8659", "-", "-", "-", "-"]
        assert ev("document.getElementById('reward-hist').dataset.n") == "8"
        assert ev("document.querySelectorAll('#held-out canvas').length") == 1
        assert ev("document.querySelectorAll('#staleness canvas').length") == 2
        assert "does not keep" in ev("document.getElementById('per-token').textContent")
        assert 'document.title="pwned"' in ev("document.getElementById('groups').textContent")  # shown as text
        ev("document.querySelector('tr.episode a').click()")
        page.wait_for("document.getElementById('transcript').textContent.includes('value=42')")
        assert page.console_errors() == []


@pytest.mark.slow
def test_page_updates_as_steps_are_appended_and_runs_start(served_runs, tmp_path):
    server, stores = served_runs
    with Browser() as browser:
        page = browser.open(server.url + "/")
        page.wait_for(READY)
        t0 = time.perf_counter()
        write_step(stores[0], 21)
        page.wait_for("JSON.parse(document.body.dataset.lastSteps)['0'] === 21", timeout=5)
        assert time.perf_counter() - t0 < 2.0
        assert page.evaluate("document.querySelector('td[data-key=reward][data-run=\"0\"]').textContent") == "0.3100"
        stores[0].add_alert({"step": 21, "kind": "entropy_collapse", "message": "step 21: entropy collapsed"})
        page.wait_for("document.querySelectorAll('#alerts tr.alert[data-kind=entropy_collapse]').length === 1", timeout=5)
        late = make_run(tmp_path / "runs" / "c", 3, "c", domains=False)  # a run started after the page opened
        page.wait_for("JSON.parse(document.body.dataset.lastSteps)['2'] === 3", timeout=5)
        late.close()
        assert page.console_errors() == []
