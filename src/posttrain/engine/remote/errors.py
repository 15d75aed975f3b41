"""The error a remote engine raises when a request fails for good.

Covers: `EngineRequestError`, in a module of its own so that code which only catches it (the CLI) need
not import httpx. Does not cover: retries or the HTTP client (`openai_engine.py`).
"""

from __future__ import annotations


class EngineRequestError(RuntimeError):
    """A request failed for good: a non-retryable answer, or retries exhausted. `status` is None for transport errors."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
