"""Isolated, quota-bound, snapshot-able execution of model-written code.

Public API: ``Sandbox`` (one-shot ``run``/``arun``), ``Session`` (stateful workspace with
``exec``, files, ``snapshot``/``rollback``), ``SandboxPool`` (concurrency with backpressure),
``Limits``, ``ExecResult``, ``ExecStatus``. See ``docs/sandbox.md`` for the design and its
limits. This package imports nothing from the rest of posttrain.
"""

from posttrain.sandbox.launcher import SandboxUnavailable
from posttrain.sandbox.limits import Limits
from posttrain.sandbox.pool import PoolBusy, SandboxPool
from posttrain.sandbox.result import ExecResult, ExecStatus
from posttrain.sandbox.sandbox import Sandbox, SandboxError
from posttrain.sandbox.session import Session

__all__ = ["ExecResult", "ExecStatus", "Limits", "PoolBusy", "Sandbox", "SandboxError", "SandboxPool",
           "SandboxUnavailable", "Session"]
