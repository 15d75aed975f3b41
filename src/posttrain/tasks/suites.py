"""Named task suites: a fixed list of tasks together with the verifier that accepts answers to them.

Covers: the registry every consumer resolves suite names through
(`posttrain tasks list / validate`, `posttrain eval --suite`, training's
held-out sets): `register_suite` (a decorator), `list_suites`, `load_suite`.
A spec is a registered name (`humaneval`), a registered family with an
argument after a colon (`arith:add`, `rg:leg_counting`), or a path to a
`.jsonl` file. The built-in entries here are the arithmetic generators and
JSONL files; other modules register theirs on import (see `_PLUGINS`).
Does not cover: running a suite (see `posttrain.eval`) or validating it
(see `posttrain.tasks.validate`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.tasks.jsonl import TaskFileError, load_jsonl
from posttrain.types import Task

# Modules that register suites when imported; each is imported lazily, the first time the registry is read.
_PLUGINS: list[str] = ["posttrain.tasks.humaneval", "posttrain.tasks.codegen", "posttrain.tasks.reasoning_gym"]


@dataclass
class Suite:
    """Tasks plus the verifier that judges responses to them (the same one training rewards with)."""

    name: str
    tasks: list[Task]
    verifier: Any  # a `posttrain.rewards.Verifier`
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # options it was built with, source versions

    def __post_init__(self) -> None:
        if not self.tasks:
            raise TaskFileError(f"suite {self.name!r} has no tasks")
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            raise TaskFileError(f"suite {self.name!r} has duplicate task ids")


SuiteFactory = Callable[..., Suite]


@dataclass(frozen=True)
class _Entry:
    name: str  # "humaneval", or a family "rg:" whose factory takes the part after the colon
    factory: SuiteFactory
    description: str
    family: bool


_REGISTRY: dict[str, _Entry] = {}
_plugins_loaded = False


def register_suite(name: str, description: str) -> Callable[[SuiteFactory], SuiteFactory]:
    """Register a suite factory. A name ending in ':' is a family: `factory(arg, **options)` for `name + arg`.

    >>> @register_suite("tiny", "two additions")
    ... def tiny(**options):
    ...     return Suite("tiny", [Task("a", "1+1=", "2"), Task("b", "2+2=", "4")], ExactMatch())
    """

    def decorate(factory: SuiteFactory) -> SuiteFactory:
        _REGISTRY[name] = _Entry(name, factory, description, family=name.endswith(":"))
        return factory

    return decorate


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for module in _PLUGINS:
        importlib.import_module(module)


def list_suites() -> list[tuple[str, str]]:
    """(name, description) of every registered suite; families are shown as `prefix:<arg>`."""
    _load_plugins()
    return sorted((e.name + "<name>" if e.family else e.name, e.description) for e in _REGISTRY.values())


def load_suite(spec: str, **options: Any) -> Suite:
    """The suite a spec names; unknown names fail with the list of known ones."""
    _load_plugins()
    if spec in _REGISTRY and not _REGISTRY[spec].family:
        return _REGISTRY[spec].factory(**options)
    if ":" in spec:
        prefix, arg = spec.split(":", 1)
        entry = _REGISTRY.get(prefix + ":")
        if entry is not None:
            return entry.factory(arg, **options)
    path = Path(spec)
    if path.suffix == ".jsonl" or path.exists():
        return _jsonl_suite(path, **options)
    known = ", ".join(name for name, _ in list_suites())
    raise TaskFileError(f"unknown suite {spec!r}: known suites are {known}, or a path to a .jsonl file")


@register_suite("arith:", "held-out problems of a built-in arithmetic family (add, sub, addsub, mul, chain)")
def _arith_suite(
    family: str, limit: int = 500, digits: int = 2, held_out_fraction: float = 0.15, seed: int = 0, **_: Any
) -> Suite:
    from posttrain.rewards import NumericMatch
    from posttrain.tasks.arithmetic import ArithmeticSource

    try:
        source = ArithmeticSource(family=family, digits=digits, held_out_fraction=held_out_fraction)  # type: ignore[arg-type]
    except ValueError as exc:
        raise TaskFileError(f"suite 'arith:{family}': {exc}") from None
    tasks = source.take(limit, "held_out", seed=seed)
    return Suite(
        f"arith:{family}",
        tasks,
        NumericMatch(extract="last_number"),
        description=f"{len(tasks)} held-out {digits}-digit {family} problems",
        meta={"family": family, "digits": digits, "limit": limit, "seed": seed},
    )


def _jsonl_suite(path: Path, on_error: str = "fail", limit: int | None = None, **_: Any) -> Suite:
    """A user's JSONL file; each task's verifier comes from its `meta["verifier"]` (default: exact match)."""
    from posttrain.rewards import build_verifier

    tasks = load_jsonl(path, on_error=on_error)  # type: ignore[arg-type]
    if limit is not None:
        tasks = tasks[:limit]
    return Suite(path.stem, tasks, build_verifier("per_task"), description=f"{len(tasks)} tasks from {path}",
                 meta={"path": str(path)})


def parse_suite_options(pairs: list[str] | None) -> dict[str, Any]:
    """`["size=50", "answer_format='tag'"]` -> options for `load_suite`; values are TOML literals, else strings."""
    import tomllib

    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise TaskFileError(f"suite option {pair!r}: expected KEY=VALUE")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare word: a string
        options[key.strip()] = value
    return options
