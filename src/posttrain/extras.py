"""Optional dependencies, imported only when a feature needs them: the one way a missing extra is reported.

Covers: `MissingExtraError`, an ImportError (and a `UserError`: the CLI prints it as one line) whose message names
the `pip install 'posttrain[<extra>]'` that fixes it, and `require`, which imports a module or raises that error
(or a subclass a caller names, e.g. `RayMissingError`).
Does not cover: installing anything; which features need which extra (`pyproject.toml`).
"""

from __future__ import annotations

import sys
from types import ModuleType

from posttrain.errors import UserError


class MissingExtraError(UserError, ImportError):
    """An optional dependency is absent; the message names the extra that installs it."""


def install_hint(extra: str) -> str:
    return f"pip install 'posttrain[{extra}]'"


def require(module: str, extra: str, feature: str, error: type[MissingExtraError] = MissingExtraError) -> ModuleType:
    """Import `module`, or raise `error` saying which extra `feature` needs.

    >>> require("no_such_xyz", "serve", "serving")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    posttrain.extras.MissingExtraError: serving needs no_such_xyz, which is not installed: pip install 'posttrain[serve]'
    """
    try:
        __import__(module)  # the import statement's own hook (what a test that hides a module patches)
        return sys.modules[module]
    except ImportError as exc:
        missing = exc.name or module
        raise error(f"{feature} needs {missing}, which is not installed: {install_hint(extra)}") from None
