"""Where tasks come from: users' JSONL files, procedural generators, public suites."""

from __future__ import annotations

from pathlib import Path

from posttrain.tasks.arithmetic import FAMILIES, ArithmeticSource
from posttrain.tasks.base import Split, TaskSource, split_of
from posttrain.tasks.jsonl import ListSource, TaskFileError, load_jsonl

__all__ = [
    "FAMILIES",
    "ArithmeticSource",
    "ListSource",
    "Split",
    "TaskFileError",
    "TaskSource",
    "load_jsonl",
    "load_tasks",
    "tasks_from_config",
    "split_of",
]


def load_tasks(
    spec: str,
    held_out_fraction: float = 0.05,
    digits: int = 3,
    on_error: str = "fail",
    min_digits: int | None = None,
    options: dict | None = None,
) -> TaskSource:
    """A task source from a short spec: `arith:<family>`, `code:<family>`, `rg:<dataset>` or a `.jsonl` path.

    `options` are the generator's own knobs for `code:` and `rg:` sources (see `TasksConfig.options`).
    """
    if spec.startswith("code:"):
        from posttrain.tasks.codegen import code_source

        return code_source(spec.split(":", 1)[1], digits=digits, held_out_fraction=held_out_fraction, options=options)
    if spec.startswith("rg:"):
        from posttrain.tasks.reasoning_gym import rg_source

        return rg_source(spec.split(":", 1)[1], held_out_fraction=held_out_fraction, options=options)
    if options:
        raise TaskFileError(f"task source {spec!r} takes no options (got {', '.join(sorted(options))})")
    if spec.startswith("arith:"):
        family = spec.split(":", 1)[1]
        try:
            return ArithmeticSource(family=family, digits=digits, held_out_fraction=held_out_fraction, min_digits=min_digits)  # type: ignore[arg-type]
        except ValueError as exc:
            raise TaskFileError(f"task source {spec!r}: {exc}") from None
    path = Path(spec)
    if path.suffix == ".jsonl" or path.exists():
        return ListSource(load_jsonl(path, on_error=on_error), name=path.stem, held_out_fraction=held_out_fraction)  # type: ignore[arg-type]
    raise TaskFileError(
        f"unknown task source {spec!r}: use 'arith:<family>' ({', '.join(FAMILIES)}), 'code:<family>' (ops, linear), "
        "'rg:<dataset>' or a .jsonl path"
    )


def tasks_from_config(tasks) -> TaskSource:
    """The source a `TasksConfig` (or anything with its fields) describes."""
    return load_tasks(
        tasks.source, tasks.held_out_fraction, tasks.digits, tasks.on_error, tasks.min_digits, getattr(tasks, "options", None)
    )
