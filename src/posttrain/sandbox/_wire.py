"""Message framing between the manager and the fork-server: one JSON object per
SOCK_SEQPACKET message, file descriptors riding along as SCM_RIGHTS.

Does not cover: authentication (both ends are created by the manager as a socketpair and
never reachable by sandboxed code) or large payloads (callers pass a memfd instead).
"""

from __future__ import annotations

import json
import os
import socket

TYPE_CHECKING = False  # not `from typing import ...`: the fork-server imports this module and stays small
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

MAX_MESSAGE = 1 << 17  # inline bodies above this travel in a memfd
_FD_SPACE = 16


def send(sock: socket.socket, obj: Mapping[str, object], fds: list[int] | tuple[int, ...] = ()) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        memfd = os.memfd_create("sandbox-request", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(memfd, view):]
            socket.send_fds(sock, [b'{"memfd":true}'], [*fds, memfd])
        finally:
            os.close(memfd)
        return
    socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)


def recv(sock: socket.socket) -> tuple[Any, list[int]]:
    """One message and its fds; ``(None, [])`` on EOF. The message is whatever JSON object the
    peer sent: each receiver names the shapes it accepts as ``TypedDict``s beside its code."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE + 1024, _FD_SPACE)
    for fd in fds:  # SCM_RIGHTS fds arrive inheritable; none may reach an exec'd task
        os.set_inheritable(fd, False)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    obj = json.loads(data)
    if obj.get("memfd"):
        memfd = fds.pop()
        size = os.fstat(memfd).st_size
        chunks, off = [], 0
        while off < size:
            chunk = os.pread(memfd, size - off, off)
            if not chunk:
                break
            chunks.append(chunk)
            off += len(chunk)
        os.close(memfd)
        obj = json.loads(b"".join(chunks))
    return obj, fds
