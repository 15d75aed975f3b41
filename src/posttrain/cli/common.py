"""Plumbing every command shares: the two consoles, one-line user errors, the progress bar, number formatting.

Covers: `friendly()`, the context every command body runs in: a `UserError` (the one base of everything a
user can fix, `posttrain.errors`) prints `error: <message>` on one line of stderr and exits with code 2,
never a traceback; Ctrl-C prints a short note and exits with 130. Progress and notes go to stderr (`err`),
so `--json` output on stdout stays clean.
Does not cover: which exceptions are user errors: the domain packages decide that by subclassing `UserError`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from posttrain.errors import UserError

err = Console(stderr=True)
out = Console()

SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override a config field: --set rl.lr=1e-4 (repeatable).")]

USER_ERROR_EXIT = 2
INTERRUPTED_EXIT = 130


@contextmanager
def friendly(interrupted: str = "") -> Iterator[None]:
    """Run a command body: a `UserError` becomes one `error:` line and exit code 2; Ctrl-C exits 130 with
    `interrupted` (what is kept, how to go on) after the note."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_config_notes(warnings.showwarning)
            yield
    except UserError as exc:
        # escaped: a message such as "pip install 'posttrain[serve]'" is text, not rich markup
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(USER_ERROR_EXIT) from None
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]" + (f": {escape(interrupted)}" if interrupted else ""))
        raise typer.Exit(INTERRUPTED_EXIT) from None


def _one_line_config_notes(shown: Callable[..., None]) -> Callable[..., None]:
    """`warnings.showwarning` that prints a config key's move (`config.ConfigDeprecation`) as one `note:` line."""

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        from posttrain.config import ConfigDeprecation  # here: only a shown warning pays for pydantic

        if issubclass(category, ConfigDeprecation):
            err.print(f"[yellow]note:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
        else:
            shown(message, category, *args, **kwargs)

    return show


def progress() -> Progress:
    """A progress display on stderr: description, bar, done/total, a free `info` field, elapsed time."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


def fmt(x: Any, pct: bool = False) -> str:
    """A table cell: '-' for missing or NaN, a percentage or 4 significant digits for floats."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.1%}" if pct else (f"{x:.4g}")
    return str(x)
