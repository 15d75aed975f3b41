"""The `posttrain` command line: a thin typer app over the packages, and the only place that imports typer and rich.

Covers: the app and its entry point (`app.py`), shared plumbing (`common.py`: one-line user errors, progress on
stderr), and one module per group of commands: `train.py` (quickstart, base, train, config), `serve.py` (serve),
`eval.py` (eval, compare, report), `tasks.py` (tasks list /
validate), `sandbox.py` (sandbox run), `agent.py` (agent run / show), `export.py` (export to GGUF), `draft.py` (draft).
Does not cover: what the commands do; each calls plain functions of the domain packages, which never import from here.
"""

from __future__ import annotations

from posttrain.cli.app import app, main

__all__ = ["app", "main"]
