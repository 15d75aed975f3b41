"""The one base class of every error a user can fix, and nothing else.

Covers: `UserError`. Every user-facing error in the packages subclasses it
(a bad config, a bad task file, a missing checkpoint, a model spec that names
nothing, an extra that is not installed, ...), so the CLI catches this one
class and prints its message as one line, exit code 2, never a traceback.
Subclasses keep a builtin base (`ValueError`, `ImportError`, ...) where
callers already catch that.
Does not cover: failures that are data (a verifier that raises, a sandbox
run that crashes): those become verdicts and results, not exceptions.
"""

from __future__ import annotations


class UserError(Exception):
    """An error whose message is the whole story for the user: what is wrong and how to fix it."""
