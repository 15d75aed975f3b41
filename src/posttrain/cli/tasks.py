"""`posttrain tasks list` and `posttrain tasks validate SUITE`: the registered suites, and proof of their graders.

Covers: `list [--json]` (registered suites; `--domains CONFIG`: the domains a config's `[[domains]]` expand to,
counted per family) and `validate SUITE [--limit N] [--suite-opt K=V]... [--json]` (every
gold answer through the suite's verifier: pass rate and each failure; for a suite with a do-nothing response, such
as `terminal`, a table of each task's oracle and do-nothing verdicts; exit 0 when all gold answers score full marks
and every do-nothing response fails, 1 otherwise, 2 for a user error such as an unknown suite or a missing extra).
Does not cover: evaluation of a model (`posttrain eval`, `cli/eval.py`) or the validation itself (`tasks/validate.py`).
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from posttrain.cli.common import friendly

app = typer.Typer(help="Task suites: list them, prove their graders.", no_args_is_help=True)


@app.command("list")
def list_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    domains: Optional[str] = typer.Option(None, "--domains", help="A run config: print the domains its [[domains]] "
                                          "expand to (globs, lists, levels)."),
) -> None:
    """List the registered suites (a name ending in ':<name>' takes an argument; any .jsonl path works too)."""
    from posttrain.tasks.domains import list_domains

    if domains is not None:
        _list_expansion(domains, as_json)
        return

    suites = list_domains()
    if as_json:
        typer.echo(json.dumps({"suites": [{"name": n, "description": d} for n, d in suites]}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("suite", "description")
    for name, desc in suites:
        table.add_row(name, desc)
    table.add_row("<path>.jsonl", "your own tasks (docs/code_verifiers.md, tasks/jsonl.py)")
    Console().print(table)


@app.command("validate")
def validate_cmd(
    suite: str = typer.Argument(..., help="Suite name (see `posttrain tasks list`) or a .jsonl path."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N tasks."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a summary."),
    suite_opt: Optional[list[str]] = typer.Option(
        None, "--suite-opt", "-o", help="A suite option KEY=VALUE, e.g. -o size=50 -o answer_format=tag (repeatable)."
    ),
) -> None:
    """Run every task's reference answer through the suite's verifier; the gold must score full marks."""
    with friendly():
        from posttrain.tasks.domains import load_domain, parse_options
        from posttrain.tasks.validate import validate_suite

        options = parse_options(suite_opt)
        if limit is not None:
            options["limit"] = limit
        loaded = load_domain(suite, **options).suite()
        report = validate_suite(loaded, limit=limit)
    if as_json:
        typer.echo(json.dumps(report.to_dict()))
    else:
        if report.rows:
            _print_rows(report)
        for r in report.rows:
            for note in r.notes:
                typer.echo(f"NOTE {r.task_id}: {note}")
        for f in report.null_failures:
            typer.echo(f"FAIL {f.task_id}: the do-nothing response scored {f.score:.3f} [{f.status}] {f.details[:300]}")
        for f in report.failures:
            typer.echo(f"FAIL {f.task_id}: score {f.score:.3f} [{f.status}] {f.details[:300]}")
        typer.echo(f"{report.suite}: {report.passed}/{report.total} gold answers score full marks "
                   f"({100 * report.pass_rate:.1f}%) in {report.seconds:.1f} s  verifier {report.verifier}")
    raise typer.Exit(0 if report.ok else 1)


def _list_expansion(path: str, as_json: bool) -> None:
    """What a config's `[[domains]]` expand to: one line per domain (name, source, options, weight)."""
    with friendly():
        from posttrain.config import load_config
        from posttrain.tasks.expand import expand_domains

        entries = expand_domains(load_config(path).domain_configs())
    rows = [{"name": d.label, "source": d.source, "options": d.options, "weight": d.weight} for d in entries]
    families: dict[str, int] = {}
    for r in rows:  # per family: the part of the source before its colon (`rg`, `arith`), else the source itself
        family = str(r["source"]).split(":", 1)[0]
        families[family] = families.get(family, 0) + 1
    if as_json:
        typer.echo(json.dumps({"domains": rows, "count": len(rows), "families": families}))
        return
    for r in rows:
        opts = " ".join(f"{k}={v}" for k, v in r["options"].items())
        typer.echo(f"{r['name']}\t{r['source']}\t{opts}\tweight={r['weight']:g}")
    typer.echo(f"{len(rows)} domains (" + ", ".join(f"{f} {n}" for f, n in families.items()) + ")")


def _print_rows(report) -> None:
    """The per-task table: the oracle must pass, the do-nothing response must fail."""
    from rich.console import Console
    from rich.table import Table

    table = Table("task", "oracle", "do-nothing", "ok", title=f"{report.suite}: oracle solutions and a do-nothing agent")
    for r in report.rows:
        table.add_row(r.task_id, f"{r.gold_score:g} ({r.gold_status})", f"{r.null_score:g} ({r.null_status})",
                      "yes" if r.ok else "[red]NO[/red]")
    Console(width=120).print(table)
