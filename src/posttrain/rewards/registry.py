"""Verifiers by name: the spec language configs, JSONL tasks and suites use to say how to check an answer.

Covers: `register_verifier(kind)` (a decorator for factories), `make_verifier(spec)`
where a spec is a kind (`"numeric"`) or a dict with a `type` key and the
factory's keyword arguments (`{"type": "numeric", "abs_tol": 0.01}`), and
`PerTask`, the verifier that reads each task's own spec from
`task.meta["verifier"]` and dispatches a batch to the right verifiers
concurrently (one call per distinct spec).
Does not cover: the verifiers themselves (each module registers its own).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.rewards.base import Verifier, error_verdict, score
from posttrain.types import Task, Verdict

VerifierSpec = str | dict[str, Any]
_FACTORIES: dict[str, Callable[..., Verifier]] = {}
# Modules that register verifier kinds on import; loaded the first time a spec is resolved.
_PLUGINS: list[str] = [
    "posttrain.rewards.verifiers", "posttrain.rewards.rubric", "posttrain.rewards.answers", "posttrain.rewards.format",
    "posttrain.rewards.constraints", "posttrain.rewards.render", "posttrain.rewards.judge", "posttrain.rewards.code",
    "posttrain.rewards.dedup", "posttrain.rewards.reasoning_gym", "posttrain.rewards.cad",
]
_plugins_loaded = False


def register_verifier(kind: str) -> Callable[[Callable[..., Verifier]], Callable[..., Verifier]]:
    def decorate(factory: Callable[..., Verifier]) -> Callable[..., Verifier]:
        _FACTORIES[kind] = factory
        return factory

    return decorate


def _load_plugins() -> None:
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        for module in _PLUGINS:
            importlib.import_module(module)


def verifier_kinds() -> list[str]:
    _load_plugins()
    return sorted(_FACTORIES)


def make_verifier(spec: VerifierSpec) -> Verifier:
    """The verifier a spec describes; an unknown kind or a bad argument is a ValueError naming both."""
    _load_plugins()
    if isinstance(spec, str):
        kind, params = spec, {}
    elif isinstance(spec, dict) and isinstance(spec.get("type"), str):
        params = {k: v for k, v in spec.items() if k != "type"}
        kind = spec["type"]
    else:
        raise ValueError(f"verifier spec must be a kind name or an object with a 'type' key, got {spec!r}")
    if kind not in _FACTORIES:
        raise ValueError(f"unknown verifier {kind!r}: known kinds are {', '.join(sorted(_FACTORIES))}")
    try:
        return _FACTORIES[kind](**params)
    except TypeError as exc:
        raise ValueError(f"verifier {kind!r}: {exc}") from None


def _spec_key(spec: VerifierSpec) -> str:
    return spec if isinstance(spec, str) else json.dumps(spec, sort_keys=True)


@dataclass
class PerTask:
    """Each task names its own verifier in `meta["verifier"]`; tasks that do not use `default`."""

    default: VerifierSpec = "exact"
    name: str = "per_task"

    def __post_init__(self) -> None:
        self._cache: dict[str, Verifier] = {}

    def _for(self, task: Task) -> Verifier:
        spec = task.meta.get("verifier", self.default)
        key = _spec_key(spec)
        if key not in self._cache:
            self._cache[key] = make_verifier(spec)
        return self._cache[key]

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(tasks)
        buckets: dict[int, tuple[Verifier, list[int]]] = {}
        for i, task in enumerate(tasks):
            try:
                verifier = self._for(task)
            except ValueError as exc:
                out[i] = error_verdict(exc)
                continue
            buckets.setdefault(id(verifier), (verifier, []))[1].append(i)

        async def run(verifier: Verifier, idx: list[int]) -> None:
            verdicts = await score(verifier, [tasks[i] for i in idx], [responses[i] for i in idx])
            for i, v in zip(idx, verdicts):
                out[i] = v

        await asyncio.gather(*(run(v, idx) for v, idx in buckets.values()))
        return [v for v in out if v is not None]


def spec_of(verifier: Any) -> VerifierSpec | None:
    """The spec that rebuilds `verifier` through `make_verifier` (a dataclass verifier of a registered kind: its
    `name` is the kind, its fields the arguments, nested verifiers as nested specs), or None when there is none
    (a verifier with a custom name or state, a wrapper such as a length cap). A nested settings record becomes a
    dict. Checked by rebuilding it, and JSON-able (it is stored and exported)."""
    if not dataclasses.is_dataclass(verifier) or isinstance(verifier, type):
        return None
    kind = getattr(verifier, "name", None)
    _load_plugins()
    if not isinstance(kind, str) or kind not in _FACTORIES:
        return None
    spec: dict[str, Any] = {"type": kind}
    for f in dataclasses.fields(verifier):
        if not f.init or f.name == "name":
            continue
        value = getattr(verifier, f.name)
        if hasattr(value, "verify_batch"):
            value = spec_of(value)
            if value is None:
                return None
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)  # a settings record (the cad verifier's `render`): its factory takes a dict
        spec[f.name] = value
    try:
        json.dumps(spec)  # a spec is written out (the failure bank's tasks, exported suites): JSON or none
        rebuilt = make_verifier(spec)
    except (ValueError, TypeError):
        return None
    return spec if rebuilt == verifier else None
