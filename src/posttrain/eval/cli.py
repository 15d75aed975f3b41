"""Commands of the `eval` package, mounted on the `posttrain` app by `register`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level app (imports stay lazy inside each command)."""
