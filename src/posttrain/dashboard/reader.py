"""Read-only, incremental views of a run store for the dashboard and `posttrain runs`.

Covers: finding runs (a run directory, or a directory of runs), a read-only SQLite connection per call
(`file:...?mode=ro` URI, `query_only`: under WAL a reader never blocks the trainer's writes), and the
records the page shows: step metrics as columns (parsed once, then only new steps), held-out evaluations,
alerts, the scheduler's per-domain state and failure bank (`domains`, `failures`: read when the store has
them), one step's groups with recomputed advantages, samples (with their per-token records, `step_tokens`,
when asked and stored), episodes and the staleness timeline.
A poll costs the trainer nothing it can feel: `version()` is two `stat` calls (the store file and its WAL
change on every commit), every whole-run view is memoised on it (an unchanged store is never queried), and
the views over samples (staleness, failures without the scheduler's bank) read only the steps after the
newest one read before (a primary-key range), so no poll scans the samples table.
Does not cover: writing (`store/run_store.py`), HTTP (`app.py`) or the page (`static/`).
"""

from __future__ import annotations

import bisect
import json
import math
import sqlite3
import threading
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.store.tokens import TokenRow, read_step_tokens

STORE = "run.sqlite"
MAX_TEXT = 4000  # characters of a completion or prompt sent to the page (the store keeps all of it)
MAX_TOKENS = 2000  # tokens of a completion's per-token record sent to the page


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories: each path that holds a run store, else its subdirectories (one level, then two) that do."""
    found: list[Path] = []
    for p in paths:
        if (p / STORE).exists():
            found.append(p)
        elif p.is_dir():
            found += sorted(d.parent for d in p.glob(f"*/{STORE}")) or sorted(d.parent for d in p.glob(f"*/*/{STORE}"))
    return list(dict.fromkeys(found))


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection to a run store (never creates or writes; waits up to 5 s on a lock)."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5, check_same_thread=False)
    db.execute("PRAGMA query_only = 1")
    return db


def store_version(path: Path) -> str:
    """A token that changes whenever a commit lands: the store's and its write-ahead log's size and mtime (a WAL
    commit appends to the log; a checkpoint rewrites the store). Two `stat` calls, no SQLite."""
    parts = []
    for f in (path, path.with_name(path.name + "-wal")):
        try:
            st = f.stat()
            parts.append(f"{st.st_mtime_ns:x}.{st.st_size:x}")
        except FileNotFoundError:
            parts.append("-")
    return "-".join(parts)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _filled(db: sqlite3.Connection, table: str) -> bool:
    """The table exists and holds a row (the store creates the scheduler's tables for every run; a run
    trained without the scheduler leaves them empty)."""
    return table in _tables(db) and db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None


def _clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f" ... [{len(text) - MAX_TEXT} more characters]"


def _tokens(record: TokenRow | None) -> dict[str, Any] | None:
    """A sample's per-token record for the page (`TokenRow.to_json`, at most MAX_TOKENS tokens), None if not stored."""
    if record is None:
        return None
    out = record.to_json()
    n = len(out["pieces"])
    if n > MAX_TOKENS:
        out = {k: v[:MAX_TOKENS] for k, v in out.items()}
        out["more"] = n - MAX_TOKENS
    return out


def _num(x: Any) -> Any:
    """JSON-safe: NaN and infinities become None."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _numeric(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _shorts(col: list[Any]) -> list[Any]:
    return [_short(v) for v in col]


def _short(x: Any) -> Any:
    """A chart value: 6 significant digits (halves what the page downloads), None for NaN and missing."""
    if isinstance(x, float):
        return float(f"{x:.6g}") if math.isfinite(x) else None
    return x if isinstance(x, int) else None


@dataclass
class StepColumns:
    """A run's step metrics as columns: `steps[i]`, `times[i]` and `cols[key][i]` (None where a step lacks it)."""

    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    cols: dict[str, list[Any]] = field(default_factory=dict)

    def append(self, step: int, t: float, metrics: dict[str, Any]) -> None:
        # the hot loop of a first read (10,000 steps x ~30 metrics): plain values kept as they are (NaN, infinities
        # and non-numbers as None), rounded to 6 digits only when sent (`_short`)
        n = len(self.steps)
        self.steps.append(step)
        self.times.append(t)
        for k in [k for k in metrics if k not in self.cols]:  # in the step's order: the same JSON in every process
            if _numeric(metrics[k]):
                self.cols[k] = [None] * n  # a metric that first appears now: empty before
        get = metrics.get
        for k, col in self.cols.items():
            v = get(k)
            col.append(v if v.__class__ is int or (v.__class__ is float and v - v == 0) else None)

    def decimated(self, max_points: int, reset: bool) -> dict[str, Any]:
        """All steps in at most `max_points` points per series: buckets of consecutive steps, each drawn as two
        points (its first and last step) holding the series' minimum and maximum there, so a spike stays visible."""
        n = len(self.steps) - 1  # the newest step stays exact (the page's "newest" figures read it)
        k = -(-n // max(max_points // 2, 1))  # steps per bucket
        starts = range(0, n, k)
        steps, times = [], []
        for b in starts:
            e = min(b + k, n) - 1
            steps += [self.steps[b], self.steps[e]] if e > b else [self.steps[b]]
            times += [self.times[b], self.times[e]] if e > b else [self.times[b]]
        cols = {}
        for key, col in self.cols.items():
            out: list[Any] = []
            for b in starts:
                e = min(b + k, n)
                vals = [v for v in col[b:e] if v is not None]
                if e - b == 1:
                    out.append(col[b])
                else:
                    out += [min(vals), max(vals)] if vals else [None, None]
            cols[key] = _shorts(out + [col[n]])
        steps.append(self.steps[n])
        times.append(self.times[n])
        return {"reset": reset, "steps": steps, "times": times, "cols": cols, "bucket": k}

    def after(self, step: int, reset: bool = False) -> dict[str, Any]:
        """The columns for steps after `step`; `reset` (all steps) tells a reader to drop what it had."""
        i = 0 if reset else bisect.bisect_right(self.steps, step)
        return {"reset": reset, "steps": self.steps[i:], "times": self.times[i:],
                "cols": {k: _shorts(v[i:]) for k, v in self.cols.items()} if i < len(self.steps) else {}}


class RunReader:
    """One run's store, read live. Step metrics are cached and extended (a store truncated by a resume is re-read)."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.path = run_dir / STORE
        self._cols = StepColumns()
        self._stale = StepColumns()  # per step: min/max/mean staleness and the sample count (from `samples`)
        self._fail_step, self._fail_counts, self._fail_examples = 0, {}, {}  # failures from samples, read so far
        self._memo: dict[str, tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def db(self) -> closing[sqlite3.Connection]:
        return closing(connect(self.path))

    def version(self) -> str:
        """Changes whenever the trainer commits (`store_version`): what the page's polls and the memo compare."""
        return store_version(self.path)

    def memo(self, key: str, compute: Any) -> Any:
        """`compute()`, recomputed only when the store changed since it was last computed for `key`."""
        v = self.version()
        hit = self._memo.get(key)
        if hit is not None and hit[0] == v:
            return hit[1]
        value = compute()
        self._memo[key] = (v, value)
        return value

    def info(self) -> dict[str, Any]:
        with self.db() as db:
            return {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM run")}

    def steps_after(self, step: int, max_points: int | None = None) -> dict[str, Any]:
        """Step metrics as columns for steps after `step` (-1: all; all with `reset` after a truncation); a full
        read longer than `max_points` comes min/max-decimated (`decimated`; its `bucket` says how coarsely)."""
        with self._lock, self.db() as db:
            last = self._cols.steps[-1] if self._cols.steps else 0
            newest = db.execute("SELECT MAX(step) FROM steps").fetchone()[0] or 0
            reset = newest < last or newest < step  # truncated by a resume: read again, and say so
            if reset:
                self._cols, last = StepColumns(), 0
            for s, t, m in db.execute("SELECT step, time, metrics FROM steps WHERE step > ? ORDER BY step", (last,)):
                self._cols.append(s, t, json.loads(m))
            if (step < 0 or reset) and max_points and len(self._cols.steps) > max_points:
                key = (len(self._cols.steps), max_points, reset)
                hit = self._memo.get("decimated")
                if hit is None or hit[0] != key:  # each page opening of a long run is one decimation, not one each
                    hit = (key, self._cols.decimated(max_points, reset))
                    self._memo["decimated"] = hit  # type: ignore[assignment]
                return hit[1]
            return self._cols.after(step, reset)

    def summary(self) -> dict[str, Any]:
        """What `posttrain runs` and the page header show: status, steps, newest reward and held-out, alerts."""
        info = self.info()
        with self.db() as db:
            row = db.execute("SELECT step, time, metrics FROM steps ORDER BY step DESC LIMIT 1").fetchone()
            held = db.execute("SELECT step, metrics FROM evals WHERE name = 'held_out' ORDER BY step DESC LIMIT 1").fetchone()
            n_alerts = (db.execute("SELECT COUNT(*) FROM alerts").fetchone()[0] if "alerts" in _tables(db)
                        else len(info.get("alerts", [])))
        last = json.loads(row[2]) if row else {}
        cfg = info.get("config", {})
        return {"name": cfg.get("name", self.dir.name), "dir": str(self.dir), "status": info.get("status", "unknown"),
                "pid": info.get("pid"), "steps": row[0] if row else 0,
                "planned_steps": cfg.get("train", {}).get("steps"), "updated": row[1] if row else info.get("created"),
                "reward": _num(last.get("reward")), "pass_rate": _num(last.get("pass_rate")),
                "held_out": _num(json.loads(held[1]).get("pass@1")) if held else None,
                "held_out_step": held[0] if held else None, "alerts": n_alerts,
                "stop_reason": info.get("stop_reason"), "error": info.get("error")}

    def evals(self) -> list[dict[str, Any]]:
        with self.db() as db:
            return [{"step": s, "name": n, "metrics": {k: _num(v) for k, v in json.loads(m).items()}}
                    for s, n, m in db.execute("SELECT step, name, metrics FROM evals ORDER BY step, name")]

    def alerts(self) -> list[dict[str, Any]]:
        """Stored alerts, oldest first (the `alerts` table; the run info's list in a store from before it)."""
        with self.db() as db:
            if "alerts" in _tables(db):
                return [json.loads(a) for (a,) in db.execute("SELECT alert FROM alerts ORDER BY rowid")]
        return list(self.info().get("alerts", []))

    def domains(self) -> dict[str, Any]:
        """The scheduler's per-domain state: newest row per domain and each domain's series; `present` False
        when the store holds no per-domain rows (a run without the scheduler, or from before it recorded them)."""
        with self.db() as db:
            if not _filled(db, "domains"):
                return {"present": False, "latest": {}, "series": {}}
            rows = db.execute("SELECT step, domain, metrics FROM domains ORDER BY step, domain").fetchall()
        series: dict[str, dict[str, list[Any]]] = {}
        latest: dict[str, Any] = {}
        for s, d, m in rows:
            metrics = json.loads(m)
            latest[d] = {"step": s, **metrics}
            col = series.setdefault(d, {"steps": []})
            col["steps"].append(s)
            for k in ("pass_rate", "difficulty", "share", "informative_frac"):
                col.setdefault(k, []).append(_num(metrics.get(k)))
        return {"present": True, "latest": latest, "series": series}

    def failures(self, examples: int = 3) -> dict[str, Any]:
        """Failure categories with counts and a few newest examples: the scheduler's `failures` bank when the store
        has one, else the samples whose verdict is not a plain pass or fail (errors, timeouts, truncations), read
        incrementally (only steps after the last read: the samples table is never scanned whole by a poll)."""
        return self.memo(f"failures:{examples}", lambda: self._failures(examples))

    def _failures(self, examples: int) -> dict[str, Any]:
        keys = ("step", "domain", "task_id", "detail", "response", "prompt")
        with self._lock, self.db() as db:
            if _filled(db, "failures"):
                counts = db.execute("SELECT category, COUNT(*) FROM failures GROUP BY category ORDER BY 2 DESC").fetchall()
                pick = ("SELECT step, domain, task_id, detail, response, prompt FROM failures WHERE category = ? "
                        "ORDER BY step DESC LIMIT ?")
                cats = []
                for cat, n in counts:
                    rows = db.execute(pick, (cat, examples)).fetchall()
                    cats.append({"category": cat, "count": n, "examples": [
                        {k: _clip(v) if isinstance(v, str) else v for k, v in zip(keys, r)} for r in rows]})
                return {"source": "failures", "categories": cats}
            newest = db.execute("SELECT MAX(step) FROM samples").fetchone()[0] or 0
            if newest < self._fail_step:  # truncated by a resume: count again
                self._fail_step, self._fail_counts, self._fail_examples = 0, {}, {}
            rows = db.execute("SELECT step, status, task_id, details, completion FROM samples "
                              "WHERE step > ? AND status != 'ok' ORDER BY step", (self._fail_step,)).fetchall()
            self._fail_step = max(newest, self._fail_step)
        for step, status, task, detail, completion in rows:
            self._fail_counts[status] = self._fail_counts.get(status, 0) + 1
            newest_first = self._fail_examples.setdefault(status, [])
            newest_first.insert(0, {"step": step, "domain": "", "task_id": task, "detail": _clip(detail),
                                    "response": _clip(completion), "prompt": ""})
            del newest_first[examples:]
        cats = [{"category": c, "count": n, "examples": list(self._fail_examples[c])}
                for c, n in sorted(self._fail_counts.items(), key=lambda kv: -kv[1])]
        return {"source": "samples", "categories": cats}

    def groups(self, step: int, tokens: bool = False) -> dict[str, Any]:
        """One step's groups (a negative step: the newest): every completion with its reward and verdict, and the
        advantages the update used
        (recomputed from the stored rewards with the run's estimator; groups dropped for zero variance get none);
        with `tokens`, each completion's per-token record (None where the store has none)."""
        cfg = self.info().get("config", {}).get("rl", {})
        with self.db() as db:
            if step < 0:  # the newest step that stored groups
                step = db.execute("SELECT MAX(step) FROM groups").fetchone()[0] or 0
            groups = db.execute("SELECT group_idx, task_id, rewards, used FROM groups WHERE step = ? ORDER BY group_idx",
                                (step,)).fetchall()
            cols = "group_idx, sample_idx, completion, n_tokens, finish, score, passed, status, details, policy_version, info"
            samples = db.execute(f"SELECT {cols} FROM samples WHERE step = ? ORDER BY group_idx, sample_idx",
                                 (step,)).fetchall()
            bounds = db.execute("SELECT MIN(step), MAX(step) FROM groups").fetchone()
            per_token = read_step_tokens(db, step) if tokens else {}
        advantages = _advantages([json.loads(r) for _, _, r, u in groups if u], cfg)
        by_group: dict[int, list[dict[str, Any]]] = {}
        for g, j, text, n_tok, finish, score, passed, status, details, version, info in samples:
            by_group.setdefault(g, []).append({
                "sample": j, "completion": _clip(text), "tokens": n_tok, "finish": finish, "score": _num(score),
                "passed": passed, "status": status, "details": _clip(details), "policy_version": version,
                "info": json.loads(info or "{}"), **({"per_token": _tokens(per_token.get((g, j)))} if tokens else {})})
        out, used_i = [], 0
        for g, task, rewards, used in groups:
            adv = advantages[used_i] if used else None
            used_i += bool(used)
            out.append({"group": g, "task_id": task, "rewards": [_num(r) for r in json.loads(rewards)], "used": bool(used),
                        "advantages": adv, "samples": by_group.get(g, [])})
        return {"step": step, "first_step": bounds[0], "last_step": bounds[1], "estimator": cfg.get("advantage", "grpo"),
                "groups": out}

    def samples(self, query: str = "", only_failed: bool = False, limit: int = 100, tokens: bool = False
                ) -> list[dict[str, Any]]:
        """The newest samples, optionally whose task id or completion contains `query`, optionally failed only; with
        `tokens`, each one's per-token record (`per_token`, None where the store has none)."""
        where, args = ["1=1"], []
        if query:
            where.append("(task_id LIKE ? OR completion LIKE ?)")
            args += [f"%{query}%", f"%{query}%"]
        if only_failed:
            where.append("(passed IS NULL OR passed = 0)")
        keys = ("step", "group", "sample", "task_id", "completion", "score", "passed", "status", "verifier", "details")
        with self.db() as db:
            rows = db.execute(
                "SELECT step, group_idx, sample_idx, task_id, completion, score, passed, status, verifier, details"
                f" FROM samples WHERE {' AND '.join(where)} ORDER BY step DESC, group_idx, sample_idx LIMIT ?",
                (*args, limit)).fetchall()
            per_token = {s: read_step_tokens(db, s, {(r[1], r[2]) for r in rows if r[0] == s})
                         for s in {r[0] for r in rows}} if tokens else {}
        out = []
        for r in rows:
            row = {k: _clip(v) if isinstance(v, str) else _num(v) for k, v in zip(keys, r)}
            if tokens:
                row["per_token"] = _tokens(per_token[r[0]].get((r[1], r[2])))
            out.append(row)
        return out

    def episodes(self, step: int | None = None, limit: int = 200) -> list[dict[str, Any]]:
        cols = "step, idx, task_id, status, passed, reward, steps, tokens_in, tokens_out, seconds"
        with self.db() as db:
            rows = db.execute(f"SELECT {cols} FROM episodes WHERE (? IS NULL OR step = ?) ORDER BY step DESC, idx LIMIT ?",
                              (step, step, limit)).fetchall()
        return [dict(zip([c.strip() for c in cols.split(",")], r)) for r in rows]

    def episode(self, step: int, idx: int) -> dict[str, Any] | None:
        with self.db() as db:
            row = db.execute("SELECT transcript FROM episodes WHERE step = ? AND idx = ?", (step, idx)).fetchone()
        return json.loads(row[0]) if row else None

    def staleness(self, after: int = -1, max_points: int | None = None) -> dict[str, Any]:
        """Per step: how stale its samples were (staleness = step - 1 - the policy version that drew a sample; min,
        max, mean) and how many there were, as columns after step `after` (`steps_after`'s shape and decimation).
        Read incrementally: each call aggregates only the steps stored since the previous one."""
        with self._lock, self.db() as db:
            last = self._stale.steps[-1] if self._stale.steps else 0
            newest = db.execute("SELECT MAX(step) FROM samples").fetchone()[0] or 0
            reset = newest < last or newest < after
            if reset:
                self._stale, last = StepColumns(), 0
            for s, lo, hi, mean, n in db.execute(
                    "SELECT step, MIN(policy_version), MAX(policy_version), AVG(policy_version), COUNT(*) FROM samples "
                    "WHERE step > ? GROUP BY step ORDER BY step", (last,)):
                self._stale.append(s, 0.0, {"min": s - 1 - hi, "max": s - 1 - lo, "mean": s - 1 - mean, "samples": n})
        if (after < 0 or reset) and max_points and len(self._stale.steps) > max_points:
            got = self._stale.decimated(max_points, reset)
        else:
            got = self._stale.after(after, reset)
        del got["times"]
        return got


def _advantages(rewards: list[list[float]], rl: dict[str, Any]) -> list[list[float]]:
    """The advantages of the kept groups of one step ([G][n]), as `rl.advantages` computed them for the update."""
    if not rewards:
        return []
    import torch

    from posttrain.rl.advantages import group_relative_advantages

    width = max(len(r) for r in rewards)
    values = torch.tensor([[x if x is not None and math.isfinite(x) else 0.0 for x in r] + [0.0] * (width - len(r))
                           for r in rewards], dtype=torch.float64)  # [G, n]
    valid = torch.tensor([[x is not None and math.isfinite(x) for x in r] + [False] * (width - len(r)) for r in rewards])
    adv = group_relative_advantages(values, valid, rl.get("advantage", "grpo"), rl.get("std_floor", 0.0))
    return [[round(float(a), 4) for a in row[:len(r)]] for row, r in zip(adv, rewards)]
