"""`posttrain failures RUN`: a training run's failures by category with examples, and their export as a suite.

Covers: `failures RUN [--domain D] [--category C] [--since STEP] [--min-fail-rate R] [--export FILE.jsonl]
[--json]`: the top categories (counts, per domain, the newest examples of each), and `--export` writes a suite
that `posttrain eval --suite FILE.jsonl` runs as it is (and `FILE.responses.jsonl`, the failing responses, for
`posttrain eval --responses`).
Does not cover: the summary and the export themselves (`eval/failure_suite.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from posttrain.cli.common import friendly
from posttrain.errors import UserError


def failures_cmd(
    run: Path = typer.Argument(..., help="A training run directory (or its run.sqlite)."),
    domain: Optional[str] = typer.Option(None, "--domain", help="Only this domain's failures."),
    category: Optional[str] = typer.Option(None, "--category", help="Only this category (wrong_answer, format_error, "
                                           "truncated, timeout, runtime_error, tool_misuse, verifier_error, "
                                           "environment_error, reward_hack)."),
    since: Optional[int] = typer.Option(None, "--since", min=0, help="Only failures from this training step on."),
    min_fail_rate: float = typer.Option(0.0, "--min-fail-rate", min=0.0, max=1.0,
                                        help="Export only tasks failed in at least this share of their samples."),
    export: Optional[Path] = typer.Option(None, "--export", help="Write the failed tasks as a JSONL suite here."),
    examples: int = typer.Option(3, "--examples", min=0, help="Examples shown per category."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Show a run's mined failures (train with train.curriculum = "scheduler"), or export them as an eval suite."""
    with friendly():
        from posttrain.eval.failure_suite import export_failure_suite, summarise_failures
        from posttrain.scheduler.failures import FailureCategory
        from posttrain.store.run_store import RunStore

        if category is not None and category not in {c.value for c in FailureCategory}:
            raise UserError(f"failures: unknown category {category!r}; known: "
                            f"{', '.join(c.value for c in FailureCategory)}")
        path = run if run.suffix == ".sqlite" else run / "run.sqlite"
        if not path.exists():
            raise UserError(f"{run}: no run store (run.sqlite) there")
        with RunStore(path, readonly=True) as store:
            summary = summarise_failures(store.failures(domain, category, since), examples)
            exported = export_failure_suite(store, export, domain, category, since, min_fail_rate) if export is not None else None
    if as_json:
        out = summary.to_dict()
        if exported is not None:
            out["export"] = {"path": str(exported.path), "responses": str(exported.responses), "tasks": exported.tasks,
                             "without_verifier": exported.without_verifier}
        typer.echo(json.dumps(out))
        return
    typer.echo(f"{summary.total} failures in {run}" + (f" ({domain})" if domain else ""))
    for cat, n in summary.by_category.items():
        typer.echo(f"  {cat:<18} {n:>7}  {100 * n / max(summary.total, 1):5.1f}%")
        for ex in summary.examples.get(cat, []):
            typer.echo(f"      step {ex['step']} {ex['domain']} {ex['task_id']}: {ex['prompt'][:60]!r} -> "
                       f"{ex['response'][:60]!r} (gold {ex['answer'][:30]!r}) {ex['detail'][:60]}")
    if exported is not None:
        typer.echo(f"exported {exported.tasks} tasks to {exported.path} (responses: {exported.responses}); "
                   f"run: posttrain eval --suite {exported.path} --model MODEL")
        if exported.without_verifier:
            typer.echo(f"note: {exported.without_verifier} tasks' verifier has no spec: they are judged by exact match")
