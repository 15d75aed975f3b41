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
        built = ev("document.querySelectorAll('#charts canvas').length")
        assert 0 < built < len(keys)  # the first screen's charts; the rest are built when scrolled to
        for key in keys:
            ev(f"document.querySelector('.chart[data-key={key}]').scrollIntoView()")
            page.wait_for(f"window.dashboard.charts['{key}'] !== undefined", timeout=5)
        assert ev("document.querySelectorAll('#charts canvas').length") == len(keys)
        page.wait_for("document.body.dataset.complete === '1'")  # the panels below the fold have loaded
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


@pytest.mark.slow
def test_a_page_left_open_on_a_long_run_keeps_its_series_bounded_with_spikes_and_the_newest_step(served_runs):
    from dashboard_runs import step_metrics

    server, stores = served_runs
    with Browser() as browser:
        page = browser.open(server.url + "/")
        page.wait_for(READY)
        points = page.evaluate("parseInt(document.body.dataset.maxPoints, 10)")
        last = 20 + 3 * points  # past twice the first load's points: the page must compact what it holds
        with stores[0].db:
            for s in range(21, last + 1):
                m = step_metrics(s)
                m["reward"] = 99.0 if s == 700 else m["reward"]  # a one-step spike among the compacted steps
                stores[0].db.execute("INSERT INTO steps(step, time, metrics) VALUES (?, ?, ?)", (s, float(s), json.dumps(m)))
        page.wait_for(f"JSON.parse(document.body.dataset.lastSteps)['0'] === {last}", timeout=10)
        held = page.evaluate("window.dashboard.data[0].steps.length")
        assert held <= 2 * points < last  # bounded: the page does not keep (and redraw) every step it saw
        assert page.evaluate("Math.max.apply(null, window.dashboard.data[0].cols.reward)") == 99.0  # the spike stays
        assert page.evaluate("window.dashboard.data[0].steps[window.dashboard.data[0].steps.length - 1]") == last
        newest = page.evaluate("document.querySelector('td[data-key=reward][data-run=\"0\"]').textContent")
        assert float(newest) == step_metrics(last)["reward"]  # the newest figure is exact, not a bucket's
        assert page.console_errors() == []


@pytest.mark.slow
def test_per_token_overlays_mark_the_planted_gap_entropy_and_masked_tokens(served_runs):
    from dashboard_runs import PLANTED_GAP

    server, _ = served_runs
    g, j, k, gap = PLANTED_GAP
    planted = f"#groups .group[data-group=\"{g}\"] .cell:nth-child({j + 1}) pre.tokens"
    with Browser() as browser:
        page = browser.open(server.url + "/")
        page.wait_for(READY)
        page.wait_for("document.querySelectorAll('.group').length === 2")
        ev = page.evaluate
        assert ev("document.querySelectorAll('pre.tokens').length") == 0  # off until toggled: plain text
        ev("(s => { s.value = 'gap'; s.dispatchEvent(new Event('change')); })(document.getElementById('overlay'))")
        page.wait_for(f"document.querySelector('{planted}') !== null && "
                      "document.querySelectorAll('#samples pre.tokens').length > 0")
        spans = f"Array.from(document.querySelectorAll('{planted} .tok'))"
        assert ev(f"{spans}.map(s => s.textContent).join('')") == "20+1"
        hot = ev(f"{spans}.filter(s => s.classList.contains('hot')).map(s => +s.dataset.i)")
        assert hot == [k]  # the planted token alone, among tokens whose gap is 0.001
        assert abs(float(ev(f"{spans}[{k}].dataset.gap")) - gap) < 0.01
        assert ev(f"{spans}[{k}].style.background") != ev(f"{spans}[0].style.background")
        assert "gap 3.0" in ev(f"{spans}[{k}].title")
        # every planted token in the samples browser is marked too, and nothing else is
        marked = ev("Array.from(document.querySelectorAll('#samples pre.tokens .hot'))"
                    ".map(s => s.closest('tr').children[1].textContent + '@' + s.dataset.i)")
        rows = ev("Array.from(document.querySelectorAll('#samples tr.sample')).map(r => r.children[1].textContent)")
        assert marked == [f"{g}:{j}@{k}"] * rows.count(f"{g}:{j}") and marked
        # the dropped group has no learner values: shown as missing, never as a gap of 0
        assert ev("document.querySelectorAll('#groups .group[data-group=\"1\"] .tok.na').length") > 0
        assert ev("document.querySelectorAll('#groups .group[data-group=\"1\"] .tok.hot').length") == 0
        ev("(s => { s.value = 'mask'; s.dispatchEvent(new Event('change')); })(document.getElementById('overlay'))")
        page.wait_for("document.querySelectorAll('#groups pre.overlay-mask').length === 8")
        assert ev("document.querySelectorAll('#groups .group[data-group=\"0\"] .tok.masked').length") == 0
        assert ev("document.querySelectorAll('#groups .group[data-group=\"1\"] .tok.masked').length") == \
            ev("document.querySelectorAll('#groups .group[data-group=\"1\"] .tok').length") > 0
        ev("(s => { s.value = 'entropy'; s.dispatchEvent(new Event('change')); })(document.getElementById('overlay'))")
        page.wait_for("document.querySelectorAll('#groups pre.overlay-entropy').length === 8")
        # entropy 0.2 + 0.1 i: tokens from the 9th on reach 1 nat
        ents = ev(f"Array.from(document.querySelectorAll('{planted.replace('gap', 'entropy')} .tok'))"
                  ".map(s => +s.dataset.entropy)")
        assert ents == [0.2, 0.3, 0.4, 0.5]
        assert ev("document.title") == "posttrain dashboard"  # the planted script among the tokens never ran
        assert page.console_errors() == []
