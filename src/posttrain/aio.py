"""Running a coroutine from synchronous code, whether or not an event loop is already running.

Covers: `run_sync(coro)`: `asyncio.run` when no loop runs in this thread;
otherwise the coroutine runs to completion on a fresh loop in a worker
thread, in the caller's context (so synchronous APIs such as `score_sync` or `evaluate` can be called
from inside async code, a notebook or a server handler) and its exception,
if any, is re-raised in the caller's thread.
Does not cover: scheduling work concurrently with the caller's loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    # in the caller's context (a run's `use_sandboxes`, say), as `asyncio.run` in this thread would be
    thread = threading.Thread(target=contextvars.copy_context().run, args=(runner,), name="posttrain-run-sync")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
