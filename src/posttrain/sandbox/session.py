"""``Session``: a stateful sandbox workspace for agents, with snapshot and rollback.

Covers: a per-session layer store (a size-capped tmpfs inside the fork-server) mounted as an
overlay at ``/work`` for each ``exec``/``aexec``; ``read_file``/``write_file`` performed inside
the sandbox with the task's own privileges (so symlinks planted by the model resolve inside the
sandbox, never on the host); ``snapshot()`` freezes the upper layer into a new lower layer,
``rollback(id)`` discards everything above that layer; ``close()`` destroys it all. A session
reaches its sandbox only through ``Sandbox.execute`` and ``Sandbox.call_server``.

Does not cover: processes that outlive an ``exec`` (each exec is its own PID namespace, so
background jobs end with it), executions of one session in parallel (they run one at a time),
or layer compaction (chains deeper than a few hundred snapshots hit overlayfs'
lower-layer limit).
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

    ``await s.aexec(...)`` does what ``exec`` does from asyncio (the agent runtime's entry point).
    """

    def __init__(self, sandbox: Sandbox, *, files: dict[str, bytes | str] | None = None,
                 limits: Limits | None = None, network: bool | None = None):
        self.sandbox = sandbox
        self.limits = limits or sandbox.limits
        self.network = network
        self.id = uuid.uuid4().hex[:16]
        self._lock = threading.Lock()
        self._closed = False
        if not sandbox.isolated:
            raise SandboxError("sessions need namespaces; unisolated mode offers one-shot runs only")
        self._layer_op({"op": "session_new", "sid": self.id, "disk_bytes": self.limits.disk_mb << 20}, check=False)
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
        """Restore the workspace exactly as it was at ``snapshot(id)``; later snapshots are dropped."""
        self._layer_op({"op": "rollback", "sid": self.id, "layer": int(snapshot_id)})

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
