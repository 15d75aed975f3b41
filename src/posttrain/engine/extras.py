"""Optional dependencies of the engine package, imported only when a feature needs them.

Covers: `MissingExtraError`, an ImportError whose message names the
`pip install 'posttrain[<extra>]'` that fixes it, and `require`, which imports
a module or raises that error.
Does not cover: installing anything.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from posttrain.errors import UserError


class MissingExtraError(UserError, ImportError):
    """An optional dependency is absent; the message names the extra that installs it."""


def install_hint(extra: str) -> str:
    return f"pip install 'posttrain[{extra}]'"


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import `module`, or raise `MissingExtraError` saying which extra `feature` needs."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or module
        raise MissingExtraError(f"{feature} needs {missing}, which is not installed: {install_hint(extra)}") from None
