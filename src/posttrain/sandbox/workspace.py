"""The seam between agent code and wherever its workspaces live: the `Workspace` and `Workspaces` protocols.

Covers: `Workspace`, what an agent env, its tools and its verifier call on a stateful workspace (the
`Session` API: `exec`/`aexec`, files, `snapshot`/`rollback`, `fork`, `close`, with the asyncio forms
`afork`, `aread_file`, `awrite_file`, `aclose` that code on an event loop uses), and `Workspaces`, what opens
them (`session`/`asession`) and runs blocking calls off the event loop (`in_worker`). A local `Sandbox` and its
`Session` satisfy them (the fork-server of this process); so do `distributed/ray_sandbox.py`'s `RaySandboxPool`
and its `RaySession` (a session held by a Ray sandbox worker). The agent code (`agent/env.py`, `tools.py`,
`terminal.py`, `rollouter.py`) is written against these and never asks which one it has.
Failure: a workspace whose holder died raises `session.SessionLost` (a `SandboxFailure`) from every operation but
`exec`/`aexec`, which answer a SANDBOX_ERROR result as for any sandbox failure, and `close`, which does
nothing then; the agent runtime turns either into an env_error episode.
Does not cover: one-shot executions (`Sandbox.run`/`arun`, a `SandboxPool`), the implementations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecResult

T = TypeVar("T")


class Workspace(Protocol):
    """A stateful workspace (`Session`'s API). The sync methods block: from asyncio use the `a*` ones."""

    id: str
    limits: Limits

    @property
    def sandbox(self) -> Workspaces: ...

    def exec(self, command: str | list[str] | None = None, *, code: str | None = None, language: str = "python",
             files: dict[str, bytes | str] | None = None, stdin: bytes | str | None = None,
             limits: Limits | None = None, prefork: bool | None = None) -> ExecResult: ...

    async def aexec(self, command: str | list[str] | None = None, *, code: str | None = None,
                    language: str = "python", files: dict[str, bytes | str] | None = None,
                    stdin: bytes | str | None = None, limits: Limits | None = None,
                    prefork: bool | None = None) -> ExecResult: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes | str) -> None: ...

    def snapshot(self) -> int: ...

    def rollback(self, snapshot_id: int) -> None: ...

    def fork(self, *, limits: Limits | None = None, network: bool | None = None) -> Workspace: ...

    def close(self) -> None: ...

    async def afork(self, *, limits: Limits | None = None, network: bool | None = None) -> Workspace: ...

    async def aread_file(self, path: str) -> bytes: ...

    async def awrite_file(self, path: str, data: bytes | str) -> None: ...

    async def aclose(self) -> None: ...


class Workspaces(Protocol):
    """Where workspaces are opened: `files` written and snapshotted, as `Session(files=...)`."""

    def session(self, files: dict[str, bytes | str] | None = None, *, limits: Limits | None = None,
                network: bool | None = None) -> Workspace: ...

    async def asession(self, files: dict[str, bytes | str] | None = None, *, limits: Limits | None = None,
                       network: bool | None = None) -> Workspace: ...

    async def in_worker(self, fn: Callable[[], T]) -> T:
        """Await the blocking `fn()` run off the event loop (a sync `Workspace` call, `open_workspace`)."""
        ...
