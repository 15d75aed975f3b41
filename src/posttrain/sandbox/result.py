"""The outcome of one execution: a status enum and a typed record.

Covers: ``ExecStatus`` and ``ExecResult`` and its JSON form. Does not cover how a status is
decided (``supervise.classify``). ``SANDBOX_ERROR`` means the sandbox itself failed and says
nothing about the program; callers must never score it as a wrong answer.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field


class ExecStatus(str, enum.Enum):
    OK = "ok"
    """Exited 0 within every limit."""
    RUNTIME_ERROR = "runtime_error"
    """Exited non-zero or died of a signal of its own making."""
    TIMEOUT = "timeout"
    """Killed at the wall-clock limit."""
    CPU_LIMIT = "cpu_limit"
    """Exceeded its CPU-time limit."""
    OOM = "oom"
    """A process of the task was killed by the memory cgroup."""
    OUTPUT_LIMIT = "output_limit"
    """Wrote more than ``Limits.output_bytes`` to stdout or stderr; killed."""
    SANDBOX_ERROR = "sandbox_error"
    """The sandbox failed (set-up, server crash, bad request); the program's fate is unknown."""


@dataclass
class ExecResult:
    status: ExecStatus
    exit_code: int | None = None
    """Exit status if the task's main process exited; ``None`` if killed by a signal."""
    signal: int | None = None
    """Signal that killed the task's main process, if any."""
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float | None = None
    peak_memory_bytes: int | None = None
    isolated: bool = True
    """False only in the explicitly opted-in unisolated mode."""
    error: str | None = None
    """What went wrong, for SANDBOX_ERROR."""
    warnings: list[str] = field(default_factory=list)
    """Degradations in force (missing cgroups, no isolation ...)."""

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.OK

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict())
