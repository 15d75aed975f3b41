"""The `posttrain` typer app: every command, mounted in the order `posttrain --help` lists them.

Covers: building the app from the command modules and `main`, the console-script entry point.
Does not cover: the commands themselves (one module per group beside this one).
"""

from __future__ import annotations

import typer

from posttrain.cli import agent, dashboard, draft, export, failures, sandbox, serve, tasks, train
from posttrain.cli import eval as eval_commands

app = typer.Typer(
    help="posttrain: post-train language models with RL from verifiable rewards.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.command()(train.quickstart)
app.command()(train.base)
app.command()(train.train)
app.command("config")(train.show_config)
app.add_typer(sandbox.app, name="sandbox", help="Run commands in the isolated sandbox.")
app.add_typer(tasks.app, name="tasks", help="Task suites: list them, prove their graders.")
app.add_typer(agent.app, name="agent", help="Run agents on tasks in the sandbox; replay their transcripts.")
app.command()(serve.serve)
app.command()(export.export)
app.command()(draft.draft)
app.command("eval")(eval_commands.eval_cmd)
app.command("compare")(eval_commands.compare_cmd)
app.command("report")(eval_commands.report_cmd)
app.command("failures")(failures.failures_cmd)
app.command("dashboard")(dashboard.dashboard)
app.command("runs")(dashboard.runs)


def main() -> None:
    app()
