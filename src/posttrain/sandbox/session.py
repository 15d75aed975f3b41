"""``Session``: a stateful sandbox workspace for agents, with snapshot and rollback.

Covers: a per-session layer store (a size-capped tmpfs inside the fork-server) mounted as an
overlay at ``/work`` for each ``exec``/``aexec``; ``read_file``/``write_file`` performed inside
the sandbox with the task's own privileges (so symlinks planted by the model resolve inside the
sandbox, never on the host); ``snapshot()`` freezes the upper layer into a new lower layer,
``rollback(id)`` discards everything above that layer; ``fork()`` starts a new session from this
one's current state without copying it (the child's overlay reads the parent's frozen layers,
below layers of its own: a GRPO group's n episodes share one workspace set-up); ``close()``
destroys what no fork still reads. A session reaches its sandbox only through
``Sandbox.execute`` and ``Sandbox.call_server``.

Lifetimes: the fork-server keeps a layer while any open session's overlay uses it, so a parent
may be closed or rolled back below its forks' start while they run; its layers are freed when
the last session that reads them closes.

Does not cover: processes that outlive an ``exec`` (each exec is its own PID namespace, so
background jobs end with it), executions of one session in parallel (they run one at a time;
separate sessions, forks of one parent included, run in parallel), or layer compaction: a
session's layers, those inherited through forks included, must fit in one overlay mount's
options (about 100 layers; past that ``snapshot``/``fork`` raise ``SandboxError``).
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict, final

from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecResult, ExecStatus

if TYPE_CHECKING:
    from posttrain.sandbox._server import SessionRequest
    from posttrain.sandbox.sandbox import Sandbox

_READ = "import sys\nwith open({path!r}, 'rb') as f:\n    sys.stdout.buffer.write(f.read())"
_WRITE = ("import os, sys\np = {path!r}\nos.path.dirname(p) and os.makedirs(os.path.dirname(p), exist_ok=True)\n"
          "with open(p, 'wb') as f:\n    f.write(sys.stdin.buffer.read())")


class SandboxError(RuntimeError):
    """A session operation (read_file, write_file, snapshot ...) failed."""


class SandboxFailure(SandboxError):
    """The sandbox itself failed under a session operation: an infrastructure failure, never the task's (the
    agent runtime ends the episode as env_error)."""


class SessionLost(SandboxFailure):
    """The session's workspace is gone with the process that held it (a Ray sandbox worker that died)."""


@final  # lets a type checker tell the shapes apart by their keys
class SessionDone(TypedDict):
    """The fork-server did the operation; ``layer`` is the session's top layer after it (absent after a close)."""

    ok: Literal[True]
    layer: NotRequired[int]


@final
class SessionFailed(TypedDict):
    error: str


SessionReply = SessionDone | SessionFailed
"""What the fork-server answers a ``SessionRequest`` (received here, through ``Sandbox.call_server``)."""


class Session:
    """A workspace that persists across executions.

    >>> with Sandbox() as sb, sb.session(files={"a.txt": "1"}) as s:   # doctest: +SKIP
    ...     snap = s.snapshot()
    ...     s.exec("echo 2 > a.txt").status, s.read_file("a.txt")
    ...     s.rollback(snap); s.read_file("a.txt")
    (<ExecStatus.OK: 'ok'>, b'2\\n')
    b'1'

    ``await s.aexec(...)`` does what ``exec`` does from asyncio (the agent runtime's entry point);
    ``afork``, ``aread_file``, ``awrite_file`` and ``aclose`` likewise (the ``workspace.Workspace``
    protocol the agent code uses, which a Ray sandbox worker's session also offers).
    ``s.fork()`` is a new session that starts as ``s`` is now (see ``fork``).

    ``fork_of`` is what ``fork`` passes: the session this one starts from (``None``: an empty
    workspace). ``files`` are written after that and snapshotted.
    """

    def __init__(self, sandbox: Sandbox, *, files: dict[str, bytes | str] | None = None,
                 limits: Limits | None = None, network: bool | None = None, fork_of: Session | None = None):
        self.sandbox = sandbox
        self.limits = limits or sandbox.limits
        self.network = network
        self.id = uuid.uuid4().hex[:16]
        self.parent_id = fork_of.id if fork_of is not None else None
        self._lock = threading.Lock()
        self._closed = False
        if not sandbox.isolated:
            raise SandboxError("sessions need namespaces; unisolated mode offers one-shot runs only")
        disk = self.limits.disk_mb << 20
        if fork_of is None:
            self._layer_op({"op": "session_new", "sid": self.id, "disk_bytes": disk}, check=False)
        else:
            if fork_of._closed:
                raise SandboxError(f"cannot fork session {fork_of.id}: it is closed")
            # The parent's lock: its state must not change while the server freezes and shares it.
            fork_of._layer_op({"op": "session_fork", "sid": self.id, "parent": fork_of.id, "disk_bytes": disk})
        if files:
            r = self.exec(["true"], files=files)
            if not r.ok:
                raise SandboxError(f"could not write the initial files: {r.error or r.stderr}")
            self.snapshot()

    def exec(self, command: str | list[str] | None = None, *, code: str | None = None, language: str = "python",
             files: dict[str, bytes | str] | None = None, stdin: bytes | str | None = None,
             limits: Limits | None = None, prefork: bool | None = None) -> ExecResult:
        """Run ``command`` or ``code`` (as ``Sandbox.run``) on this session's workspace."""
        with self._lock:
            self._check_open()
            return self.sandbox.execute(command=command, code=code, language=language, files=files, stdin=stdin,
                                        limits=limits or self.limits, network=self.network, prefork=prefork,
                                        sid=self.id).result

    async def aexec(self, command: str | list[str] | None = None, *, code: str | None = None,
                    language: str = "python", files: dict[str, bytes | str] | None = None,
                    stdin: bytes | str | None = None, limits: Limits | None = None,
                    prefork: bool | None = None) -> ExecResult:
        """``exec`` from asyncio, on one of the sandbox's worker threads; the event loop stays free."""
        return await self.sandbox.in_worker(lambda: self.exec(command, code=code, language=language, files=files,
                                                              stdin=stdin, limits=limits, prefork=prefork))

    def read_file(self, path: str) -> bytes:
        """The file's bytes as the task sees it (relative paths are under /work)."""
        with self._lock:
            self._check_open()
            lim = Limits(**{**self.limits.to_dict(), "output_bytes": max(self.limits.output_bytes, self.limits.disk_mb << 20)})
            out = self.sandbox.execute(code=_READ.format(path=path), prefork=True, limits=lim, network=False,
                                       sid=self.id)
        if out.result.status is not ExecStatus.OK:
            raise SandboxError(f"read_file({path!r}): {out.result.error or out.stderr.decode(errors='replace').strip()}")
        return out.stdout

    def write_file(self, path: str, data: bytes | str) -> None:
        with self._lock:
            self._check_open()
            out = self.sandbox.execute(code=_WRITE.format(path=path), prefork=True, stdin=data, limits=self.limits,
                                       network=False, sid=self.id)
        if out.result.status is not ExecStatus.OK:
            raise SandboxError(f"write_file({path!r}): {out.result.error or out.stderr.decode(errors='replace').strip()}")

    def snapshot(self) -> int:
        """Freeze the workspace; returns an id for ``rollback``."""
        return self._layer_op({"op": "snapshot", "sid": self.id})

    def rollback(self, snapshot_id: int) -> None:
        """Restore the workspace exactly as it was at ``snapshot(id)``; later snapshots are dropped
        (their ids are not reused). ``rollback(0)`` goes back to the start: the empty workspace, or
        for a fork its fork point (a fork can never go below it)."""
        self._layer_op({"op": "rollback", "sid": self.id, "layer": int(snapshot_id)})

    def fork(self, *, limits: Limits | None = None, network: bool | None = None) -> Session:
        """A new session whose workspace starts exactly as this one's is now, at the cost of one
        server call: nothing is copied.

        Uncommitted changes are frozen first: when this session's upper layer is dirty, ``fork``
        takes a snapshot of it (as ``snapshot()`` would; what this session sees is unchanged, and a
        later ``rollback`` here works as before). The child's overlay then reads this session's
        frozen layers read-only, below a store of its own: its own upper layer, snapshots and
        ``rollback`` (``rollback(0)`` is its fork point; it never reaches below it), and its own
        disk quota (``limits.disk_mb``, this session's limits by default; a parent's file the child
        modifies is copied up and counts there). Writes in one fork are invisible to the parent and
        to its siblings; forks of forks work alike.

        The child does not depend on this object: closing or rolling back the parent keeps the
        layers the child reads (the server frees them when the last session reading them closes).
        Forking a closed session raises ``SandboxError``.

        >>> with sb.session(files=repo) as template:          # doctest: +SKIP
        ...     group = [template.fork() for _ in range(8)]     # 8 workspaces, one set-up
        """
        return Session(self.sandbox, limits=limits or self.limits,
                       network=self.network if network is None else network, fork_of=self)

    async def afork(self, *, limits: Limits | None = None, network: bool | None = None) -> Session:
        """``fork`` from asyncio. On the event loop itself: it is one short request to the fork-server (~0.4 ms),
        and under many concurrent episodes the worker threads are busy running commands, so a fork would queue."""
        return self.fork(limits=limits, network=network)

    async def aread_file(self, path: str) -> bytes:
        """``read_file`` on one of the sandbox's worker threads."""
        return await self.sandbox.in_worker(lambda: self.read_file(path))

    async def awrite_file(self, path: str, data: bytes | str) -> None:
        await self.sandbox.in_worker(lambda: self.write_file(path, data))

    async def aclose(self) -> None:
        await self.sandbox.in_worker(self.close)

    def _layer_op(self, req: SessionRequest, *, check: bool = True) -> int:
        with self._lock:
            if check:
                self._check_open()
            reply = self.sandbox.call_server(req)
        assert reply is not None  # a live server was started if need be
        if "error" in reply:
            raise SandboxError(reply["error"])
        return int(reply["layer"])

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("session is closed")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # A server that died took the session's layers with it: nothing to close then.
            self.sandbox.call_server({"op": "session_close", "sid": self.id}, restart=False)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
