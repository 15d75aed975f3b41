"""What an evaluation leaves on disk: one record per sampled response, appended as it is graded.

Covers: `SampleRecord` (a response, its verdict with the verifier's structured findings, tokens, latency),
`EvalRun` (the run's settings plus its records), and the directory layout
`posttrain eval --out DIR` writes:

    DIR/meta.json       model, suite spec and options, sampling settings, verifier id, code version
    DIR/tasks.jsonl     the suite's tasks (id, prompt, answer) as they were, for reports
    DIR/samples.jsonl   one SampleRecord per line, appended and flushed per graded batch
    DIR/episodes.jsonl  an agent suite's episodes, one transcript per line (`Episode.to_dict()`)
    DIR/summary.json    the metrics, `EvalSummary.to_dict()` (rewritten at the end; derived: resuming and
                        re-grading read the records, never this file; `EvalDir.summary()` reads it back)

Appending per batch is what makes an eval resumable (finished samples are
read back and skipped) and re-gradable (`--rescore` needs only the
responses). A torn last line from a crash is ignored on reading. Records written before `info` existed read
with an empty `info` (their `details` as they were).
Does not cover: computing metrics (see `summary.py`) or running models.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posttrain.errors import UserError
from posttrain.eval.results import EvalSummary

if TYPE_CHECKING:
    from posttrain.agent.episode import Episode

META, TASKS, SAMPLES, SUMMARY = "meta.json", "tasks.jsonl", "samples.jsonl", "summary.json"


class EvalDirError(UserError, ValueError):
    """A path that is not an evaluation directory, or one made with other settings."""


@dataclass
class SampleRecord:
    """One graded response. `(task_id, repeat, sample)` identifies it within an evaluation."""

    task_id: str
    response: str
    score: float
    passed: bool
    status: str = "ok"  # VerdictStatus value: ok, error, timeout
    verifier: str = ""  # name@version-hash of the checking code
    details: str = ""  # the verdict's text for people
    info: dict[str, Any] = field(default_factory=dict)  # the verdict's structured findings (`Verdict.info`)
    sample: int = 0
    repeat: int = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_s: float | None = None  # generation time attributed to this response
    verify_s: float | None = None
    finish: str | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.task_id, self.repeat, self.sample)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> str:
        d = asdict(self)
        if isinstance(d["score"], float) and not math.isfinite(d["score"]):
            d["score"] = None
        return json.dumps(d, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SampleRecord:
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        if d.get("score") is None:
            d["score"] = 0.0
        if not isinstance(d.get("info"), dict):  # absent (a record from before `info`) or null
            d["info"] = {}
        return cls(**d)


@dataclass
class EvalRun:
    """An evaluation's settings (`meta`), the tasks it asked about, and every graded response.

    `summary` holds the figures when this process computed them (`run_eval`, `rescore`); a run loaded from
    disk leaves it None (`summarize(run.records, ...)` recomputes them; `EvalDir.summary()` reads the stored ones).
    An agent suite's run also holds the episodes this process ran (`episodes`, per task in suite order; on disk in
    `episodes.jsonl`) and their turn figures (`episode_metrics`); a single-turn run leaves them None and empty.
    """

    meta: dict[str, Any]
    records: list[SampleRecord]
    tasks: list[dict[str, Any]] = field(default_factory=list)  # {"id", "prompt", "answer"} in suite order
    path: Path | None = None
    summary: EvalSummary | None = None
    episodes: list[list[Episode]] | None = None  # agent suites: per task, its episodes (None: single-turn)
    episode_metrics: dict[str, float] = field(default_factory=dict)  # `agent.metrics.episode_metrics` of them

    @property
    def name(self) -> str:
        return self.meta.get("label") or (self.path.name if self.path else "eval")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line torn by a crash mid-write: its samples are redone
    return rows


class EvalDir:
    """Reads and appends one evaluation directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return (self.path / META).exists()

    def meta(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / META).read_text())
        except FileNotFoundError:
            raise EvalDirError(f"{self.path}: not an evaluation directory (no {META})") from None

    def start(self, meta: dict[str, Any], tasks: Iterable[dict[str, Any]]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / META).write_text(json.dumps(meta, indent=2, default=str))
        with (self.path / TASKS).open("w", encoding="utf-8") as f:
            for t in tasks:
                f.write(json.dumps(t, ensure_ascii=False) + "\n")

    def records(self) -> list[SampleRecord]:
        """Every complete record; a later record for the same key replaces an earlier one."""
        by_key: dict[tuple[str, int, int], SampleRecord] = {}
        for row in _read_jsonl(self.path / SAMPLES):
            try:
                rec = SampleRecord.from_dict(row)
            except TypeError:
                continue
            by_key[rec.key] = rec
        return list(by_key.values())

    def tasks(self) -> list[dict[str, Any]]:
        return _read_jsonl(self.path / TASKS)

    def append(self, records: Iterable[SampleRecord]) -> None:
        lines = "".join(r.to_json() + "\n" for r in records)
        path = self.path / SAMPLES
        if path.exists() and path.stat().st_size:
            with path.open("rb") as f:
                f.seek(-1, 2)
                if f.read(1) != b"\n":  # a line torn by a crash: end it, so it cannot swallow the next record
                    lines = "\n" + lines
        with path.open("a", encoding="utf-8") as f:
            f.write(lines)
            f.flush()

    def rewrite(self, records: Iterable[SampleRecord]) -> None:
        """Replace all records at once (a rescore): written aside, then renamed into place."""
        tmp = self.path / (SAMPLES + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for r in records:
                f.write(r.to_json() + "\n")
        tmp.replace(self.path / SAMPLES)

    def write_summary(self, summary: EvalSummary) -> None:
        (self.path / SUMMARY).write_text(json.dumps(clean_json(summary.to_dict()), indent=2, default=str))

    def summary(self) -> EvalSummary | None:
        """The figures as last written (None before an evaluation finished once)."""
        try:
            return EvalSummary.from_dict(json.loads((self.path / SUMMARY).read_text()))
        except FileNotFoundError:
            return None

    def load(self) -> EvalRun:
        return EvalRun(self.meta(), self.records(), self.tasks(), self.path)


def load_eval(path: str | Path) -> EvalRun:
    """An evaluation directory's settings and records (`EvalDirError` when it is not one)."""
    return EvalDir(path).load()


def clean_json(value: Any) -> Any:
    """NaN / inf become None, recursively, so `json.dumps` output is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value
