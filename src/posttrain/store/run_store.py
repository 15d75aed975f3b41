"""The embedded run store: one SQLite file per run.

Covers: the run's config and code version; per-step metrics; per-group
rewards; every sampled completion with its verdict (details for people, `info` as JSON for
programs) and the verifier's latency; held-out evaluations
(metrics, per-task pass rates, and their responses in `eval_samples`);
agent episodes (`episodes`: one row per episode, its transcript as JSON);
the scheduler's per-domain figures (`domains`) and categorised failures (`failures`, with the tasks behind
them in `failure_tasks`, for `posttrain failures --export`);
per-token records of the stored samples (`step_tokens`, one row per step, and each token id's text once in
`token_pieces`; `store/tokens.py`: sampler and learner logprob, entropy and loss mask, for the dashboard's
overlays; older stores' `sample_tokens` is still read); the checkpoint index; monitor alerts
(`alerts`, also kept in the run info's `alerts` list); and truncation after a step, so a resumed run never
holds rows from the steps it is about to redo.
Does not cover: eval-harness results across models (the eval package adds
its own tables to the same kind of file).

Writes for one step go in one transaction; WAL mode lets a reader (a report,
`sqlite3`, TensorBoard export) look while training writes.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from posttrain.store.tokens import StepTokens, TokenRow, read_step_tokens
from posttrain.types import Trajectory

SCHEMA = """
CREATE TABLE IF NOT EXISTS run (
    key TEXT PRIMARY KEY, value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    step INTEGER PRIMARY KEY, time REAL NOT NULL, metrics TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS groups (
    step INTEGER NOT NULL, group_idx INTEGER NOT NULL, task_id TEXT NOT NULL,
    rewards TEXT NOT NULL, used INTEGER NOT NULL,
    PRIMARY KEY (step, group_idx)
);
CREATE TABLE IF NOT EXISTS samples (
    step INTEGER NOT NULL, group_idx INTEGER NOT NULL, sample_idx INTEGER NOT NULL,
    task_id TEXT NOT NULL, completion TEXT NOT NULL, n_tokens INTEGER NOT NULL, finish TEXT NOT NULL,
    score REAL, passed INTEGER, status TEXT NOT NULL, verifier TEXT NOT NULL, details TEXT NOT NULL,
    policy_version INTEGER NOT NULL, latency_s REAL, info TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (step, group_idx, sample_idx)
);
CREATE TABLE IF NOT EXISTS evals (
    step INTEGER NOT NULL, name TEXT NOT NULL, metrics TEXT NOT NULL, per_task TEXT NOT NULL,
    PRIMARY KEY (step, name)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    step INTEGER PRIMARY KEY, path TEXT NOT NULL, time REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS eval_samples (
    step INTEGER NOT NULL, name TEXT NOT NULL, task_id TEXT NOT NULL, sample_idx INTEGER NOT NULL,
    response TEXT NOT NULL, score REAL, passed INTEGER, status TEXT NOT NULL, verifier TEXT NOT NULL, details TEXT NOT NULL,
    info TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (step, name, task_id, sample_idx)
);
CREATE TABLE IF NOT EXISTS episodes (
    step INTEGER NOT NULL, idx INTEGER NOT NULL, task_id TEXT NOT NULL, status TEXT NOT NULL, passed INTEGER NOT NULL,
    reward REAL, steps INTEGER NOT NULL, tokens_in INTEGER NOT NULL, tokens_out INTEGER NOT NULL, seconds REAL NOT NULL,
    cost_usd REAL NOT NULL, transcript TEXT NOT NULL,
    PRIMARY KEY (step, idx)
);
CREATE TABLE IF NOT EXISTS domains (
    step INTEGER NOT NULL, domain TEXT NOT NULL, metrics TEXT NOT NULL, PRIMARY KEY (step, domain)
);
CREATE TABLE IF NOT EXISTS failures (
    step INTEGER NOT NULL, domain TEXT NOT NULL, task_id TEXT NOT NULL, category TEXT NOT NULL, detail TEXT NOT NULL,
    response TEXT NOT NULL, prompt TEXT NOT NULL DEFAULT '', answer TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS failures_by_step ON failures (step);
CREATE TABLE IF NOT EXISTS failure_tasks (
    task_id TEXT PRIMARY KEY, domain TEXT NOT NULL, meta TEXT NOT NULL, verifier TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS alerts (
    step INTEGER NOT NULL, time REAL NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL, alert TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sample_tokens (
    step INTEGER NOT NULL, group_idx INTEGER NOT NULL, sample_idx INTEGER NOT NULL, pieces TEXT NOT NULL,
    sampler_logp BLOB NOT NULL, learner_logp BLOB, entropy BLOB, loss_mask BLOB NOT NULL,
    PRIMARY KEY (step, group_idx, sample_idx)
);
CREATE TABLE IF NOT EXISTS step_tokens (
    step INTEGER PRIMARY KEY, samples BLOB NOT NULL, ids BLOB NOT NULL, sampler_logp BLOB NOT NULL,
    learner_logp BLOB NOT NULL, entropy BLOB NOT NULL, loss_mask BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS token_pieces (id INTEGER PRIMARY KEY, piece TEXT NOT NULL);
"""
# every table with a `step` column (`sample_tokens`: read, no longer written: the one-row-per-sample record of
# stores written before `step_tokens`)
_TABLES = ("steps", "groups", "samples", "evals", "checkpoints", "eval_samples", "episodes", "domains", "failures",
           "alerts", "sample_tokens", "step_tokens")


def _leading(row: Any) -> tuple:
    """A row record's field values but the last (its JSON column), shallow: `astuple` deep-copies every value."""
    return tuple(getattr(row, name) for name in _names_of(type(row)))


@functools.cache
def _names_of(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))[:-1]


@dataclass(frozen=True, slots=True)
class SampleRow:
    """One sampled trajectory as the `samples` table stores it (column order)."""

    group_idx: int
    sample_idx: int
    task_id: str
    completion: str  # the text the verifier judged (the last turn's completion)
    n_tokens: int  # sampled tokens over all turns
    finish: str
    score: float | None
    passed: int | None
    status: str  # the verdict's status, or the rollout's when the environment failed
    verifier: str
    details: str
    policy_version: int
    latency_s: float | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the verdict's structured findings (`Verdict.info`)

    def values(self) -> tuple:
        """The row's column values, `info` as JSON."""
        return (*_leading(self), json.dumps(self.info))

    @classmethod
    def of(cls, group_idx: int, sample_idx: int, t: Trajectory) -> "SampleRow":
        v, c = t.verdict, t.completion
        status = v.status.value if v is not None else "error"
        if v is not None and v.ok and not t.trainable:
            status = t.status.value
        return cls(
            group_idx, sample_idx, t.task.id, c.text, t.sampled_tokens, c.finish_reason.value,
            v.score if v is not None else None, int(v.passed) if v is not None else None, status,
            v.verifier if v is not None else "", v.details if v is not None else "", c.policy_version,
            v.latency_s if v is not None else None, dict(v.info) if v is not None else {},
        )


@dataclass(frozen=True, slots=True)
class EvalSampleRow:
    """One evaluation response as the `eval_samples` table stores it (after step and eval name)."""

    task_id: str
    sample_idx: int
    response: str
    score: float | None
    passed: int | None
    status: str
    verifier: str
    details: str
    info: dict[str, Any] = field(default_factory=dict)  # the verdict's structured findings (`Verdict.info`)

    def values(self) -> tuple:
        """The row's column values, `info` as JSON."""
        return (*_leading(self), json.dumps(self.info))


@dataclass(frozen=True, slots=True)
class EpisodeRow:
    """One agent episode as the `episodes` table stores it (after its step): `transcript` is `Episode.to_dict()`."""

    idx: int
    task_id: str
    status: str
    passed: int
    reward: float | None
    steps: int
    tokens_in: int
    tokens_out: int
    seconds: float
    cost_usd: float
    transcript: dict[str, Any] = field(default_factory=dict)

    def values(self) -> tuple:
        return (*_leading(self), json.dumps(self.transcript))


@dataclass(frozen=True, slots=True)
class DomainRow:
    """One domain's figures at one step (the scheduler's): `metrics` holds pass_rate, difficulty, share,
    informative_frac, seconds, tokens, failures, retired (more keys allowed)."""

    domain: str
    metrics: dict[str, float]


@dataclass(frozen=True, slots=True)
class FailureRow:
    """One failed trajectory, categorised (`scheduler/failures.py`), as the `failures` table stores it."""

    domain: str
    task_id: str
    category: str
    detail: str
    response: str
    prompt: str = ""
    answer: str = ""


@dataclass(frozen=True, slots=True)
class FailureTask:
    """What an exported failure suite needs beyond prompt and answer: the task's JSON-able meta and its
    verifier spec (None when the verifier cannot be written as one)."""

    task_id: str
    domain: str
    meta: dict[str, Any]
    verifier: Any


_SCHEMA_TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA))  # what a current store holds


class RunStore:
    """Read and write one run's records.

    >>> store = RunStore("runs/demo/run.sqlite")
    >>> store.log_step(1, {"reward": 0.5})
    >>> store.metrics("reward")
    [(1, 0.5)]
    """

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        """`readonly`: for readers of a run (reports, `posttrain failures`, replays), possibly while it trains: the
        store must exist (FileNotFoundError), and the connection never writes, never creates tables, never takes
        the writer's lock. A store from before a column was added is brought up to date first, once (a short
        read-write connection: no trainer of this version writes such a store)."""
        self.path = Path(path)
        if readonly:
            if not self.path.is_file():
                raise FileNotFoundError(f"{self.path}: no run store there")
            self.db = self._connect_ro()
            if self._outdated(self.db):
                self.db.close()
                RunStore(self.path).close()
                self.db = self._connect_ro()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self._migrate()

    def _connect_ro(self) -> sqlite3.Connection:
        db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        db.execute("PRAGMA query_only = 1")
        return db

    # columns added since a store was created (a resumed older run, an older run read by a report): per-sample
    # verifier latency, and the verdicts' structured findings (rows from before read as `{}`)
    _ADDED = (("samples", "latency_s", "REAL"), ("samples", "info", "TEXT NOT NULL DEFAULT '{}'"),
              ("eval_samples", "info", "TEXT NOT NULL DEFAULT '{}'"))

    @classmethod
    def _outdated(cls, db: sqlite3.Connection) -> bool:
        """Whether `db` lacks a table of `SCHEMA` or an `_ADDED` column (a store written by an older version)."""
        have = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return bool(_SCHEMA_TABLES - have) or bool(cls._missing_columns(db))

    @classmethod
    def _missing_columns(cls, db: sqlite3.Connection) -> list[tuple[str, str, str]]:
        """The `_ADDED` columns `db` lacks (tables it does not have at all are not asked about)."""
        missing = []
        for table, column, decl in cls._ADDED:
            cols = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if cols and column not in cols:
                missing.append((table, column, decl))
        return missing

    def _migrate(self) -> None:
        for table, column, decl in self._missing_columns(self.db):
            with self.db:
                self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # run-level facts
    def set_info(self, **values: Any) -> None:
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO run(key, value) VALUES (?, ?)", [(k, json.dumps(v)) for k, v in values.items()]
            )

    def add_alert(self, alert: dict[str, Any]) -> None:
        """A run monitor's signal (e.g. held-out regression), appended to the run's `alerts` list."""
        alerts = self.info().get("alerts", [])
        self.set_info(alerts=[*alerts, alert])
        with self.db:  # also a row of `alerts`, which a live reader (the dashboard) polls by step
            self.db.execute("INSERT INTO alerts(step, time, kind, message, alert) VALUES (?, ?, ?, ?, ?)",
                            (int(alert.get("step", 0)), float(alert.get("time", time.time())), str(alert.get("kind", "")),
                             str(alert.get("message", "")), json.dumps(alert)))

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.info().get("alerts", []))

    def info(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM run")}

    # per step
    def log_step(
        self,
        step: int,
        metrics: dict[str, float],
        groups: Iterable[tuple[int, str, list[float], bool]] = (),
        samples: Iterable[SampleRow] = (),
        tokens: StepTokens | None = None,
    ) -> None:
        """One step's metrics, groups (idx, task_id, rewards, used), sample rows and their per-token records (the
        texts of token ids new to the store with them), atomically."""
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO steps(step, time, metrics) VALUES (?, ?, ?)",
                (step, time.time(), json.dumps(metrics)),
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO groups(step, group_idx, task_id, rewards, used) VALUES (?, ?, ?, ?, ?)",
                [(step, g, t, json.dumps(r), int(u)) for g, t, r, u in groups],
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO samples(step, group_idx, sample_idx, task_id, completion, n_tokens, finish,"
                " score, passed, status, verifier, details, policy_version, latency_s, info)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(step, *row.values()) for row in samples],
            )
            if tokens is not None:
                self.db.executemany("INSERT OR IGNORE INTO token_pieces(id, piece) VALUES (?, ?)", tokens.pieces.items())
                self.db.execute(
                    "INSERT OR REPLACE INTO step_tokens(step, samples, ids, sampler_logp, learner_logp, entropy,"
                    " loss_mask) VALUES (?, ?, ?, ?, ?, ?, ?)", (step, *tokens.columns()))

    def sample_tokens(self, step: int) -> list[TokenRow]:
        """One step's per-token records, in group and sample order."""
        return [row for _, row in sorted(read_step_tokens(self.db, step).items())]

    def log_eval(self, step: int, name: str, metrics: dict[str, float], per_task: dict[str, float]) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO evals(step, name, metrics, per_task) VALUES (?, ?, ?, ?)",
                (step, name, json.dumps(metrics), json.dumps(per_task)),
            )

    def log_eval_samples(self, step: int, name: str, rows: Iterable[EvalSampleRow]) -> None:
        """An evaluation's responses."""
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO eval_samples(step, name, task_id, sample_idx, response, score, passed, status,"
                " verifier, details, info) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(step, name, *r.values()) for r in rows],
            )

    def log_episodes(self, step: int, rows: Iterable[EpisodeRow]) -> None:
        """Agent episodes (a training step's, or step 0 for `posttrain agent run`)."""
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO episodes(step, idx, task_id, status, passed, reward, steps, tokens_in, tokens_out,"
                " seconds, cost_usd, transcript) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(step, *r.values()) for r in rows],
            )

    def episodes(self, step: int | None = None, transcripts: bool = False) -> list[tuple[int, EpisodeRow]]:
        """(step, row) for stored episodes in order; transcripts parsed only when asked (they are large)."""
        cols = "step, idx, task_id, status, passed, reward, steps, tokens_in, tokens_out, seconds, cost_usd"
        transcript = "transcript" if transcripts else "'{}'"
        rows = self.db.execute(
            f"SELECT {cols}, {transcript} FROM episodes "
            "WHERE (? IS NULL OR step = ?) ORDER BY step, idx", (step, step))
        return [(r[0], EpisodeRow(*r[1:-1], json.loads(r[-1]))) for r in rows]

    def log_domains(self, step: int, rows: Iterable[DomainRow]) -> None:
        """The scheduler's per-domain figures of one step."""
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO domains(step, domain, metrics) VALUES (?, ?, ?)",
                                [(step, r.domain, json.dumps(r.metrics)) for r in rows])

    def domains(self, domain: str | None = None) -> list[tuple[int, DomainRow]]:
        """(step, row) in step order, one domain's or all."""
        rows = self.db.execute("SELECT step, domain, metrics FROM domains WHERE (? IS NULL OR domain = ?) "
                               "ORDER BY step, domain", (domain, domain))
        return [(s, DomainRow(d, json.loads(m))) for s, d, m in rows]

    def log_failures(self, rows: Iterable[tuple[int, FailureRow]], tasks: Iterable[FailureTask] = ()) -> None:
        """(step, failure) rows, and the tasks behind them (kept once per task id, for export)."""
        with self.db:
            self.db.executemany(
                "INSERT INTO failures(step, domain, task_id, category, detail, response, prompt, answer)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(step, r.domain, r.task_id, r.category, r.detail, r.response, r.prompt, r.answer) for step, r in rows])
            self.db.executemany(
                "INSERT OR IGNORE INTO failure_tasks(task_id, domain, meta, verifier) VALUES (?, ?, ?, ?)",
                [(t.task_id, t.domain, json.dumps(t.meta), json.dumps(t.verifier)) for t in tasks])

    def failures(self, domain: str | None = None, category: str | None = None,
                 since: int | None = None) -> list[tuple[int, FailureRow]]:
        """(step, row) of stored failures in step order, filtered by domain, category and first step (`since`)."""
        rows = self.db.execute(
            "SELECT step, domain, task_id, category, detail, response, prompt, answer FROM failures "
            "WHERE (? IS NULL OR domain = ?) AND (? IS NULL OR category = ?) AND (? IS NULL OR step >= ?) "
            "ORDER BY step, rowid",
            (domain, domain, category, category, since, since))
        return [(r[0], FailureRow(*r[1:])) for r in rows]

    def attempts(self, since: int | None = None) -> dict[str, int]:
        """Trajectories sampled per task id (every stored group, kept or not), from step `since` on."""
        rows = self.db.execute("SELECT task_id, rewards FROM groups WHERE ? IS NULL OR step >= ?", (since, since))
        out: dict[str, int] = {}
        for task_id, rewards in rows:
            out[task_id] = out.get(task_id, 0) + len(json.loads(rewards))
        return out

    def failure_tasks(self) -> dict[str, FailureTask]:
        rows = self.db.execute("SELECT task_id, domain, meta, verifier FROM failure_tasks")
        return {t: FailureTask(t, d, json.loads(m), json.loads(v)) for t, d, m, v in rows}

    def log_checkpoint(self, step: int, path: str) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?)", (step, path, time.time()))

    def forget_checkpoint(self, step: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM checkpoints WHERE step = ?", (step,))

    def truncate_after(self, step: int) -> None:
        """Delete everything recorded after `step` (a resume from that step's checkpoint redoes them)."""
        with self.db:
            for table in _TABLES:
                self.db.execute(f"DELETE FROM {table} WHERE step > ?", (step,))
            self.db.execute("DELETE FROM failure_tasks WHERE task_id NOT IN (SELECT task_id FROM failures)")

    # reading
    def steps(self) -> list[tuple[int, dict[str, float]]]:
        return [(s, json.loads(m)) for s, m in self.db.execute("SELECT step, metrics FROM steps ORDER BY step")]

    def metrics(self, key: str) -> list[tuple[int, float]]:
        return [(s, m[key]) for s, m in self.steps() if key in m]

    def evals(self, name: str | None = None) -> list[tuple[int, str, dict[str, float]]]:
        rows = self.db.execute("SELECT step, name, metrics FROM evals ORDER BY step, name")
        return [(s, n, json.loads(m)) for s, n, m in rows if name is None or n == name]

    def eval_per_task(self, name: str | None = None) -> list[tuple[int, str, dict[str, float]]]:
        """(step, eval name, {task id: pass rate}) for every stored evaluation, in step order."""
        rows = self.db.execute("SELECT step, name, per_task FROM evals ORDER BY step, name")
        return [(s, n, json.loads(p)) for s, n, p in rows if name is None or n == name]

    def eval_samples(self, name: str | None = None, step: int | None = None, limit: int = -1) -> list[dict[str, Any]]:
        """Stored evaluation responses (newest step first), as dicts (`info` parsed)."""
        cols = ("step", "name", "task_id", "sample_idx", "response", "score", "passed", "status", "verifier", "details",
                "info")
        rows = self.db.execute(
            f"SELECT {', '.join(cols)} FROM eval_samples WHERE (? IS NULL OR name = ?) AND (? IS NULL OR step = ?) "
            "ORDER BY step DESC, name, task_id, sample_idx LIMIT ?",
            (name, name, step, step, limit),
        )
        return [{**dict(zip(cols, r)), "info": json.loads(r[-1])} for r in rows]

    def domain_metrics(self, step: int | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        """(step, domain, metrics) from the scheduler's `domains` table (all steps, or one), [] where it has none."""
        try:
            rows = self.db.execute("SELECT step, domain, metrics FROM domains WHERE (? IS NULL OR step = ?) "
                                   "ORDER BY step, domain", (step, step)).fetchall()
        except sqlite3.OperationalError:  # a store without the scheduler's table
            return []
        return [(s, d, json.loads(m)) for s, d, m in rows]

    def checkpoints(self) -> list[tuple[int, str]]:
        return list(self.db.execute("SELECT step, path FROM checkpoints ORDER BY step"))

    def count(self, table: str, where: str = "1=1", args: tuple = ()) -> int:
        if table not in _TABLES:
            raise ValueError(f"unknown table {table!r}")
        return self.db.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}", args).fetchone()[0]
