"""The confined fork-server: the one process that builds sandboxes, by direct kernel calls.

Covers, in this process (started by ``launcher.ServerHandle``):
1. Confinement of the server itself: a new user namespace whose uid 0 maps to an
   unprivileged host uid (written by the manager), a private mount namespace pivoted into
   a read-only root of runtime binds (``/usr``, the Python prefix, a few ``/etc`` files),
   and a PID namespace of which it is init, so that when it dies every sandbox dies with it.
   It never runs untrusted code; it only forks.
2. Per execution (``_start``): in a fresh PID namespace (the server unshares CLONE_NEWPID
   for its children and setns()es back), G, pid 1, is an idle init that shares the server's
   memory and does nothing but sleep (``_syscalls.clone_idle``), and T, pid 2, is a fork of
   the server that confines itself (``_task_main``): joins the task's cgroups through files
   the manager opened, unshares mount, IPC, UTS and (unless networking is opted in) network
   namespaces, mounts a fresh /proc, a size-capped /tmp, /dev/shm and /work (tmpfs, or an
   overlay over a session's layers), sets rlimits, drops every capability, sets
   no_new_privs, installs the seccomp filter, and becomes the task: execve of a command, or,
   in the pre-forked interpreter mode, Python source run in-process (no interpreter
   start-up). The server sends the manager a pidfd of G first, reaps T and reports its wait
   status, then kills G: the kernel then kills everything left in the namespace (daemons
   included). Orphans of the task are reaped then, not while it runs (G runs no code).
3. Session workspaces: a size-capped tmpfs per session inside this server's mount namespace
   (its layer store) holding overlay layers; snapshot renames the upper layer into a new lower
   one, rollback discards layers. A fork is a session whose lower layers start with its
   parent's frozen ones, read from the parent's store (never copied, never written); the server
   tracks which layers each open session's overlay uses (``_Store``) and frees a layer, and a
   closed session's store, only when no open session uses it. Nothing is mounted on the host, so
   nothing can leak there.

Why direct kernel calls rather than bubblewrap: bubblewrap 0.8 run by root maps the sandbox
to host root (tested: ``--userns`` with ``--uid`` fails with EPERM), and run as an
unprivileged user it cannot bind runtimes under ``/root``; it cannot fork a pre-imported
interpreter; and each call costs an extra exec. Doing the same ~20 calls here gives one code
path for commands and pre-forked Python, no Debian dependency, and a sandbox whose host
identity is ``nobody``. The price is owning this setup code, which the adversarial suite in
``tests/sandbox`` exercises attack by attack.

Does not cover: limits accounting, verdicts and output capture (the manager, ``sandbox.py``),
cgroups (``cgroups.py``), or network allow-lists (network is all or nothing).
"""

from __future__ import annotations

import base64
import builtins
import ctypes
import io
import json
import os
import resource
import select
import signal
import socket
import sys
import types

from posttrain.sandbox import _syscalls as sc
from posttrain.sandbox import _wire, seccomp

EXIT_SETUP_FAILED = 125

# ----------------------------------------------------------------------------- what this server receives
# Defined for readers and type checkers only: `typing` is not imported at run time, because every
# pre-forked task is a fork of this process and starts with its heap (tests/sandbox checks the set).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Literal, NotRequired, TypedDict

    class ServerConfig(TypedDict):
        """``argv[1]``, as JSON, from ``launcher.ServerHandle``."""

        ctl_fd: int
        ro_binds: list[str]
        """Host paths bound read-only at the same path in the server's root."""
        rebinds: list[str]
        """Those of ``ro_binds`` under ``/tmp``, which each task mounts fresh (``sandbox.REBOUND_MOUNTS``):
        bound again, read-only, inside each task's fresh ``/tmp`` (a virtual environment there)."""
        symlinks: dict[str, str]
        workspace_binds: dict[str, str]
        """Directory of the root -> path under /work bound on it in each task (``sandbox.WORKSPACE_BINDS``)."""
        preload: list[str]
        manager: str
        seccomp: bool

    class MapAck(TypedDict):
        """The manager wrote this process's uid/gid maps."""

        mapped: Literal[True]

    class TaskLimits(TypedDict):
        """``Limits`` as numbers, plus the rlimits that stand in for missing cgroup controllers."""

        wall_s: float
        cpu_s: float
        memory_mb: int
        pids: int
        output_bytes: int
        disk_mb: int
        nofile: int
        owners: NotRequired[bool]
        """Keep ``_syscalls.OWNER_CAPS`` (``Limits.owners``)."""
        rlimit_as_bytes: NotRequired[int]
        rlimit_nproc: NotRequired[int]

    class ExecRequest(TypedDict):
        """Start one execution. Rides with fds: the status socket, the task's stdin, stdout and
        stderr pipe ends, then one file per cgroup the task must join (``cgroups.join_file``: v1 ``tasks``,
        v2 ``cgroup.procs``)."""

        op: Literal["exec"]
        argv: list[str] | None
        """The command; ``None`` with ``code``."""
        code: str | None
        """Python source run in the pre-forked interpreter (``python -c`` semantics)."""
        env: dict[str, str]
        files: dict[str, str]
        """Relative path under /work -> base64 of the content."""
        network: bool
        sid: str | None
        """The session whose layers form /work, or ``None`` for a fresh tmpfs."""
        cwd: str | None
        limits: TaskLimits

    class SessionRequest(TypedDict):
        """A session's layer store operation; the reply (``session.SessionReply``) goes to the socket
        that rides along."""

        op: Literal["session_new", "session_fork", "snapshot", "rollback", "session_close"]
        sid: str
        disk_bytes: NotRequired[int]
        """``session_new``, ``session_fork``: the size of the session's own layer store."""
        parent: NotRequired[str]
        """``session_fork``: the session whose current state the new session ``sid`` starts from."""
        layer: NotRequired[int]
        """``rollback``: the snapshot to go back to."""

    Request = ExecRequest | SessionRequest
_TASK_NAME = b"python3"  # the comm a pre-forked task shows, as a plain interpreter would


def _log_fail(ctl: socket.socket, msg: str) -> None:
    try:
        _wire.send(ctl, {"error": msg})
    except OSError:
        pass


# ----------------------------------------------------------------------------- server set-up


def _bind(src_fd: int, dst: str, *, readonly: bool, f_flag: int) -> None:
    sc.mount(f"/proc/self/fd/{src_fd}", dst, None, sc.MS_BIND | sc.MS_REC)
    if readonly:
        # A bind made in a user namespace keeps the source's locked flags; repeat them.
        keep = 0
        for st_flag, ms_flag in ((os.ST_NOSUID, sc.MS_NOSUID), (os.ST_NODEV, sc.MS_NODEV),
                                 (os.ST_NOEXEC, sc.MS_NOEXEC), (os.ST_NOATIME, sc.MS_NOATIME),
                                 (os.ST_NODIRATIME, sc.MS_NODIRATIME), (os.ST_RELATIME, sc.MS_RELATIME)):
            if f_flag & st_flag:
                keep |= ms_flag
        sc.mount(None, dst, None, sc.MS_BIND | sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_NOSUID | keep)


def _hold(paths: Iterable[str]) -> list[tuple[str, int, int]]:
    """(path, an ``O_PATH`` descriptor of it, its mount flags) of each path, opened now: binding them later,
    after a uid change or once other mounts cover them, needs no path permission and no path lookup."""
    return [(path, os.open(path, os.O_PATH | os.O_CLOEXEC), os.statvfs(path).f_flag) for path in paths]


def _bind_held(held: list[tuple[str, int, int]], root: str) -> None:
    """Bind each held source, read-only, at its own path under ``root`` (a directory or an empty file made for it)."""
    for path, fd, f_flag in held:
        dst = root + path
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            open(dst, "w").close()
        _bind(fd, dst, readonly=True, f_flag=f_flag)
        os.close(fd)


def _write_identity_files(root: str) -> None:
    """The root's /etc: two users, two groups, the host name."""
    os.makedirs(root + "/etc", exist_ok=True)
    with open(root + "/etc/passwd", "w") as f:
        f.write("root:x:0:0:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    with open(root + "/etc/group", "w") as f:
        f.write("root:x:0:\nnogroup:x:65534:\n")
    with open(root + "/etc/hostname", "w") as f:
        f.write("sandbox\n")


def _mount_dev(root: str) -> None:
    """/dev: host device nodes bound one by one onto a tmpfs that becomes read-only."""
    sc.mount("tmpfs", root + "/dev", "tmpfs", sc.MS_NOSUID | sc.MS_NOEXEC, "mode=0755,size=64k")
    for node in ("null", "zero", "full", "random", "urandom"):
        open(f"{root}/dev/{node}", "w").close()
        sc.mount(f"/dev/{node}", f"{root}/dev/{node}", None, sc.MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/dev/shm")
    sc.mount(None, root + "/dev", None, sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NOEXEC)


def _pivot_into(root: str) -> None:
    """Make ``root`` this mount namespace's root, detach the old one, and remount the new one read-only."""
    os.chdir(root)
    os.mkdir(".oldroot")
    sc.pivot_root(".", ".oldroot")
    sc.umount2("/.oldroot", sc.MNT_DETACH)
    os.rmdir("/.oldroot")
    os.chdir("/")
    sc.mount(None, "/", None, sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV)


def _build_root(config: ServerConfig) -> list[str]:
    """Pivot into a fresh read-only root. Runs as uid 0 of the new user namespace."""
    warnings: list[str] = []
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    # Open bind sources while we still hold host-root's path permissions (/root is 0700).
    sources = _hold(path for path in config["ro_binds"] if os.path.lexists(path))
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    sc.set_pdeathsig(signal.SIGKILL)  # a uid change cleared the one set before

    root = "/tmp"
    sc.mount("tmpfs", root, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=0755,size=1m")
    _bind_held(sources, root)
    for name, target in config["symlinks"].items():
        os.makedirs(os.path.dirname(root + name), exist_ok=True)
        os.symlink(target, root + name)
    for name in config.get("workspace_binds", {}):
        os.makedirs(root + name, exist_ok=True)
    _write_identity_files(root)
    for d in ("proc", "tmp", "work", "state", "dev"):
        os.makedirs(root + "/" + d, exist_ok=True)
    os.chmod(root + "/tmp", 0o1777)
    _mount_dev(root)
    sc.mount("tmpfs", root + "/state", "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=0700,size=64k")
    # A fully visible procfs of our PID namespace; tasks mount their own over it.
    sc.mount("proc", root + "/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    _pivot_into(root)
    return warnings


# ----------------------------------------------------------------------------- one execution


def _bind_workspace_dirs(binds: dict[str, str]) -> None:
    """Bind directories of the task's own /work on the root's empty directories (``sandbox.WORKSPACE_BINDS``):
    "" is /work itself; another path only when every component is a plain directory (``O_NOFOLLOW``: a
    symlink the task planted cannot point the bind elsewhere), else the directory stays empty."""
    for dst, rel in binds.items():
        fd = os.open("/work", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in [p for p in rel.split("/") if p]:
                nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError:
            os.close(fd)
            continue
        try:
            sc.mount(f"/proc/self/fd/{fd}", dst, None, sc.MS_BIND)
        finally:
            os.close(fd)


def _join_cgroups(cgroup_fds: list[int]) -> None:
    """Join the task's cgroups through files the manager opened as root (cgroup v1 checks the opener's
    credentials); "0" means the writer itself, and this process has one thread (a fork), which a v1 ``tasks``
    file moves without the kernel's global lock (``cgroups.join_file``). The fds are closed before anything
    else runs, so they never reach the task."""
    for fd in cgroup_fds:
        os.write(fd, b"0")
        os.close(fd)


def _mount_work(sid: str | None, flags: int, disk: int) -> None:
    """/work: a fresh tmpfs, or the overlay of session ``sid``'s layers."""
    if sid is None:
        sc.mount("tmpfs", "/work", "tmpfs", flags, f"mode=0777,size={disk}")
        return
    store = _stores.get(sid)  # this process is a fork of the server: its registry as of now
    if store is None or not store.open:
        raise OSError(f"no open session {sid} in this fork-server (closed, or the server restarted)")
    sc.mount("overlay", "/work", "overlay", flags, _overlay_options(sid, store.chain(sid)))


def _mount_task_filesystems(sid: str | None, disk: int, rebinds: list[str], binds: dict[str, str]) -> None:
    """The task's own /proc, size-capped /tmp and /dev/shm, /work; the server's /state out of sight."""
    flags = sc.MS_NOSUID | sc.MS_NODEV
    sc.mount("proc", "/proc", "proc", flags | sc.MS_NOEXEC)
    # Runtimes under /tmp (a virtual environment there; the manager sends only those): held
    # before the fresh mounts cover them, then bound again, read-only, at the same path inside.
    held = _hold(rebinds)
    sc.mount("tmpfs", "/tmp", "tmpfs", flags, f"mode=1777,size={disk}")
    sc.mount("tmpfs", "/dev/shm", "tmpfs", flags | sc.MS_NOEXEC, f"mode=1777,size={disk}")
    _bind_held(held, "")
    _mount_work(sid, flags, disk)
    sc.umount2("/state", sc.MNT_DETACH)
    _bind_workspace_dirs(binds)


def _write_files(files: dict[str, str]) -> None:
    """The request's files (relative path under /work -> base64), written as the task's own."""
    for rel, content in files.items():
        path = os.path.join("/work", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(content))


def _task_main(req: ExecRequest, fds: list[int], seccomp_program: bytes | None, rebinds: list[str],
               binds: dict[str, str]) -> None:
    """T, pid 2 of its PID namespace: joins the task's cgroups, builds the task's other
    namespaces and confinement, then becomes the task (execve of a command, or Python source
    run in this already-started interpreter). Never returns."""
    status = socket.socket(fileno=fds[0])
    named = {"stdin": fds[1], "stdout": fds[2], "stderr": fds[3]}
    command = req.get("code") is None
    try:
        sc.set_name(b"sandbox-task")  # until it becomes the task
        sc.set_pdeathsig(signal.SIGKILL)
        _join_cgroups(fds[4:])
        flags = sc.CLONE_NEWNS | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS
        if not req["network"]:
            flags |= sc.CLONE_NEWNET
        sc.unshare(flags)  # PID: already done by the server (``_start``)
        limits = req["limits"]
        disk = int(limits["disk_mb"]) << 20
        sc.sethostname("sandbox")
        _mount_task_filesystems(req.get("sid"), disk, rebinds, binds)
        if not req["network"]:
            sc.loopback_up()
        _set_rlimits(limits)
        os.chdir(req.get("cwd") or "/work")
        sc.drop_all_capabilities(sc.OWNER_CAPS if limits.get("owners") else ())
        sc.set_no_new_privs()
        _write_files(req.get("files", {}))
        exe = _resolve(req, named["stderr"]) if command else None
        if seccomp_program is not None:
            seccomp.install(seccomp_program)
        sc.set_name(_TASK_NAME)
        os.dup2(named["stdin"], 0)
        os.dup2(named["stdout"], 1)
        os.dup2(named["stderr"], 2)
        # Nothing but stdio reaches the task: not the status socket, not the pipes' originals.
        status.detach()
        os.closerange(3, 1 << 16)
    except BaseException as e:  # noqa: BLE001 - any set-up failure is the sandbox's
        try:
            _wire.send(status, {"setup_error": f"{type(e).__name__}: {e}"})
        finally:
            os._exit(EXIT_SETUP_FAILED)
    if command:
        _exec_command(req, exe)
    sc.prctl(sc.PR_SET_DUMPABLE, 1)  # as a plain interpreter: its own /proc/self is its own
    _run_python_inline(req["code"], req.get("argv") or [], req["env"])


def _resolve(req: ExecRequest, stderr: int) -> str | int:
    """The executable a command names, or the exit code of a shell that could not find it."""
    argv, env = req["argv"], req["env"]
    exe = _which(argv[0], env.get("PATH") or os.defpath) if "/" not in argv[0] else argv[0]
    if exe is None:
        os.write(stderr, f"sandbox: {argv[0]}: command not found\n".encode())
        return 127
    return exe


def _which(name: str, path: str) -> str | None:
    """``shutil.which`` for a bare command name (the server does not import shutil: see ``_serve``)."""
    for d in path.split(os.pathsep):
        cand = os.path.join(d or ".", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _exec_command(req: ExecRequest, exe: str | int) -> None:
    """Become the command (stdio already in place). Never returns."""
    if isinstance(exe, int):
        os._exit(exe)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # ignored by Python; an execve keeps that
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execve(exe, req["argv"], req["env"])
    except OSError as e:
        os.write(2, f"sandbox: {req['argv'][0]}: {e.strerror}\n".encode())
    os._exit(126)


def _set_rlimits(limits: TaskLimits) -> None:
    cpu = int(limits["cpu_s"] + 0.999)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU first, SIGKILL after 1 s
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits["disk_mb"]) << 20,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limits["nofile"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("rlimit_as_bytes"):
        resource.setrlimit(resource.RLIMIT_AS, (int(limits["rlimit_as_bytes"]),) * 2)
    if limits.get("rlimit_nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["rlimit_nproc"]),) * 2)


def _run_python_inline(code: str, argv: list[str], env: dict[str, str]) -> None:
    """The pre-forked interpreter: behave like ``python -c code`` without starting Python."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the server runs without it
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["-c", *argv]
    sys.path.insert(0, "")  # as ``python -c`` does: modules in the working directory import
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), line_buffering=False)
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), line_buffering=True,
                                  errors="backslashreplace")
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    rc = 0
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            rc = 0
        elif isinstance(e.code, int):
            rc = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            rc = 1
    except BaseException:  # noqa: BLE001 - mirror the interpreter's top level
        import traceback  # here, not in the server: see ``_serve``

        traceback.print_exc()
        rc = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            rc = rc or 120
    os._exit(rc)


# ----------------------------------------------------------------------------- sessions


class _Store:
    """One session's layer store as the server tracks it. The files are in a size-capped tmpfs at
    ``/state/<sid>``: ``layers/<n>`` (this session's own frozen layers), ``upper`` and ``work``
    (the overlay's). A fork's overlay also reads its ancestors' layers, from their stores."""

    __slots__ = ("open", "inherited", "own", "next_layer")

    def __init__(self, inherited: list[tuple[str, int]], own: list[int]) -> None:
        self.open = True
        self.inherited = inherited
        """(sid, layer) of the ancestors' frozen layers below this session's own, bottom first."""
        self.own = own
        """This session's own layers, bottom first (layer 0 of a new session is an empty one)."""
        self.next_layer = max(own, default=0) + 1
        """Layer numbers are never reused: a layer dropped by rollback may live on for a fork."""

    def chain(self, sid: str) -> list[tuple[str, int]]:
        """Every lower layer of this session's overlay, bottom first."""
        return self.inherited + [(sid, n) for n in self.own]


_stores: dict[str, _Store] = {}  # sid -> store, closed ones included while a fork still reads their layers
_MOUNT_DATA_MAX = 4095  # mount(2) copies at most one page of options, its NUL included


def _overlay_options(sid: str, chain: list[tuple[str, int]]) -> str:
    lower = ":".join(f"/state/{s}/layers/{n:06d}" for s, n in reversed(chain))  # overlayfs: top first
    return f"lowerdir={lower},upperdir=/state/{sid}/upper,workdir=/state/{sid}/work,userxattr"


def _check_depth(sid: str, chain: list[tuple[str, int]]) -> str | None:
    if len(_overlay_options(sid, chain)) > _MOUNT_DATA_MAX:
        return (f"session {sid}: {len(chain)} layers (its snapshots and those it was forked from) are more than "
                "one overlay mount can take; roll back, or start a new session from fewer snapshots")
    return None


def _reset_upper(base: str) -> None:
    import shutil  # rare, and in the server only: see ``_serve``

    for d in ("upper", "work"):
        if os.path.exists(f"{base}/{d}"):
            shutil.rmtree(f"{base}/{d}")
        os.mkdir(f"{base}/{d}", 0o755)


def _new_store(sid: str, disk_bytes: int) -> str:
    base = f"/state/{sid}"
    os.mkdir(base, 0o700)
    sc.mount("tmpfs", base, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, f"mode=0755,size={int(disk_bytes)}")
    for d in ("layers", "upper", "work"):
        os.mkdir(f"{base}/{d}", 0o755)
    return base


def _snapshot(sid: str, store: _Store) -> dict[str, object]:
    base = f"/state/{sid}"
    layer = store.next_layer
    error = _check_depth(sid, [*store.chain(sid), (sid, layer)])
    if error:
        return {"error": error}
    os.rename(f"{base}/upper", f"{base}/layers/{layer:06d}")
    store.own.append(layer)
    store.next_layer += 1
    _reset_upper(base)
    return {"ok": True, "layer": layer}


def _collect(sids: set[str]) -> None:
    """Free the layers of these stores that no open session's overlay uses, and the stores of
    closed sessions that are left with none."""
    import shutil  # rare, and in the server only: see ``_serve``

    used = {layer for sid, store in _stores.items() if store.open for layer in store.chain(sid)}
    for sid in sids:
        store = _stores.get(sid)
        if store is None:
            continue
        base = f"/state/{sid}"
        left = 0
        for name in os.listdir(f"{base}/layers"):
            if (sid, int(name)) in used:
                left += 1
            else:
                shutil.rmtree(f"{base}/layers/{name}")
        if not store.open and not left:
            sc.umount2(base, sc.MNT_DETACH)
            os.rmdir(base)
            del _stores[sid]


def _session_op(req: SessionRequest) -> dict[str, object]:
    sid = req["sid"]
    if not sid.isalnum():
        return {"error": "bad session id"}
    op = req["op"]
    if op == "session_new":
        base = _new_store(sid, req["disk_bytes"])
        os.mkdir(f"{base}/layers/000000", 0o755)  # overlayfs needs a lower layer
        _stores[sid] = _Store([], [0])
        return {"ok": True, "layer": 0}
    if op == "session_fork":
        parent_sid = req["parent"]
        parent = _stores.get(parent_sid)
        if parent is None or not parent.open:
            return {"error": f"cannot fork session {parent_sid}: it is closed (or the fork-server restarted)"}
        if sid in _stores:
            return {"error": f"session {sid} exists"}
        if os.listdir(f"/state/{parent_sid}/upper"):
            # What the parent sees now includes its unfrozen upper layer: freeze it (as its snapshot()
            # would; what the parent sees is unchanged) so that the fork can share it read-only.
            done = _snapshot(parent_sid, parent)
            if "error" in done:
                return done
        inherited = parent.chain(parent_sid)
        error = _check_depth(sid, inherited)
        if error:
            return {"error": error}
        _new_store(sid, req["disk_bytes"])
        _stores[sid] = _Store(inherited, [])
        return {"ok": True, "layer": 0}
    store = _stores.get(sid)
    if op == "session_close":
        if store is not None and store.open:
            store.open = False
            _reset_upper(f"/state/{sid}")  # nobody mounts it again: give its space back now
            _collect({sid, *(s for s, _ in store.inherited)})
        return {"ok": True}
    if store is None or not store.open:
        return {"error": f"session {sid} is closed (or the fork-server restarted)"}
    if op == "snapshot":
        return _snapshot(sid, store)
    if op == "rollback":
        keep = int(req["layer"])
        if keep in store.own:
            store.own = store.own[:store.own.index(keep) + 1]
        elif keep == 0 and store.inherited:
            store.own = []  # a fork's snapshot 0 is its fork point
        else:
            return {"error": f"session {sid} has no snapshot {keep} (never taken, or dropped by a rollback)"}
        _reset_upper(f"/state/{sid}")
        _collect({sid})  # layers above `keep` go, unless a fork still reads them
        return {"ok": True, "layer": keep}
    return {"error": f"unknown op {op}"}


# ----------------------------------------------------------------------------- main loop


class _Execution:
    """What the server tracks of one running execution."""

    __slots__ = ("task", "init", "init_pidfd", "status", "stack")

    def __init__(self, task: int, init: int, init_pidfd: int, status: socket.socket, stack: ctypes.Array) -> None:
        self.task, self.init, self.init_pidfd, self.status, self.stack = task, init, init_pidfd, status, stack


def _start(req: ExecRequest, fds: list[int], program: bytes | None, pidns: int, inherited: list[int],
           rebinds: list[str], binds: dict[str, str]) -> _Execution:
    """Start an execution: its init G and its task T, in a fresh PID namespace.

    G, pid 1, is ``clone_idle``: a process that shares the server's memory and descriptor
    table and only sleeps, so it costs microseconds. It is there because a PID namespace
    needs an init, and the task must not be it: init ignores every signal it has no handler
    for, even the task's own ``kill(getpid(), SIGTERM)``. T, pid 2, is a fork of the server
    that confines itself (``_task_main``). The server reaps T itself (its wait status is the
    task's), then kills G, which takes down whatever is left in the namespace.

    History: G used to be a fork of this interpreter that confined itself and forked T.
    Profiling (perf, 2 cores) showed each fork of a Python interpreter costing ~2.5 ms of page
    table copies, copy-on-write faults and unmapping at exit: a fifth of a pre-forked run.
    """
    stack = ctypes.create_string_buffer(sc.IDLE_STACK_BYTES)
    sc.unshare(sc.CLONE_NEWPID)  # for our children from now on, until the setns below
    init = task = init_pidfd = -1
    status = socket.socket(fileno=os.dup(fds[0]))  # ours, for the final status
    try:
        init = sc.clone_idle(stack)
        init_pidfd = os.pidfd_open(init)
        # First on the status socket, before T can write there: the manager may kill G.
        _wire.send(status, {"hello": True}, [init_pidfd])
        task = os.fork()
        if task == 0:
            try:
                for fd in (*inherited, init_pidfd, status.detach()):  # control socket, others' fds
                    os.close(fd)
                _task_main(req, fds, program, rebinds, binds)
            finally:
                os._exit(EXIT_SETUP_FAILED)
    except BaseException:
        status.close()
        if init_pidfd >= 0:
            os.close(init_pidfd)
        if init > 0:
            os.kill(init, signal.SIGKILL)
            os.waitpid(init, 0)
        raise
    finally:
        if task != 0:
            try:
                sc.setns(pidns, sc.CLONE_NEWPID)
            except OSError:
                # Children would land in this execution's namespace from now on: no safe
                # way on. Exiting kills every sandbox; the manager starts a new server.
                os._exit(1)
    return _Execution(task, init, init_pidfd, status, stack)


def _report_exit(ex: _Execution) -> None:
    """Reap T, kill G (the kernel then kills the rest of the namespace), and send T's wait
    status and resource usage on the execution's status socket."""
    _, wstatus, ru = os.wait4(ex.task, 0)
    try:
        signal.pidfd_send_signal(ex.init_pidfd, signal.SIGKILL)
    except OSError:
        pass
    with ex.status as sock:
        try:
            _wire.send(sock, {"task_wstatus": wstatus, "utime": ru.ru_utime, "stime": ru.ru_stime,
                              "maxrss_kb": ru.ru_maxrss})
        except OSError:  # the manager stopped listening
            pass


def _confine_server(config: ServerConfig) -> tuple[bytes | None, list[str]]:
    """Make this process the fork-server: its root, capabilities, imports and signal handlers as every
    task's fork will inherit them. Returns the seccomp program for tasks (None: unfiltered) and the warnings."""
    global _TASK_NAME
    _TASK_NAME = sc.get_name()
    sc.set_name(b"sandbox-server")
    # Every task's init shares this memory: no signal may have a handler that would run in
    # it (Python's SIGINT handler would raise KeyboardInterrupt here), and nothing in a
    # namespace may open the memory, descriptors or root through /proc/1.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sc.prctl(sc.PR_SET_DUMPABLE, 0)
    warnings = _build_root(config)
    sc.drop_bounding_set(sc.OWNER_CAPS)  # each task drops these too, unless its limits ask for owners
    for mod in config.get("preload", []):
        try:
            __import__(mod)
        except Exception as e:  # noqa: BLE001
            warnings.append(f"preload {mod!r} failed: {e}")
    for sig in signal.valid_signals():
        handler = signal.getsignal(sig)
        if handler not in (signal.SIG_DFL, signal.SIG_IGN, None):
            signal.signal(sig, signal.SIG_DFL)
    program = seccomp.filter_for_machine() if config.get("seccomp", True) else None
    if program is None:
        warnings.append(f"no seccomp filter for {os.uname().machine}: dangerous syscalls are not filtered")
    return program, warnings


class _Server:
    """What the serving loop holds: how to start an execution, and the executions it still owes a reaping."""

    __slots__ = ("ctl", "program", "rebinds", "binds", "pidns", "running", "dying")

    def __init__(self, ctl: socket.socket, config: ServerConfig, program: bytes | None) -> None:
        self.ctl, self.program = ctl, program
        self.rebinds = [p for p in config.get("rebinds", []) if os.path.lexists(p)]  # those bound in our root
        self.binds = dict(config.get("workspace_binds", {}))
        self.pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.running: dict[int, _Execution] = {}  # pidfd of T -> its execution
        self.dying: dict[int, tuple[int, ctypes.Array]] = {}  # pidfd of a killed G -> (pid, stack)

    def reap(self, ready: list[int]) -> None:
        """Report each finished task and kill its init; reap each init that died."""
        for fd in ready:
            if fd in self.running:
                os.close(fd)
                ex = self.running.pop(fd)
                _report_exit(ex)
                self.dying[ex.init_pidfd] = (ex.init, ex.stack)
            elif fd in self.dying:
                pid, _stack = self.dying.pop(fd)
                os.waitpid(pid, 0)
                os.close(fd)  # only now may its stack be freed

    def execute(self, req: ExecRequest, fds: list[int]) -> None:
        """Start one execution and track it; a failure to start goes to its status socket."""
        try:
            inherited = [self.ctl.fileno(), self.pidns, *self.running, *self.dying,
                         *(x for ex in self.running.values() for x in (ex.init_pidfd, ex.status.fileno()))]
            ex = _start(req, fds, self.program, self.pidns, inherited, self.rebinds, self.binds)
            try:
                self.running[os.pidfd_open(ex.task)] = ex
            except OSError:
                os.kill(ex.task, signal.SIGKILL)  # untracked, it could not be reaped
                os.waitpid(ex.task, 0)
                signal.pidfd_send_signal(ex.init_pidfd, signal.SIGKILL)
                os.waitpid(ex.init, 0)
                os.close(ex.init_pidfd)
                ex.status.close()
                raise
        except OSError as e:
            with socket.socket(fileno=os.dup(fds[0])) as sock:
                _log_fail(sock, f"fork-server: {e}")
        for fd in fds:
            os.close(fd)


def _answer_session(req: SessionRequest, fds: list[int]) -> None:
    reply = socket.socket(fileno=fds[0])
    try:
        out: dict[str, object] = _session_op(req)
    except OSError as e:
        out = {"error": f"{req['op']}: {e}"}
    _wire.send(reply, out)
    reply.close()


def _serve(ctl: socket.socket, config: ServerConfig) -> None:
    program, warnings = _confine_server(config)
    server = _Server(ctl, config, program)
    _wire.send(ctl, {"ready": True, "warnings": warnings})
    while True:
        ready, _, _ = select.select([ctl, *server.running, *server.dying], [], [])
        server.reap(ready)
        if ctl not in ready:
            continue
        req: Request | None
        req, fds = _wire.recv(ctl)
        if req is None:
            os._exit(0)  # manager gone: dying as PID-namespace init kills every sandbox
        if req["op"] == "exec":
            server.execute(req, fds)
        else:
            _answer_session(req, fds)


def add_site_paths() -> None:
    """Put site-packages on sys.path as ``site`` would (each directory, then the path lines of its .pth
    files), without executing the .pth files' ``import`` lines: pre-forked tasks import installed
    packages as under ``python -c``, and the server's heap (which every task's fork copies) holds only
    what it needs."""
    import site

    for d in site.getsitepackages(_site_prefixes()):
        if not os.path.isdir(d) or d in sys.path:
            continue
        sys.path.append(d)
        for name in sorted(os.listdir(d)):
            if not name.endswith(".pth"):
                continue
            try:
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    lines = f.read().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for line in lines:
                line = line.strip()
                if not line or line.startswith(("#", "import ", "import\t")):
                    continue
                path = os.path.join(d, line)
                if os.path.isdir(path) and path not in sys.path:
                    sys.path.append(path)


def _site_prefixes() -> list[str]:
    """The prefixes whose site-packages ``site`` would use, found as ``site.venv`` finds them (the
    server runs with -S, so nothing did yet): a virtual environment's (which becomes ``sys.prefix``,
    as under ``python -c``), and the base interpreter's unless its ``pyvenv.cfg`` excludes the
    system site-packages; else this interpreter's own."""
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    for cfg in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(os.path.dirname(exe_dir), "pyvenv.cfg")):
        try:
            with open(cfg, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        include_system = True  # site's default when the key is absent
        for line in lines:
            key, sep, value = line.partition("=")
            if sep and key.strip().lower() == "include-system-site-packages":
                include_system = value.strip().lower() == "true"
        sys.prefix = sys.exec_prefix = os.path.dirname(exe_dir)
        return [sys.prefix, sys.base_prefix] if include_system else [sys.prefix]
    return [sys.prefix]


def main() -> None:
    if sys.flags.no_site:
        add_site_paths()
    config: ServerConfig = json.loads(sys.argv[1])
    ctl = socket.socket(fileno=int(config["ctl_fd"]))
    os.set_inheritable(ctl.fileno(), False)  # never across a task's execve, whatever else happens
    try:
        # No PDEATHSIG here: it fires when the *thread* that spawned us exits, and a Sandbox
        # may be built in a short-lived thread. The manager's death closes the control
        # socket instead, on which the server below exits.
        sc.unshare(sc.CLONE_NEWUSER | sc.CLONE_NEWNS | sc.CLONE_NEWPID | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS)
        _wire.send(ctl, {"map": True})
        ack: MapAck | None
        ack, _ = _wire.recv(ctl)
        if not ack or not ack.get("mapped"):
            os._exit(1)
    except OSError as e:
        _log_fail(ctl, f"namespaces unavailable: {e}")
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        try:
            sc.set_pdeathsig(signal.SIGKILL)
            _serve(ctl, config)
        except BaseException as e:  # noqa: BLE001
            import traceback

            _log_fail(ctl, f"server set-up failed: {type(e).__name__}: {e}\n{traceback.format_exc()}")
            os._exit(1)
    ctl.close()
    _, wstatus = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(wstatus) & 0xFF)


if __name__ == "__main__":
    main()
