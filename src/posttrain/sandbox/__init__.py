"""Isolated, quota-bound, snapshot-able execution of model-written code.

Public API: ``Sandbox`` (one-shot ``run``/``arun``), ``Session`` (stateful workspace with
``exec``, files, ``snapshot``/``rollback``), ``SandboxPool`` (concurrency with backpressure),
``Limits``, ``ExecResult``, ``ExecStatus``. See ``docs/sandbox.md`` for the design and its
limits. This package imports nothing from the rest of posttrain.

Names are imported lazily so that the fork-server, which imports this package's low-level
modules, stays small (fork time grows with the parent's memory map).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not `from typing import ...`: the fork-server imports this package and stays small

_EXPORTS = {
    "ExecResult": "result", "ExecStatus": "result", "Limits": "limits", "PoolBusy": "pool",
    "SandboxPool": "pool", "Sandbox": "sandbox", "SandboxError": "session", "Session": "session",
    "SandboxUnavailable": "launcher",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from posttrain.sandbox.launcher import SandboxUnavailable
    from posttrain.sandbox.limits import Limits
    from posttrain.sandbox.pool import PoolBusy, SandboxPool
    from posttrain.sandbox.result import ExecResult, ExecStatus
    from posttrain.sandbox.sandbox import Sandbox
    from posttrain.sandbox.session import SandboxError, Session


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"posttrain.sandbox.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'posttrain.sandbox' has no attribute {name!r}")
