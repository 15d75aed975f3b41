// posttrain dashboard: polls the run stores' JSON routes and draws them. Every piece of run text is set with
// textContent (never parsed as HTML). Charts are uPlot (bundled beside this file).
(function () {
  "use strict";
  var POLL = parseInt(document.body.getAttribute("data-poll-ms"), 10) || 1000;
  var COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#be185d"];
  var FIRST = ["reward", "pass_rate", "kl", "entropy", "completion_tokens", "clip_frac", "mismatch_mean", "mismatch_max",
    "mismatch_kl", "staleness_mean", "staleness_max", "zero_variance_frac", "groups_kept", "grad_norm", "loss",
    "step_s", "rollout_s", "learn_s", "verifier_latency_p50", "verifier_latency_p95", "verifier_errors", "env_errors"];
  // points per series on a first load (the server's CHART_POINTS): longer runs come min/max-decimated
  var MAX_POINTS = parseInt(document.body.getAttribute("data-max-points"), 10) || 640;
  // Polling is incremental: /api/runs answers 304 while no store changed (then nothing else is asked or drawn); a
  // run's steps and staleness are asked only after its version changed, and only the steps after the newest held;
  // a chart off screen is marked stale and redrawn when it scrolls into view, not on every poll.
  // First render: only what a first screen shows (runs, alerts, the curves in view) is fetched and drawn; a chart is
  // built when it nears the screen, and the panels below the fold (held-out, domains, failures, groups, samples,
  // episodes, staleness) load when scrolled to or once the page is idle after its first render.
  var state = { overlay: "none", holders: {}, below: false, runs: [], data: {}, stale: {}, charts: {}, dirty: {}, onScreen: {}, heldCharts: [], staleCharts: {},
    alertsSeen: {}, versions: {}, slowVersions: {}, runsText: "", polls: 0, slowAt: 0, busy: false, draws: 0, stepReads: 0, timings: {} };
  var observer = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      var key = e.target.getAttribute("data-key");
      state.onScreen[key] = e.isIntersecting;
      if (e.isIntersecting && !state.charts[key]) build(key);
      else if (e.isIntersecting && state.dirty[key] && state.charts[key]) draw(key);
    });
  }) : null;
  window.dashboard = state;

  function el(tag, attrs) {
    var e = document.createElement(tag);
    for (var k in (attrs || {})) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return e;
  }
  function fmt(x) {
    if (x === null || x === undefined) return "-";
    if (typeof x !== "number") return String(x);
    if (Number.isInteger(x)) return String(x);
    return Math.abs(x) >= 1000 || Math.abs(x) < 0.001 && x !== 0 ? x.toExponential(3) : x.toPrecision(4);
  }
  function getText(url) {
    return fetch(url).then(function (r) { if (!r.ok) throw new Error(url + ": " + r.status); return r.text(); });
  }
  function get(url) {
    return fetch(url).then(function (r) { if (!r.ok) throw new Error(url + ": " + r.status); return r.json(); });
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  function color(id) { return COLORS[id % COLORS.length]; }
  function selected() { return state.runs.filter(function (r) { return r.show; }); }

  // ---- runs
  function renderRuns() {
    var t = clear(document.getElementById("runs-table"));
    t.appendChild(el("tr", {}, el("th", { text: "show" }), el("th", { cls: "l", text: "run" }), el("th", { text: "status" }),
      el("th", { text: "steps" }), el("th", { text: "reward" }), el("th", { text: "held-out" }), el("th", { text: "alerts" }),
      el("th", { cls: "l", text: "stored in" })));
    state.runs.forEach(function (r) {
      var box = el("input", { type: "checkbox" });
      box.checked = r.show;
      box.addEventListener("change", function () { r.show = box.checked; state.runsText = ""; rebuildCharts(); });
      t.appendChild(el("tr", { id: "run-" + r.id, "data-steps": r.steps },
        el("td", {}, box), el("td", { cls: "l" }, el("span", { cls: "swatch", style: "background:" + color(r.id) }), r.name),
        el("td", { cls: "status-" + r.status, text: r.status }), el("td", { cls: "steps", text: r.steps + (r.planned_steps ? "/" + r.planned_steps : "") }),
        el("td", { text: fmt(r.reward) }), el("td", { text: fmt(r.held_out) }), el("td", { text: r.alerts }),
        el("td", { cls: "l muted", text: r.dir })));
    });
    ["groups-run", "samples-run", "episodes-run"].forEach(function (id) {
      var s = document.getElementById(id), keep = s.value;
      clear(s);
      state.runs.forEach(function (r) { s.appendChild(el("option", { value: r.id, text: r.name })); });
      if (keep) s.value = keep;
    });
  }

  // ---- curves
  function keysOf() {
    var seen = {};
    selected().forEach(function (r) { Object.keys((state.data[r.id] || { cols: {} }).cols).forEach(function (k) { seen[k] = 1; }); });
    var first = FIRST.filter(function (k) { return seen[k]; });
    var rest = Object.keys(seen).filter(function (k) { return FIRST.indexOf(k) < 0; }).sort();
    return first.concat(rest);
  }
  function chartData(key) {
    var runs = selected();
    if (runs.length === 1) {
      var d = state.data[runs[0].id];
      return [d.steps, d.cols[key] || d.steps.map(function () { return null; })];
    }
    var tables = runs.map(function (r) {
      var d = state.data[r.id] || { steps: [], cols: {} };
      return [d.steps, d.cols[key] || d.steps.map(function () { return null; })];
    });
    return uPlot.join(tables);
  }
  function draw(key) {
    state.dirty[key] = false;
    state.draws++;
    state.charts[key].setData(chartData(key));
  }
  function build(key) {  // a chart's uPlot, made when it is first near the screen
    var runs = selected();
    var series = [{ label: "step" }].concat(runs.map(function (r) {
      return { label: r.name, stroke: color(r.id), width: 1.25, spanGaps: true, points: { show: false } };
    }));
    state.dirty[key] = false;
    state.draws++;
    state.charts[key] = new uPlot({ width: 380, height: 190, series: series, legend: { show: runs.length > 1 },
      scales: { x: { time: false } }, axes: [{ size: 28 }, { size: 52 }] }, chartData(key), state.holders[key]);
  }
  function rebuildCharts() {
    var t0 = performance.now();
    var box = clear(document.getElementById("charts"));
    Object.keys(state.charts).forEach(function (k) { state.charts[k].destroy(); });
    if (observer) observer.disconnect();
    state.charts = {}; state.dirty = {}; state.onScreen = {}; state.holders = {};
    var runs = selected();
    if (!runs.length) return;
    var keys = keysOf();
    renderLatest();  // above the charts: placed first, so the charts' positions below are final
    keys.forEach(function (key) {
      var holder = el("div", { cls: "chart", id: "chart-" + key.replace(/[^A-Za-z0-9_-]/g, "_"), "data-key": key }, el("h3", { text: key }));
      box.appendChild(holder);
      state.holders[key] = holder;
    });
    var bottom = window.innerHeight + 200;  // the charts in (or just below) the first screen are built now
    keys.forEach(function (key) {
      if (!observer || state.holders[key].getBoundingClientRect().top < bottom) build(key);
      if (observer) observer.observe(state.holders[key]);
    });
    state.timings.charts = performance.now() - t0;  // the benchmark's breakdown of a first render
  }
  function updateCharts() {
    var keys = keysOf();
    if (keys.some(function (k) { return !state.holders[k]; })) return rebuildCharts();
    keys.forEach(function (k) {
      if (!state.charts[k]) return;  // not built yet: built with the newest data when it nears the screen
      if (!observer || state.onScreen[k]) draw(k); else state.dirty[k] = true;  // off screen: drawn when scrolled to
    });
    renderLatest();
  }
  var LATEST = ["reward", "pass_rate", "entropy", "kl", "completion_tokens", "grad_norm"];
  function renderLatest() {  // built when the runs shown change; otherwise only its cells' texts are set
    var runs = selected(), shape = runs.map(function (r) { return r.id + ":" + (state.data[r.id] && state.data[r.id].bucket); }).join(",");
    var box = document.getElementById("latest");
    if (state.latestShape !== shape || !box.firstChild) {
      state.latestShape = shape;
      clear(box);
      runs.forEach(function (r) {
        if (state.data[r.id] && state.data[r.id].bucket > 1) {
          box.appendChild(el("p", { cls: "muted decimated", text: r.name + ": older steps are drawn as the minimum and maximum of every " +
            state.data[r.id].bucket + " steps or so (spikes stay visible; the store keeps every value)" }));
        }
      });
      var t = el("table", { id: "latest-table" });
      var head = el("tr", {}, el("th", { cls: "l", text: "newest" }));
      runs.forEach(function (r) { head.appendChild(el("th", { text: r.name })); });
      t.appendChild(head);
      t.appendChild(el("tr", {}, el("td", { cls: "l", text: "step" })));
      runs.forEach(function (r) { t.lastChild.appendChild(el("td", { cls: "last-step", "data-run": r.id, text: "-" })); });
      LATEST.forEach(function (k) {
        var row = el("tr", {}, el("td", { cls: "l", text: k }));
        runs.forEach(function (r) { row.appendChild(el("td", { "data-key": k, "data-run": r.id, text: "-" })); });
        t.appendChild(row);
      });
      box.appendChild(t);
    }
    var rows = document.getElementById("latest-table").rows;
    runs.forEach(function (r, i) {
      var d = state.data[r.id];
      setText(rows[1].cells[i + 1], d && d.steps.length ? String(d.steps[d.steps.length - 1]) : "-");
      LATEST.forEach(function (k, j) {
        var col = d && d.cols[k];
        setText(rows[j + 2].cells[i + 1], col ? fmt(col[col.length - 1]) : "-");
      });
    });
  }
  function setText(node, text) {  // untouched when unchanged: no layout or paint for a figure that did not move
    if (node.textContent !== text) node.textContent = text;
  }
  function compact(d) {  // a series past twice the first load's points: every 4 points -> their minimum and maximum
    var n = d.steps.length - 1, steps = [], times = d.times ? [] : null, cols = {};  // the newest point stays exact
    for (var b = 0; b < n; b += 4) {
      var e = Math.min(b + 4, n) - 1;
      steps.push(d.steps[b]); if (e > b) steps.push(d.steps[e]);
      if (times) { times.push(d.times[b]); if (e > b) times.push(d.times[e]); }
    }
    Object.keys(d.cols).forEach(function (k) {
      var col = d.cols[k], out = [];
      for (var b = 0; b < n; b += 4) {
        var e = Math.min(b + 4, n), lo = null, hi = null;
        for (var i = b; i < e; i++) {
          var v = col[i];
          if (v === null || v === undefined) continue;
          if (lo === null || v < lo) lo = v;
          if (hi === null || v > hi) hi = v;
        }
        if (e - b === 1) out.push(col[b]); else out.push(lo, hi);
      }
      out.push(col[n]);
      cols[k] = out;
    });
    steps.push(d.steps[n]);
    if (times) times.push(d.times[n]);
    d.steps = steps; d.cols = cols; if (times) d.times = times;
    d.bucket = Math.max(d.bucket || 1, 1) * 2;
  }
  function merge(id, got, into) {
    into = into || state.data;
    var d = into[id];
    if (!d || got.reset) {
      into[id] = got;  // first load, or the store was truncated by a resume
      return true;
    }
    if (!got.steps.length) return false;
    var n = d.steps.length;
    Object.keys(got.cols).forEach(function (k) {
      if (!d.cols[k]) d.cols[k] = new Array(n).fill(null);
    });
    Object.keys(d.cols).forEach(function (k) {
      var add = got.cols[k] || got.steps.map(function () { return null; });
      Array.prototype.push.apply(d.cols[k], add);
    });
    Array.prototype.push.apply(d.steps, got.steps);
    if (d.times) Array.prototype.push.apply(d.times, got.times);
    if (d.steps.length > 2 * MAX_POINTS) compact(d);  // a page left open on a long run: drawing cost stays bounded
    return true;
  }

  // ---- alerts, held-out, domains, failures
  function renderAlerts(all) {
    var t = clear(document.getElementById("alerts"));
    if (!all.length) { t.appendChild(el("tr", {}, el("td", { cls: "l muted", text: "no alerts" }))); return; }
    t.appendChild(el("tr", {}, el("th", { cls: "l", text: "run" }), el("th", { text: "step" }), el("th", { cls: "l", text: "kind" }),
      el("th", { cls: "l", text: "message" })));
    all.forEach(function (a) {
      t.appendChild(el("tr", { cls: "alert", "data-kind": a.kind }, el("td", { cls: "l", text: a.run }), el("td", { text: a.step }),
        el("td", { cls: "l", text: a.kind }), el("td", { cls: "l", text: a.message || "" })));
    });
  }
  function renderHeld(evalsByRun) {
    var box = clear(document.getElementById("held-out"));
    state.heldCharts.forEach(function (c) { c.destroy(); });
    state.heldCharts = [];
    var runs = selected(), names = {};
    runs.forEach(function (r) { (evalsByRun[r.id] || []).forEach(function (e) { names[e.name] = 1; }); });
    Object.keys(names).sort().forEach(function (name) {
      var tables = runs.map(function (r) {
        var rows = (evalsByRun[r.id] || []).filter(function (e) { return e.name === name; });
        return [rows.map(function (e) { return e.step; }), rows.map(function (e) { return e.metrics["pass@1"]; })];
      });
      var data = runs.length === 1 ? tables[0] : uPlot.join(tables);
      var holder = el("div", { cls: "chart", id: "held-" + name.replace(/[^A-Za-z0-9_-]/g, "_") }, el("h3", { text: name + " pass@1" }));
      box.appendChild(holder);
      state.heldCharts.push(new uPlot({ width: 380, height: 190, scales: { x: { time: false } }, axes: [{ size: 28 }, { size: 52 }],
        series: [{ label: "step" }].concat(runs.map(function (r) { return { label: r.name, stroke: color(r.id), spanGaps: true }; })) },
        data, holder));
    });
    if (!Object.keys(names).length) box.appendChild(el("p", { cls: "muted", text: "no held-out evaluation stored yet" }));
  }
  function renderDomains(byRun) {
    var box = clear(document.getElementById("domains"));
    selected().forEach(function (r) {
      var d = byRun[r.id];
      if (!d) return;
      box.appendChild(el("h3", { text: r.name }));
      if (!d.present) { box.appendChild(el("p", { cls: "muted", text: "this store has no per-domain scheduler state (no domains table)" })); return; }
      var t = el("table", { cls: "domains-table" }, el("tr", {}, el("th", { cls: "l", text: "domain" }), el("th", { text: "step" }),
        el("th", { text: "pass rate" }), el("th", { text: "difficulty" }), el("th", { text: "share" }), el("th", { text: "informative" }),
        el("th", { text: "seconds" }), el("th", { text: "tokens" }), el("th", { text: "failures" }), el("th", { text: "retired" })));
      Object.keys(d.latest).sort().forEach(function (name) {
        var m = d.latest[name];
        t.appendChild(el("tr", { "data-domain": name }, el("td", { cls: "l", text: name }), el("td", { text: m.step }),
          el("td", { text: fmt(m.pass_rate) }), el("td", { text: fmt(m.difficulty) }), el("td", { text: fmt(m.share) }),
          el("td", { text: fmt(m.informative_frac) }), el("td", { text: fmt(m.seconds) }), el("td", { text: fmt(m.tokens) }),
          el("td", { text: fmt(typeof m.failures === "object" && m.failures ? JSON.stringify(m.failures) : m.failures) }),
          el("td", { text: fmt(m.retired) })));
      });
      box.appendChild(t);
    });
  }
  function renderFailures(byRun) {
    var box = clear(document.getElementById("failures"));
    selected().forEach(function (r) {
      var f = byRun[r.id];
      if (!f) return;
      box.appendChild(el("h3", { text: r.name + " (from " + f.source + ")" }));
      if (!f.categories.length) { box.appendChild(el("p", { cls: "muted", text: "no failures recorded" })); return; }
      f.categories.forEach(function (c) {
        var det = el("details", { cls: "failure", "data-category": c.category }, el("summary", { text: c.category + ": " + c.count }));
        c.examples.forEach(function (x) {
          det.appendChild(el("div", {}, el("span", { cls: "muted", text: "step " + x.step + " " + (x.domain || "") + " task " + x.task_id }),
            x.prompt ? el("pre", { text: x.prompt }) : null, el("pre", { text: x.response }), el("pre", { cls: "err", text: x.detail })));
        });
        box.appendChild(det);
      });
    });
  }

  // ---- groups, histogram
  function loadGroups(step) {
    var run = document.getElementById("groups-run").value;
    if (run === "" || !step) return;
    get("/api/runs/" + run + "/groups/" + step + (state.overlay !== "none" ? "?tokens=true" : "")).then(function (g) {
      document.getElementById("groups-step").value = g.step;
      var box = clear(document.getElementById("groups"));
      var scores = [];
      if (!g.groups.length) box.appendChild(el("p", { cls: "muted", text: "no groups stored for step " + step }));
      g.groups.forEach(function (grp) {
        var card = el("div", { cls: "group" + (grp.used ? "" : " dropped"), "data-group": grp.group },
          el("div", {}, el("b", { text: "group " + grp.group + " · task " + grp.task_id }),
            el("span", { cls: "muted", text: grp.used ? "  trained on (" + g.estimator + " advantages)" : "  dropped: zero reward variance" })));
        var row = el("div", { cls: "row" });
        grp.samples.forEach(function (s, j) {
          if (s.score !== null) scores.push(s.score);
          var adv = grp.advantages ? grp.advantages[j] : null;
          row.appendChild(el("div", { cls: "cell" },
            el("div", {}, el("span", { cls: s.passed ? "pass" : (s.status === "ok" ? "fail" : "err"), text: s.status + " " }),
              "reward ", el("b", { cls: "reward", text: fmt(grp.rewards[j]) }), "  adv ", el("b", { cls: "adv", text: fmt(adv) })),
            completionNode(s.completion, s.per_token), el("div", { cls: "muted", text: s.tokens + " tokens, " + s.finish + ", v" + s.policy_version }),
            s.details ? el("pre", { cls: "muted", text: s.details }) : null,
            s.info && Object.keys(s.info).length ? el("pre", { cls: "muted", text: JSON.stringify(s.info) }) : null));
        });
        card.appendChild(row);
        box.appendChild(card);
      });
      histogram(scores);
      if (!state.timings.groups) state.timings.groups = performance.now();
    }).catch(report);
  }
  function histogram(scores) {
    var box = clear(document.getElementById("histogram"));
    if (!scores.length) return;
    var lo = Math.min.apply(null, scores), hi = Math.max.apply(null, scores), bins = 10, counts = new Array(bins).fill(0);
    scores.forEach(function (s) { counts[hi > lo ? Math.min(bins - 1, Math.floor((s - lo) / (hi - lo) * bins)) : 0]++; });
    var top = Math.max.apply(null, counts), h = el("div", { cls: "hist", id: "reward-hist", "data-n": scores.length });
    counts.forEach(function (c, i) {
      h.appendChild(el("div", { title: c + " samples" }, el("span", { text: c }),
        el("span", { cls: "bar", style: "height:" + Math.round(60 * c / top) + "px" }),
        el("span", { text: fmt(lo + (hi - lo) * i / bins) })));
    });
    box.appendChild(el("div", { cls: "muted", text: "reward histogram of this step's samples (" + scores.length + ")" }));
    box.appendChild(h);
  }

  // ---- per-token overlays on a completion (the store's sample_tokens): entropy, the sampler-vs-learner logprob gap,
  // or the tokens the loss left out; each token's figures in its tooltip
  var GAP_HOT = 0.5, ENTROPY_HOT = 1.0;  // nats: a token at or over these is marked (class "hot")
  function legend() {
    var o = state.overlay;
    return o === "gap" ? "shaded by |learner - sampler| logprob (full colour at 1 nat; outlined at >= " + GAP_HOT + ")" :
      o === "entropy" ? "shaded by the learner's entropy (full colour at 2 nats; outlined at >= " + ENTROPY_HOT + ")" :
      o === "mask" ? "struck through: tokens the loss left out (dropped group, masked or invalid sample)" : "";
  }
  function completionNode(text, tok) {
    var o = state.overlay;
    if (o === "none" || tok === undefined) return el("pre", { text: text });
    if (tok === null) return el("pre", { text: text, title: "no per-token record stored for this sample" });
    var pre = el("pre", { cls: "tokens overlay-" + o });
    tok.pieces.forEach(function (piece, i) {
      var lp = tok.learner_logp[i], sp = tok.sampler_logp[i], ent = tok.entropy[i], inLoss = tok.loss_mask[i] === 1;
      var gap = lp === null || sp === null ? null : lp - sp;
      var span = el("span", { cls: "tok", "data-i": i, text: piece === "" ? "\u2404" : piece,
        title: "sampler " + fmt(sp) + " · learner " + fmt(lp) + " · gap " + fmt(gap) + " · entropy " + fmt(ent) +
          (inLoss ? " · in the loss" : " · not in the loss") });
      if (piece === "") span.classList.add("special");
      if (gap !== null) span.setAttribute("data-gap", gap.toFixed(3));
      if (ent !== null) span.setAttribute("data-entropy", ent.toFixed(3));
      if (!inLoss) span.setAttribute("data-masked", "1");
      var v = o === "gap" ? gap : o === "entropy" ? ent : null;
      if (o === "mask") { if (!inLoss) span.classList.add("masked"); }
      else if (v === null) span.classList.add("na");
      else {
        var a = Math.min(1, Math.abs(v) / (o === "gap" ? 1 : 2));
        span.style.background = (o === "gap" ? "rgba(220,38,38," : "rgba(37,99,235,") + a.toFixed(3) + ")";
        if (Math.abs(v) >= (o === "gap" ? GAP_HOT : ENTROPY_HOT)) span.classList.add("hot");
      }
      pre.appendChild(span);
    });
    if (tok.more) pre.appendChild(el("span", { cls: "muted", text: " ... [" + tok.more + " more tokens]" }));
    return pre;
  }
  function setOverlay(value) {
    state.overlay = value;
    Array.prototype.forEach.call(document.querySelectorAll(".overlay-select"), function (s) { s.value = value; });
    Array.prototype.forEach.call(document.querySelectorAll(".overlay-legend"), function (p) { p.textContent = legend(); });
    loadSamples();
    var step = parseInt(document.getElementById("groups-step").value, 10);
    loadGroups(step > 0 ? step : -1);
  }

  // ---- samples, episodes
  function loadSamples() {
    var run = document.getElementById("samples-run").value;
    if (run === "") return;
    var q = encodeURIComponent(document.getElementById("samples-q").value);
    var failed = document.getElementById("samples-failed").checked;
    get("/api/runs/" + run + "/samples?q=" + q + "&failed=" + failed + "&limit=100" + (state.overlay !== "none" ? "&tokens=true" : "")).then(function (rows) {
      var t = clear(document.getElementById("samples"));
      t.appendChild(el("tr", {}, el("th", { text: "step" }), el("th", { text: "group" }), el("th", { cls: "l", text: "task" }),
        el("th", { text: "score" }), el("th", { cls: "l", text: "status" }), el("th", { cls: "l", text: "completion" }), el("th", { cls: "l", text: "verdict" })));
      rows.forEach(function (s) {
        t.appendChild(el("tr", { cls: "sample" }, el("td", { text: s.step }), el("td", { text: s.group + ":" + s.sample }),
          el("td", { cls: "l", text: s.task_id }), el("td", { cls: s.passed ? "pass" : "fail", text: fmt(s.score) }),
          el("td", { cls: "l", text: s.status }), el("td", { cls: "l" }, completionNode(s.completion, s.per_token)),
          el("td", { cls: "l" }, el("pre", { text: s.verifier + "\n" + s.details }))));
      });
    }).catch(report);
  }
  function loadEpisodes() {
    var run = document.getElementById("episodes-run").value;
    if (run === "") return;
    get("/api/runs/" + run + "/episodes").then(function (rows) {
      var box = clear(document.getElementById("episodes"));
      if (!rows.length) { box.appendChild(el("p", { cls: "muted", text: "no agent episodes in this run" })); return; }
      var t = el("table", {}, el("tr", {}, el("th", { text: "step:idx" }), el("th", { cls: "l", text: "task" }), el("th", { text: "status" }),
        el("th", { text: "reward" }), el("th", { text: "turns" }), el("th", { text: "tokens out" })));
      rows.forEach(function (e) {
        var link = el("a", { href: "#episodes-sec", text: e.step + ":" + e.idx });
        link.addEventListener("click", function () { showEpisode(run, e.step, e.idx); });
        t.appendChild(el("tr", { cls: "episode" }, el("td", {}, link), el("td", { cls: "l", text: e.task_id }),
          el("td", { cls: e.passed ? "pass" : "fail", text: e.status }), el("td", { text: fmt(e.reward) }), el("td", { text: e.steps }),
          el("td", { text: e.tokens_out })));
      });
      box.appendChild(t);
    }).catch(report);
  }
  function showEpisode(run, step, idx) {
    get("/api/runs/" + run + "/episodes/" + step + "/" + idx).then(function (ep) {
      var box = clear(document.getElementById("transcript"));
      box.appendChild(el("h3", { text: "episode " + step + ":" + idx + " · " + ep.task_id + " · " + ep.status }));
      if (ep.instruction) box.appendChild(el("pre", { text: ep.instruction }));
      (ep.turns || []).forEach(function (t, i) {
        box.appendChild(el("div", { cls: "turn" }, el("div", { cls: "muted", text: "turn " + (i + 1) + " (" + t.kind + ", " + t.sampled_tokens +
          " tokens, v" + t.policy_version + (t.format_error ? ", format error: " + t.format_error : "") + ")" }), el("pre", { text: t.text })));
        (t.calls || []).forEach(function (c, j) {
          var res = (t.results || [])[j] || {};
          box.appendChild(el("div", { cls: "turn obs" }, el("div", { cls: "muted", text: "tool " + c.name + (res.ok === false ? " (failed)" : "") }),
            el("pre", { text: JSON.stringify(c.arguments || c.args || c) })));
        });
        if (t.observation) box.appendChild(el("div", { cls: "turn obs" }, el("div", { cls: "muted", text: "observation" }), el("pre", { text: t.observation })));
      });
      if (ep.verdict) box.appendChild(el("pre", { text: "verdict: " + ep.verdict.status + " score " + ep.verdict.score + "\n" + ep.verdict.details }));
    }).catch(report);
  }
  function renderStaleness() {
    var box = clear(document.getElementById("staleness"));
    Object.keys(state.staleCharts).forEach(function (id) { state.staleCharts[id].destroy(); });
    state.staleCharts = {};
    selected().forEach(function (r) {
      var s = state.stale[r.id];
      if (!s || !s.steps.length) return;
      var holder = el("div", { cls: "chart", id: "staleness-" + r.id }, el("h3", { text: r.name + ": staleness (steps behind) of each step's samples" }));
      box.appendChild(holder);
      state.staleCharts[r.id] = (new uPlot({ width: 480, height: 190, scales: { x: { time: false } }, axes: [{ size: 28 }, { size: 40 }],
        series: [{ label: "step" }, { label: "min", stroke: "#16a34a" }, { label: "mean", stroke: "#2563eb" }, { label: "max", stroke: "#dc2626" }] },
        [s.steps, s.cols.min, s.cols.mean, s.cols.max], holder));
    });
  }

  function report(e) {
    document.getElementById("status").textContent = "error: " + e.message;
  }

  // ---- polling
  function slowDue() {  // the slow views refresh at most every 5th poll, when a run changed since they were drawn
    return state.below && state.polls - state.slowAt >= 5 && selected().some(function (r) { return state.slowVersions[r.id] !== r.version; });
  }
  function refreshSlow() {
    state.slowAt = state.polls;
    // held-out, domains, failures and staleness of the runs whose store changed since they were last drawn
    var runs = selected(), changed = runs.filter(function (r) { return state.slowVersions[r.id] !== r.version; });
    if (!changed.length) return Promise.resolve();
    state.slow = state.slow || { evals: {}, doms: {}, fails: {} };
    state.slowText = state.slowText || {};
    var redo = { held: false, doms: false, fails: false, stale: false };  // only the views whose answer changed
    return Promise.all(changed.map(function (r) {
      var s = state.stale[r.id], after = s && s.steps.length ? s.steps[s.steps.length - 1] : -1;
      return Promise.all([getText("/api/runs/" + r.id + "/evals"), getText("/api/runs/" + r.id + "/domains"),
        getText("/api/runs/" + r.id + "/failures"),
        get("/api/runs/" + r.id + "/staleness?after=" + after + (after < 0 ? "&max_points=" + MAX_POINTS : ""))]).then(function (x) {
        var prev = state.slowText[r.id] || [];
        if (x[0] !== prev[0]) { state.slow.evals[r.id] = JSON.parse(x[0]); redo.held = true; }
        if (x[1] !== prev[1]) { state.slow.doms[r.id] = JSON.parse(x[1]); redo.doms = true; }
        if (x[2] !== prev[2]) { state.slow.fails[r.id] = JSON.parse(x[2]); redo.fails = true; }
        state.slowText[r.id] = x.slice(0, 3);
        if (merge(r.id, x[3], state.stale)) redo.stale = x[3].reset || !state.staleCharts[r.id] || redo.stale === "all" ? "all" : true;
        state.slowVersions[r.id] = r.version;
      });
    })).then(function () {
      if (redo.held) renderHeld(state.slow.evals);
      if (redo.doms) renderDomains(state.slow.doms);
      if (redo.fails) renderFailures(state.slow.fails);
      if (redo.stale === "all") renderStaleness();
      else if (redo.stale) Object.keys(state.staleCharts).forEach(function (id) {
        var d = state.stale[id];
        state.staleCharts[id].setData([d.steps, d.cols.min, d.cols.mean, d.cols.max]);
      });
    });
  }
  function loadBelow() {  // the panels below the fold: once, when scrolled to or when the page is idle
    if (state.below) return;
    state.below = true;
    loadGroups(-1); loadSamples(); loadEpisodes();  // -1: the newest step with groups
    refreshSlow().then(function () {
      state.timings.complete = performance.now();
      document.body.setAttribute("data-complete", "1");
    }).catch(report);
  }
  if ("IntersectionObserver" in window) {
    var sections = new IntersectionObserver(function (entries) {
      if (entries.some(function (e) { return e.isIntersecting; }) && state.polls) { sections.disconnect(); loadBelow(); }
    }, { rootMargin: "200px" });
    ["held-sec", "domains-sec", "failures-sec", "groups-sec", "samples-sec", "episodes-sec", "staleness-sec"].forEach(function (id) {
      sections.observe(document.getElementById(id));
    });
  }
  function refreshAlerts() {
    return Promise.all(selected().map(function (r) {
      return get("/api/runs/" + r.id + "/alerts").then(function (a) { return a.map(function (x) { x.run = r.name; return x; }); });
    })).then(function (lists) { renderAlerts([].concat.apply([], lists)); });
  }
  function polled() {
    state.polls++;
    var now = Date.now();
    if (!state.statusAt || now - state.statusAt >= 10000) {  // every 10 s: a clock repainted each poll costs a paint a second
      state.statusAt = now;
      document.getElementById("status").textContent = "live · " + state.runs.length + " run(s) · polled " + new Date(now).toLocaleTimeString();
    }
  }
  function poll() {
    if (state.busy) return;
    state.busy = true;
    // after the first load, one request a poll: the runs and the new steps of the runs held (a 304 while no store
    // changed); a run not held yet (new, or just shown) has its steps asked apart, as on a first load
    var held = selected().filter(function (r) { return state.data[r.id]; }).map(function (r) {
      var d = state.data[r.id];
      return r.id + ":" + (d.steps.length ? d.steps[d.steps.length - 1] : -1);
    }).join(",");
    var url = state.polls ? "/api/poll?after=" + encodeURIComponent(held) : "/api/runs";
    fetch(url).then(function (r) {
      if (!r.ok) throw new Error(url + ": " + r.status);
      return r.text();
    }).then(function (text) {
      if (state.polls && text === state.runsText) {  // no store changed: nothing to ask or draw (but slow views due)
        return (slowDue() ? refreshSlow() : Promise.resolve()).then(polled);
      }
      state.runsText = text;
      var answer = JSON.parse(text), runs = state.polls ? answer.runs : answer, sent = state.polls ? answer.steps : {};
      var old = {};
      state.runs.forEach(function (r) { old[r.id] = r; });
      var newRuns = runs.length !== state.runs.length;
      state.runs = runs.map(function (r) { r.show = old[r.id] ? old[r.id].show : r.id < 8; return r; });
      renderRuns();
      var alertsChanged = false, jobs = [];
      if (!state.polls) {  // a first load asks for the first screen's views at once (each needs only the run ids)
        jobs.push(refreshAlerts());
        state.runs.forEach(function (r) { state.alertsSeen[r.id] = r.alerts; });
      }
      return Promise.all(selected().map(function (r) {
        var d = state.data[r.id], after = d && d.steps.length ? d.steps[d.steps.length - 1] : -1;
        if (state.alertsSeen[r.id] !== r.alerts) { alertsChanged = true; state.alertsSeen[r.id] = r.alerts; }
        if (d && state.versions[r.id] === r.version) return false;  // this run's store has not changed
        state.stepReads++;  // a run's new steps read (tests count them: none while no store changes)
        if (d && sent[r.id]) { state.versions[r.id] = r.version; return merge(r.id, sent[r.id]); }
        var url = "/api/runs/" + r.id + "/steps?after=" + after + (after < 0 ? "&max_points=" + MAX_POINTS : "");
        return get(url).then(function (got) { state.versions[r.id] = r.version; return merge(r.id, got); });
      })).then(function (changed) {
        var any = changed.some(Boolean);
        if (!state.timings.steps) state.timings.steps = performance.now();
        if (newRuns || !state.polls) rebuildCharts(); else if (any) updateCharts();
        if (state.polls && alertsChanged) jobs.push(refreshAlerts());
        if (state.polls && slowDue()) jobs.push(refreshSlow());
        return Promise.all(jobs).then(function () {
          var last = {};
          selected().forEach(function (r) { var d = state.data[r.id]; last[r.id] = d && d.steps.length ? d.steps[d.steps.length - 1] : 0; });
          document.body.setAttribute("data-last-steps", JSON.stringify(last));
          if (!state.timings.ready) {
            state.timings.ready = performance.now();
            var idle = window.requestIdleCallback || function (f) { return setTimeout(f, 50); };
            idle(loadBelow, { timeout: 1000 });  // the panels below the fold, once the first screen is drawn
          }
          document.body.setAttribute("data-ready", "1");
          return polled();
        });
      });
    }).catch(report).then(function () { state.busy = false; });
  }

  document.getElementById("groups-step").addEventListener("change", function (e) { loadGroups(parseInt(e.target.value, 10)); });
  document.getElementById("groups-prev").addEventListener("click", function () { loadGroups(parseInt(document.getElementById("groups-step").value, 10) - 1); });
  document.getElementById("groups-next").addEventListener("click", function () { loadGroups(parseInt(document.getElementById("groups-step").value, 10) + 1); });
  document.getElementById("groups-latest").addEventListener("click", function () {
    var d = state.data[document.getElementById("groups-run").value];
    if (d && d.steps.length) loadGroups(d.steps[d.steps.length - 1]);
  });
  document.getElementById("groups-run").addEventListener("change", function () { document.getElementById("groups-latest").click(); });
  document.getElementById("samples-q").addEventListener("input", loadSamples);
  document.getElementById("samples-failed").addEventListener("change", loadSamples);
  document.getElementById("samples-run").addEventListener("change", loadSamples);
  document.getElementById("episodes-run").addEventListener("change", loadEpisodes);
  Array.prototype.forEach.call(document.querySelectorAll(".overlay-select"), function (s) {
    s.addEventListener("change", function () { setOverlay(s.value); });
  });
  poll();
  setInterval(poll, POLL);
})();
