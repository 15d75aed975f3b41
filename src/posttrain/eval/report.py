"""`posttrain report`: one self-contained HTML page for evaluations and training runs.

Covers: summary tables (pass@k with intervals, cost, latency); inline SVG
figures (pass@k against k, per-task pass rates, accuracy against cost and
latency, a run's learning curves and held-out series); regressions (each
further eval against the first, and tasks a run stopped solving); and a
drill-down into individual responses with their verdicts (details, and the
verifier's structured `info` when it has any), filterable by a
few lines of inline JavaScript. Every piece of model or task text is
HTML-escaped; the page references no external URL.
Does not cover: computing metrics (it calls `summary`, `compare` and the
run store) or serving the page.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posttrain.eval.records import EvalDirError, EvalRun, load_eval
from posttrain.eval.results import Estimate, EvalSummary
from posttrain.eval.summary import summarize
from posttrain.pricing import price_of

MAX_SAMPLES = 3000  # responses shown per source in the drill-down (the page stays openable)
COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563"]

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#111;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f3f4f6}td.l,th.l{text-align:left}figure{display:inline-block;margin:8px 16px 8px 0}
figcaption{font-weight:600;margin-bottom:4px}svg text{font:11px system-ui,sans-serif}
.pass{color:#15803d}.fail{color:#b91c1c}.err{color:#a16207}pre{white-space:pre-wrap;max-width:900px;margin:2px 0;
background:#f9fafb;padding:4px}details summary{cursor:pointer}.muted{color:#6b7280}#filter{width:300px}
"""

JS = """
(function(){
  var box=document.getElementById('filter'), fails=document.getElementById('only-fail');
  function apply(){
    var q=(box.value||'').toLowerCase(), onlyFail=fails.checked, shown=0;
    var rows=document.querySelectorAll('tr.sample');
    for(var i=0;i<rows.length;i++){
      var r=rows[i], hit=(!q||r.getAttribute('data-task').toLowerCase().indexOf(q)>=0)\
&&(!onlyFail||r.getAttribute('data-pass')!=='1');
      r.style.display=hit?'':'none'; if(hit)shown++;
    }
    document.getElementById('shown').textContent=String(shown);
  }
  if(box){box.addEventListener('input',apply);fails.addEventListener('change',apply);apply();}
  document.body.setAttribute('data-ready','1');
})();
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(x: Any, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.1%}" if pct else f"{x:.4g}"
    return esc(x)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not (isinstance(x, float) and math.isnan(x))


# ---- SVG figures


def _axes(w: int, h: int, xs: Sequence[float], ys: Sequence[float], xlabel: str, ylabel: str, logx: bool = False,
          ymin: float | None = None, ymax: float | None = None):
    pad_l, pad_b, pad_t, pad_r = 48, 34, 10, 12
    fx = (lambda v: math.log(v)) if logx else (lambda v: v)
    x0, x1 = (min(map(fx, xs)), max(map(fx, xs))) if xs else (0.0, 1.0)
    y0 = min(ys) if ymin is None and ys else (ymin if ymin is not None else 0.0)
    y1 = max(ys) if ymax is None and ys else (ymax if ymax is not None else 1.0)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def px(v: float) -> float:
        return pad_l + (fx(v) - x0) / (x1 - x0) * (w - pad_l - pad_r)

    def py(v: float) -> float:
        return h - pad_b - (v - y0) / (y1 - y0) * (h - pad_b - pad_t)

    parts = [f'<line x1="{pad_l}" y1="{h - pad_b}" x2="{w - pad_r}" y2="{h - pad_b}" stroke="#999"/>',
             f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{h - pad_b}" stroke="#999"/>',
             f'<text x="{(w + pad_l) / 2}" y="{h - 4}" text-anchor="middle">{esc(xlabel)}</text>',
             f'<text x="12" y="{(h - pad_b) / 2}" transform="rotate(-90 12 {(h - pad_b) / 2})"'
             f' text-anchor="middle">{esc(ylabel)}</text>']
    for frac in (0.0, 0.5, 1.0):
        v = y0 + frac * (y1 - y0)
        parts.append(f'<text x="{pad_l - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    return px, py, parts


def _figure(fig_id: str, caption: str, w: int, h: int, body: list[str], legend: list[tuple[str, str]] = ()) -> str:
    leg = "".join(f'<span style="color:{c}">&#9632; {esc(n)}</span> ' for n, c in legend)
    return (f'<figure id="{fig_id}" data-figure="{fig_id}"><figcaption>{esc(caption)}</figcaption>'
            f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">'
            + "".join(body) + f"</svg><div>{leg}</div></figure>")


def line_chart(fig_id: str, caption: str, series: list[tuple[str, list[tuple[float, float]]]], xlabel: str, ylabel: str,
               logx: bool = False, ymin: float | None = None, ymax: float | None = None, w: int = 460, h: int = 260) -> str:
    pts = [(x, y) for _, s in series for x, y in s if _finite(x) and _finite(y)]
    px, py, body = _axes(w, h, [p[0] for p in pts], [p[1] for p in pts], xlabel, ylabel, logx, ymin, ymax)
    xticks = sorted({x for x, _ in pts})
    step = max(1, len(xticks) // 8)
    body += [f'<text x="{px(x):.1f}" y="{h - 20}" text-anchor="middle">{x:g}</text>' for x in xticks[::step]]
    legend = []
    for i, (name, s) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        s = [(x, y) for x, y in s if _finite(x) and _finite(y)]
        if not s:
            continue
        legend.append((name, color))
        body.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5" points="'
                    + " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s) + '"/>')
        body += [f'<circle class="pt" cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{color}"><title>{esc(name)}: '
                 f'{x:g}, {y:.4g}</title></circle>' for x, y in s]
    return _figure(fig_id, caption, w, h, body, legend)


def bar_chart(fig_id: str, caption: str, bars: list[tuple[str, float]], ylabel: str, w: int = 920, h: int = 240) -> str:
    pad_l = 48
    _, py, body = _axes(w, h, [0, 1], [0.0, 1.0], "tasks (sorted)", ylabel, ymin=0.0, ymax=1.0)
    bw = (w - pad_l - 12) / max(len(bars), 1)
    for i, (name, v) in enumerate(bars):
        v = v if _finite(v) else 0.0
        y = py(v)
        body.append(f'<rect class="bar" x="{pad_l + i * bw:.2f}" y="{y:.1f}" width="{max(bw - 0.5, 0.5):.2f}" '
                    f'height="{h - 34 - y:.1f}" fill="#2563eb"><title>{esc(name)}: {v:.3f}</title></rect>')
    return _figure(fig_id, caption, w, h, body)


def scatter(fig_id: str, caption: str, points: list[tuple[str, float, float]], xlabel: str, ylabel: str,
            w: int = 460, h: int = 260) -> str:
    pts = [(n, x, y) for n, x, y in points if _finite(x) and _finite(y)]
    xs = [p[1] for p in pts] or [0.0, 1.0]
    px, py, body = _axes(w, h, xs, [p[2] for p in pts] or [0, 1], xlabel, ylabel, ymin=0.0, ymax=1.0)
    lo, hi = min(xs), max(xs)
    ticks = [lo] if lo == hi else [lo, (lo + hi) / 2, hi]
    body += [f'<text x="{px(x):.1f}" y="{h - 20}" text-anchor="middle">{x:.3g}</text>' for x in ticks]
    legend = []
    for i, (name, x, y) in enumerate(pts):
        color = COLORS[i % len(COLORS)]
        legend.append((name, color))
        body.append(f'<circle class="pt" cx="{px(x):.1f}" cy="{py(y):.1f}" r="5" fill="{color}"><title>{esc(name)}: '
                    f'{x:.4g}, {y:.3f}</title></circle>')
    return _figure(fig_id, caption, w, h, body, legend)


# ---- sections


def _estimate_cell(est: Estimate | None) -> str:
    """pass@k over its interval ('-' where this eval did not ask for that k)."""
    value, lo, hi = (est.value, est.ci_low, est.ci_high) if est is not None else (None, None, None)
    return f'<td>{_num(value, True)}<br><span class="muted">{_num(lo, True)} .. {_num(hi, True)}</span></td>'


def _summary_table(evals: list[tuple[EvalRun, EvalSummary]]) -> str:
    ks = sorted({k for _, s in evals for k in s.ks})
    head = "".join(f"<th>pass@{k}</th>" for k in ks)
    rows = []
    for run, s in evals:
        cells = "".join(_estimate_cell(s.pass_at.get(k)) for k in ks)
        rows.append(
            f'<tr><td class="l">{esc(run.name)}<br><span class="muted">{esc(run.meta.get("model", ""))}</span></td>'
            f'<td class="l">{esc(run.meta.get("suite", ""))}</td><td>{s.n_tasks}</td><td>{s.n_samples}</td>{cells}'
            f'<td>{_num(s.mean_score.value)}</td><td>{s.n_errors}</td><td>{_num(s.cost)}</td><td>{_num(s.cost_per_solved)}</td>'
            f'<td>{_num(s.latency.p50)} / {_num(s.latency.p95)}</td>'
            f'<td class="l">{esc(", ".join(s.verifiers))}</td></tr>')
    return ('<table id="summary"><tr><th class="l">eval</th><th class="l">suite</th><th>tasks</th><th>samples</th>'
            f'{head}<th>mean score</th><th>errors</th><th>cost</th><th>cost / solved</th><th>latency p50 / p95 s</th>'
            '<th class="l">verifier</th></tr>' + "".join(rows) + "</table>")


def _regressions(evals: list[tuple[EvalRun, EvalSummary]]) -> str:
    from posttrain.eval.compare import compare

    if len(evals) < 2:
        return '<p class="muted" id="regressions">One evaluation: nothing to compare (pass two or more to see regressions).</p>'
    out = ['<div id="regressions">']
    base = evals[0][0]
    for run, _ in evals[1:]:
        try:
            c = compare(base, run, prices=(price_of(base.meta), price_of(run.meta)))
        except ValueError as exc:
            out.append(f"<p>{esc(run.name)}: {esc(exc)}</p>")
            continue
        verdict = (('<b class="fail">REGRESSION</b>: ' + esc("; ".join(c.reasons))) if c.regression
                   else '<b class="pass">no significant regression</b>')
        out.append(f"<h3>{esc(base.name)} &rarr; {esc(run.name)}</h3><p>{verdict}. pass@1 {c.a_pass1:.1%} &rarr; {c.b_pass1:.1%}"
                   f" (B-A {c.diff.mean:+.3f}, paired 95% interval {c.diff.lo:+.3f} .. {c.diff.hi:+.3f})</p>")
        rows = [("regressed", t) for t in c.regressed] + [("improved", t) for t in c.improved]
        if rows:
            out.append('<table class="changes"><tr><th class="l">task</th><th>change</th><th>A</th><th>B</th>'
                       '<th>p</th><th>q (BH)</th></tr>'
                       + "".join(f'<tr class="{k}"><td class="l">{esc(t.task_id)}</td>'
                                 f'<td class="{"fail" if k == "regressed" else "pass"}">{k}</td>'
                                 f"<td>{t.a_c}/{t.a_n}</td><td>{t.b_c}/{t.b_n}</td><td>{t.p:.2g}</td><td>{t.q:.2g}</td></tr>"
                                 for k, t in rows)
                       + "</table>")
    out.append("</div>")
    return "".join(out)


def _samples(rows: list[dict[str, Any]], prompts: dict[str, str], source: str) -> str:
    out = []
    for r in rows[:MAX_SAMPLES]:
        cls = "pass" if r["passed"] else ("err" if r.get("status", "ok") != "ok" else "fail")
        verdict = "pass" if r["passed"] else ("fail" if r.get("status", "ok") == "ok" else r.get("status"))
        prompt = prompts.get(r["task_id"], "")
        out.append(
            f'<tr class="sample" data-task="{esc(r["task_id"])}" data-pass="{int(bool(r["passed"]))}">'
            f'<td class="l">{esc(source)}</td><td class="l">{esc(r["task_id"])}</td><td>{esc(r.get("where", ""))}</td>'
            f'<td class="{cls}">{esc(verdict)}</td><td>{_num(r.get("score"))}</td>'
            f'<td class="l"><details><summary>response ({len(r["response"])} chars)</summary>'
            + (f'<div class="muted">prompt</div><pre>{esc(prompt)}</pre>' if prompt else "")
            + f'<div class="muted">response</div><pre>{esc(r["response"])}</pre>'
            f'<div class="muted">verdict details ({esc(r.get("verifier", ""))})</div><pre>{esc(r.get("details", ""))}</pre>'
            + (f'<div class="muted">verdict info</div><pre class="info">'
               f'{esc(json.dumps(r["info"], indent=1, ensure_ascii=False))}</pre>' if r.get("info") else "")
            + "</details></td></tr>")
    more = (f'<p class="muted">{len(rows) - MAX_SAMPLES} more responses of {esc(source)} not shown</p>'
            if len(rows) > MAX_SAMPLES else "")
    return "".join(out) + (f"<tr><td colspan=6>{more}</td></tr>" if more else "")


def _eval_sections(evals: list[tuple[EvalRun, EvalSummary]]) -> tuple[list[str], list[str]]:
    figs, sample_rows = [], []
    series = [(run.name, [(k, s.pass_at[k].value) for k in s.ks]) for run, s in evals]
    figs.append(line_chart("fig-passk", "pass@k against k", series, "k", "pass@k", logx=True, ymin=0.0, ymax=1.0))
    for i, (run, s) in enumerate(evals):
        bars = sorted(((t.task_id, t.pass_rate) for t in s.tasks), key=lambda b: (-(b[1] if _finite(b[1]) else -1), b[0]))
        figs.append(bar_chart(f"fig-tasks-{i}", f"per-task pass rate: {run.name}", bars, "pass rate"))
        prompts = {t["id"]: t.get("prompt", "") for t in run.tasks}
        rows = [{**r.__dict__, "where": f"r{r.repeat} s{r.sample}"} for r in
                sorted(run.records, key=lambda r: (r.task_id, r.repeat, r.sample))]
        sample_rows.append(_samples(rows, prompts, run.name))
    figs.append(scatter("fig-cost", "accuracy vs cost per task", [(run.name, s.cost_per_task, s.pass1) for run, s in evals],
                        "cost per task (USD)", "pass@1"))
    figs.append(scatter("fig-latency", "accuracy vs latency (p50 per response)",
                        [(run.name, s.latency.p50, s.pass1) for run, s in evals], "latency p50 (s)", "pass@1"))
    return figs, sample_rows


def _run_sections(path: Path) -> tuple[str, list[str], str]:
    from posttrain.eval.training import (
        eval_samples,
        regression_flags,
        rollout_samples,
        task_series,
    )
    from posttrain.store.run_store import RunStore

    store = RunStore(path / "run.sqlite", readonly=True)
    try:
        steps = store.steps()
        evals = store.evals()
        figs = []
        keys = [k for k in ("reward", "pass_rate", "zero_variance_frac") if any(k in m for _, m in steps)]
        figs.append(line_chart("fig-learning", f"learning curves: {path.name}",
                               [(k, [(s, m[k]) for s, m in steps if k in m]) for k in keys], "step", "value"))
        names = sorted({n for _, n, _ in evals})
        curves = []
        for n in names:
            for key in ("greedy_accuracy", "pass@1"):
                pts = [(s, m[key]) for s, nn, m in evals if nn == n and key in m]
                if pts:
                    curves.append((f"{n} {key}", pts))
        figs.append(line_chart("fig-evals", f"held-out evaluations: {path.name}", curves, "step", "accuracy", ymin=0.0, ymax=1.0))
        flags = regression_flags(store)
        rows = "".join(f'<tr><td class="l">{esc(f["name"])}</td><td class="l">{esc(f["task_id"])}</td><td>{f["best_step"]}</td>'
                       f'<td>{_num(f["best"])}</td><td>{f["step"]}</td><td class="fail">{_num(f["value"])}</td></tr>'
                       for f in flags)
        table = (f'<h3>tasks that used to pass and now fail ({len(flags)})</h3>'
                 '<table id="run-regressions"><tr><th class="l">eval</th>'
                 '<th class="l">task</th><th>best step</th><th>best</th><th>step</th><th>now</th></tr>' + rows + "</table>")
        series = task_series(store)
        n_tasks = sum(len(v) for v in series.values())
        table += f'<p class="muted">{n_tasks} per-task series across {len({s for s, _, _ in evals})} evaluated steps.</p>'
        samples = eval_samples(store, limit=MAX_SAMPLES) + rollout_samples(store, limit=500)
        return table, figs, _samples(samples, {}, path.name)
    finally:
        store.close()


def _load(source: Path) -> tuple[str, Any]:
    if (source / "meta.json").exists():
        run = load_eval(source)
        return "eval", run
    if (source / "run.sqlite").exists():
        return "run", source
    raise EvalDirError(f"{source}: neither an eval directory (meta.json) nor a training run (run.sqlite)")


def render_report(sources: Sequence[str | Path]) -> str:
    """The HTML text of a report over eval directories and training run directories."""

    loaded = [_load(Path(s)) for s in sources]
    evals = []
    for kind, run in loaded:
        if kind == "eval":
            s = summarize(run.records, run.meta.get("ks") or [1], price_of(run.meta), [t["id"] for t in run.tasks])
            evals.append((run, s))
    runs = [p for kind, p in loaded if kind == "run"]
    body = [f"<h1>posttrain report</h1><p class='muted'>{esc(', '.join(str(s) for s in sources))}</p>"]
    figs: list[str] = []
    sample_blocks: list[str] = []
    if evals:
        body.append("<h2>Evaluations</h2>" + _summary_table(evals))
        ef, sample_blocks = _eval_sections(evals)
        figs += ef
    run_tables = []
    for p in runs:
        table, rf, samples = _run_sections(p)
        figs += rf
        run_tables.append(f"<h2>Run {esc(p.name)}</h2>{table}")
        sample_blocks.append(samples)
    body.append("<h2>Figures</h2>" + "".join(figs))
    body += run_tables
    if evals:
        body.append("<h2>Regressions</h2>" + _regressions(evals))
    body.append('<h2>Samples</h2><p><input id="filter" placeholder="filter by task id"> <label><input type="checkbox" '
                'id="only-fail"> failures only</label> <span class="muted"><span id="shown">0</span> shown</span></p>'
                '<table id="samples"><tr><th class="l">source</th><th class="l">task</th><th>which</th><th>verdict</th>'
                '<th>score</th><th class="l">drill-down</th></tr>' + "".join(sample_blocks) + "</table>")
    data = json.dumps({"sources": [str(s) for s in sources], "n_evals": len(evals), "n_runs": len(runs)})
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>posttrain report</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}"
            f'<script type="application/json" id="report-data">{esc(data)}</script><script>{JS}</script></body></html>')


def write_report(sources: Sequence[str | Path], out: str | Path) -> Path:
    """Write the report to `out` (parents created); returns the path."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(sources), encoding="utf-8")
    return path
