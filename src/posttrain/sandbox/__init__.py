"""Isolated, quota-bound, snapshot-able execution of model-written code.

Public API: ``Sandbox`` (one-shot ``run``/``arun``), ``Session`` (stateful workspace with
``exec``, files, ``snapshot``/``rollback``, ``fork``), ``SandboxPool`` (concurrency with backpressure),
``Limits``, ``ExecResult``, ``ExecStatus``; ``Workspace``/``Workspaces``, the protocols agent code
uses so that a session may live elsewhere (``SessionLost`` when its holder died). See
``docs/sandbox.md`` for the design and its limits. This package imports nothing from the rest of posttrain.

Names are imported lazily so that the fork-server, which imports this package's low-level
modules, stays small (fork time grows with the parent's memory map).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not `from typing import ...`: the fork-server imports this package and stays small

_EXPORTS = {
    "ExecResult": "result", "ExecStatus": "result", "Limits": "limits", "PoolBusy": "pool",
    "SandboxPool": "pool", "Sandbox": "sandbox", "SandboxError": "session", "Session": "session",
    "SandboxUnavailable": "launcher", "SessionLost": "session", "SandboxFailure": "session",
    "Workspace": "workspace", "Workspaces": "workspace",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # `X as X`: explicit re-exports (`__all__` is computed, so linters cannot read it)
    from posttrain.sandbox.launcher import SandboxUnavailable as SandboxUnavailable
    from posttrain.sandbox.limits import Limits as Limits
    from posttrain.sandbox.pool import PoolBusy as PoolBusy
    from posttrain.sandbox.pool import SandboxPool as SandboxPool
    from posttrain.sandbox.result import ExecResult as ExecResult
    from posttrain.sandbox.result import ExecStatus as ExecStatus
    from posttrain.sandbox.sandbox import Sandbox as Sandbox
    from posttrain.sandbox.session import SandboxError as SandboxError
    from posttrain.sandbox.session import SandboxFailure as SandboxFailure
    from posttrain.sandbox.session import Session as Session
    from posttrain.sandbox.session import SessionLost as SessionLost
    from posttrain.sandbox.workspace import Workspace as Workspace
    from posttrain.sandbox.workspace import Workspaces as Workspaces


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"posttrain.sandbox.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'posttrain.sandbox' has no attribute {name!r}")
