"""`Suite`: a fixed list of tasks together with the verifier that accepts answers to them.

Covers: the record every evaluation runs on (`posttrain tasks validate`,
`posttrain eval --suite`, training's held-out evaluations): a domain's
evaluation view (`posttrain.tasks.domains.Domain.suite()`, the one registry
that resolves specs), or a list of tasks built in code.
Does not cover: resolving a spec (see `domains.py`), running a suite (see
`posttrain.eval`) or validating it (see `posttrain.tasks.validate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import Task


@dataclass
class Suite:
    """Tasks plus the verifier that judges responses to them (the same one training rewards with)."""

    name: str
    tasks: list[Task]
    verifier: Any  # a `posttrain.rewards.Verifier`
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # options it was built with, source versions
    agent: Any = None  # an `agent.spec.AgentSpec`: its tasks run as agent episodes (None: one response each)

    def __post_init__(self) -> None:
        if not self.tasks:
            raise TaskFileError(f"suite {self.name!r} has no tasks")
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            raise TaskFileError(f"suite {self.name!r} has duplicate task ids")
