"""`posttrain report`: one self-contained page that renders in headless Chromium without console errors."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.eval.records import EvalDir, SampleRecord
from posttrain.eval.report import render_report
from posttrain.store import EvalSampleRow, SampleRow
from posttrain.store.run_store import RunStore

runner = CliRunner()
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
EVIL = '</pre></details><script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'


def _eval_dir(path, rates, evil_task=0, ks=(1, 2, 4)):
    d = EvalDir(path)
    d.start({"model": path.name, "suite": "synthetic", "ks": list(ks)},
            [{"id": f"T{i}", "prompt": f"prompt {i} {EVIL}", "answer": "x"} for i in range(len(rates))])
    rng = np.random.default_rng(len(str(path)))
    recs = []
    for i, r in enumerate(rates):
        for j in range(8):
            ok = bool(rng.random() < r)
            recs.append(SampleRecord(task_id=f"T{i}", response=EVIL if i == evil_task else f"answer {i}", score=float(ok),
                                     passed=ok, details=EVIL, info={"failures": [{"name": "t", "error": EVIL}]} if j == 0 else {},
                                     verifier="exact@abc", sample=j, tokens_in=10, tokens_out=5,
                                     latency_s=0.1 + j * 0.01))
    d.rewrite(recs)
    return path


def _run_dir(path):
    path.mkdir(parents=True)
    with RunStore(path / "run.sqlite") as store:
        for step in range(1, 6):
            store.log_step(step, {"reward": step / 10, "pass_rate": step / 12})
        store.log_eval(2, "held_out", {"greedy_accuracy": 0.5}, {"a": 1.0, "b": 1.0})
        store.log_eval(4, "held_out", {"greedy_accuracy": 0.4}, {"a": 1.0, "b": 0.0})
        store.log_eval_samples(4, "held_out", [EvalSampleRow("b", 0, EVIL, 0.0, 0, "ok", "exact@abc", "expected 3",
                                                            {"got": EVIL})])
        store.log_step(5, {"reward": 0.5},
                       samples=[SampleRow(0, j, "g", f"rollout {j}", 3, "stop", 1.0, 1, "ok", "exact@abc", "", 5)
                                for j in range(2)])
    return path


def _chromium(html_path):
    proc = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={html_path.parent / 'chrome-profile'}", "--dump-dom", html_path.resolve().as_uri()],
        check=False, capture_output=True, text=True, timeout=120,
    )
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


@pytest.mark.slow
def test_console_check_catches_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>notDefined();</script></body></html>")
    _, console = _chromium(bad)
    assert console and "notDefined" in console[0]


@pytest.mark.slow
def test_report_renders_in_chromium_with_the_expected_figures(tmp_path):
    a = _eval_dir(tmp_path / "base", [0.9] * 12 + [0.2] * 8)
    b = _eval_dir(tmp_path / "cand", [0.9] * 2 + [0.0] * 10 + [0.2] * 8)
    run = _run_dir(tmp_path / "run")
    out = tmp_path / "report.html"
    res = runner.invoke(app, ["report", str(a), str(b), str(run), "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert not re.search(r"(src|href)\s*=\s*[\"']?\s*(https?:|//)", text) and "<link" not in text
    assert "http://" not in text and "https://" not in text
    assert EVIL not in text and "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;" in text

    dom, console = _chromium(out)
    assert console == [], console
    assert 'data-ready="1"' in dom  # the inline script ran to the end
    assert "<title>posttrain report</title>" in dom  # the injected script never ran
    for fig in ("fig-passk", "fig-tasks-0", "fig-tasks-1", "fig-cost", "fig-latency", "fig-learning", "fig-evals"):
        assert f'id="{fig}"' in dom, fig
    assert dom.count('class="bar"') == 40  # 20 tasks x 2 evals
    passk = dom[dom.index('id="fig-passk"'):dom.index('id="fig-tasks-0"')]
    assert passk.count('class="pt"') == 6  # k = 1, 2, 4 for two evals
    assert dom.count('class="sample"') == 2 * 160 + 1 + 2  # two evals, one eval sample, two rollouts
    assert 'id="regressions"' in dom and "REGRESSION" in dom and 'class="regressed"' in dom
    assert 'id="run-regressions"' in dom and ">b</td>" in dom  # task b passed at step 2, fails at step 4
    # a verdict's structured findings are shown (escaped) where a record has any: sample 0 of each eval task, the eval sample
    assert dom.count('class="info"') == 2 * 20 + 1


def test_report_on_a_single_eval_and_bad_input(tmp_path):
    a = _eval_dir(tmp_path / "only", [0.5] * 5, ks=(1,))
    html = render_report([a])
    assert "nothing to compare" in html and 'id="fig-passk"' in html
    res = runner.invoke(app, ["report", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "neither an eval directory" in res.output
