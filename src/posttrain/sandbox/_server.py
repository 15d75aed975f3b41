"""The confined fork-server: the one process that builds sandboxes, by direct kernel calls.

Covers, in this process (started by ``launcher.ServerHandle``):
1. Confinement of the server itself: a new user namespace whose uid 0 maps to an
   unprivileged host uid (written by the manager), a private mount namespace pivoted into
   a read-only root of runtime binds (``/usr``, the Python prefix, a few ``/etc`` files),
   and a PID namespace of which it is init, so that when it dies every sandbox dies with it.
   It never runs untrusted code; it only forks.
2. Per execution: fork G straight into a fresh PID namespace (``_fork_init``: the server
   unshares CLONE_NEWPID for its children, forks, and setns()es back). G, init of the task,
   joins the task's cgroups through files the manager opened, reports its host pid to the
   manager (SCM_CREDENTIALS), unshares mount, IPC, UTS and (unless networking is opted in)
   network namespaces, mounts a fresh /proc, a size-capped /tmp, /dev/shm and /work (tmpfs,
   or an overlay over a session's layers), sets rlimits, drops every capability, sets
   no_new_privs, installs the seccomp filter, and starts the task T as pid 2: a command by
   posix_spawn, or, in the pre-forked interpreter mode, a fork that runs Python source
   in-process (no interpreter start-up). G stays as init, reaping, and reports T's status;
   the server reaps G and reports G's own status and resource usage.
   When G exits the kernel kills everything left in its PID namespace (daemons included).
3. Session workspaces: a size-capped tmpfs per session inside this server's mount namespace
   holding overlay layers; snapshot renames the upper layer into a new lower one, rollback
   discards layers. Nothing is mounted on the host, so nothing can leak there.

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
import io
import json
import os
import resource
import select
import shutil
import signal
import socket
import sys
import traceback
import types

from posttrain.sandbox import _syscalls as sc
from posttrain.sandbox import _wire, seccomp

EXIT_SETUP_FAILED = 125
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


def _build_root(config: dict) -> list[str]:
    """Pivot into a fresh read-only root. Runs as uid 0 of the new user namespace."""
    warnings: list[str] = []
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    # Open bind sources while we still hold host-root's path permissions (/root is 0700).
    sources = []
    for path in config["ro_binds"]:
        if os.path.lexists(path):
            sources.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC), os.statvfs(path).f_flag))
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    sc.set_pdeathsig(signal.SIGKILL)  # a uid change cleared the one set before

    root = "/tmp"
    sc.mount("tmpfs", root, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=0755,size=1m")
    for path, fd, f_flag in sources:
        dst = root + path
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            open(dst, "w").close()
        _bind(fd, dst, readonly=True, f_flag=f_flag)
        os.close(fd)
    for name, target in config["symlinks"].items():
        os.makedirs(os.path.dirname(root + name), exist_ok=True)
        os.symlink(target, root + name)
    os.makedirs(root + "/etc", exist_ok=True)
    with open(root + "/etc/passwd", "w") as f:
        f.write("root:x:0:0:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    with open(root + "/etc/group", "w") as f:
        f.write("root:x:0:\nnogroup:x:65534:\n")
    with open(root + "/etc/hostname", "w") as f:
        f.write("sandbox\n")
    for d in ("proc", "tmp", "work", "state", "dev"):
        os.makedirs(root + "/" + d, exist_ok=True)
    os.chmod(root + "/tmp", 0o1777)
    # /dev: host device nodes bound one by one onto a tmpfs that becomes read-only.
    sc.mount("tmpfs", root + "/dev", "tmpfs", sc.MS_NOSUID | sc.MS_NOEXEC, "mode=0755,size=64k")
    for node in ("null", "zero", "full", "random", "urandom"):
        open(f"{root}/dev/{node}", "w").close()
        sc.mount(f"/dev/{node}", f"{root}/dev/{node}", None, sc.MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/dev/shm")
    sc.mount(None, root + "/dev", None, sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NOEXEC)
    sc.mount("tmpfs", root + "/state", "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=0700,size=64k")
    # A fully visible procfs of our PID namespace; tasks mount their own over it.
    sc.mount("proc", root + "/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    os.chdir(root)
    os.mkdir(".oldroot")
    sc.pivot_root(".", ".oldroot")
    sc.umount2("/.oldroot", sc.MNT_DETACH)
    os.rmdir("/.oldroot")
    os.chdir("/")
    sc.mount(None, "/", None, sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV)
    return warnings


# ----------------------------------------------------------------------------- one execution


def _task_init(req: dict, fds: list[int], seccomp_program: bytes | None) -> None:
    """G: init of the task's PID namespace: joins the task's cgroups, says hello, builds the
    task's namespaces, forks the task, reaps. Never returns."""
    status = socket.socket(fileno=fds[0])
    named = {"stdin": fds[1], "stdout": fds[2], "stderr": fds[3]}
    try:
        sc.set_pdeathsig(signal.SIGKILL)
        # Join the task's cgroups through cgroup.procs files the manager opened as root
        # (cgroup v1 checks the opener's credentials); "0" means the writer itself. The fds
        # are closed before anything else runs, so they never reach the task.
        for fd in fds[4:]:
            os.write(fd, b"0")
            os.close(fd)
        _wire.send(status, {"hello": True})  # the manager reads our host pid off SCM_CREDENTIALS
        flags = sc.CLONE_NEWNS | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS
        if not req["network"]:
            flags |= sc.CLONE_NEWNET
        sc.unshare(flags)  # PID: already done by the server's fork (``_fork_init``)
        limits = req["limits"]
        disk = int(limits["disk_mb"]) << 20
        sc.sethostname("sandbox")
        flags = sc.MS_NOSUID | sc.MS_NODEV
        sc.mount("proc", "/proc", "proc", flags | sc.MS_NOEXEC)
        sc.mount("tmpfs", "/tmp", "tmpfs", flags, f"mode=1777,size={disk}")
        sc.mount("tmpfs", "/dev/shm", "tmpfs", flags | sc.MS_NOEXEC, f"mode=1777,size={disk}")
        sid = req.get("sid")
        if sid is None:
            sc.mount("tmpfs", "/work", "tmpfs", flags, f"mode=0777,size={disk}")
        else:
            base = f"/state/{sid}"
            layers = sorted(os.listdir(f"{base}/layers"), reverse=True)
            lower = ":".join(f"{base}/layers/{x}" for x in layers)
            sc.mount("overlay", "/work", "overlay", flags,
                     f"lowerdir={lower},upperdir={base}/upper,workdir={base}/work,userxattr")
        sc.umount2("/state", sc.MNT_DETACH)
        if not req["network"]:
            sc.loopback_up()
        _set_rlimits(limits)
        os.chdir(req.get("cwd") or "/work")
        sc.drop_all_capabilities()
        sc.set_no_new_privs()
        for rel, content in req.get("files", {}).items():
            path = os.path.join("/work", rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(base64.b64decode(content))
        if seccomp_program is not None:
            seccomp.install(seccomp_program)
        # Non-dumpable: the task (same uid) cannot open /proc/1/mem or /proc/1/fd/* to forge
        # the status this process reports.
        sc.prctl(sc.PR_SET_DUMPABLE, 0)
        task = _spawn_command(req, named) if req.get("code") is None else os.fork()
    except BaseException as e:  # noqa: BLE001 - any set-up failure is the sandbox's
        try:
            _wire.send(status, {"setup_error": f"{type(e).__name__}: {e}"})
        finally:
            os._exit(EXIT_SETUP_FAILED)
    if task == 0:
        _task(req, named, status)
    if task < 0:  # the command could not be started: report it as the shell would
        try:
            _wire.send(status, {"task_wstatus": (-task) << 8})
        finally:
            os._exit(0)
    # Init of the namespace: the task is pid 2 so that it can signal itself (init ignores
    # signals it has no handler for); reap orphans until the task ends, then report and
    # exit, which kills whatever is left in the namespace.
    for fd in named.values():
        os.close(fd)
    while True:
        try:
            pid, wstatus = os.wait()
        except ChildProcessError:
            os._exit(EXIT_SETUP_FAILED)
        if pid == task:
            try:
                _wire.send(status, {"task_wstatus": wstatus})
            finally:
                os._exit(0)


def _spawn_command(req: dict, fds: dict[str, int]) -> int:
    """T for a command: posix_spawn (vfork + exec, no copy of this interpreter's memory).
    Returns its pid, or -126/-127 after writing the reason to the task's stderr."""
    argv, env = req["argv"], req["env"]
    exe = shutil.which(argv[0], path=env.get("PATH")) if "/" not in argv[0] else argv[0]
    if exe is None:
        os.write(fds["stderr"], f"sandbox: {argv[0]}: command not found\n".encode())
        return -127
    actions = [(os.POSIX_SPAWN_DUP2, fds["stdin"], 0), (os.POSIX_SPAWN_DUP2, fds["stdout"], 1),
               (os.POSIX_SPAWN_DUP2, fds["stderr"], 2)]
    try:  # every other fd this process holds is close-on-exec
        return os.posix_spawn(exe, argv, env, file_actions=actions,
                              setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as e:
        os.write(fds["stderr"], f"sandbox: {argv[0]}: {e.strerror}\n".encode())
        return -126


def _task(req: dict, fds: dict[str, int], status: socket.socket) -> None:
    """T for Python source in the pre-forked interpreter: pid 2 of its namespace. Never returns."""
    try:
        sc.set_name(_TASK_NAME)
        sc.prctl(sc.PR_SET_DUMPABLE, 1)
        os.dup2(fds["stdin"], 0)
        os.dup2(fds["stdout"], 1)
        os.dup2(fds["stderr"], 2)
        keep = status.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 16)
        os.set_inheritable(keep, False)
    except BaseException as e:  # noqa: BLE001
        try:
            _wire.send(status, {"setup_error": f"{type(e).__name__}: {e}"})
        finally:
            os._exit(EXIT_SETUP_FAILED)
    status.close()
    _run_python_inline(req["code"], req.get("argv") or [], req["env"])


def _set_rlimits(limits: dict) -> None:
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
        traceback.print_exc()
        rc = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            rc = rc or 120
    os._exit(rc)


# ----------------------------------------------------------------------------- sessions


def _session_op(req: dict) -> dict:
    sid = req["sid"]
    if not sid.isalnum():
        return {"error": "bad session id"}
    base = f"/state/{sid}"
    op = req["op"]
    if op == "session_new":
        os.mkdir(base, 0o700)
        sc.mount("tmpfs", base, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, f"mode=0755,size={int(req['disk_bytes'])}")
        for d in ("layers", "layers/000000", "upper", "work"):
            os.mkdir(f"{base}/{d}", 0o755)
        return {"ok": True, "layer": 0}
    if op == "snapshot":
        layer = max(int(x) for x in os.listdir(f"{base}/layers")) + 1
        os.rename(f"{base}/upper", f"{base}/layers/{layer:06d}")
        shutil.rmtree(f"{base}/work")
        os.mkdir(f"{base}/upper", 0o755)
        os.mkdir(f"{base}/work", 0o755)
        return {"ok": True, "layer": layer}
    if op == "rollback":
        keep = int(req["layer"])
        for x in os.listdir(f"{base}/layers"):
            if int(x) > keep:
                shutil.rmtree(f"{base}/layers/{x}")
        shutil.rmtree(f"{base}/upper")
        shutil.rmtree(f"{base}/work")
        os.mkdir(f"{base}/upper", 0o755)
        os.mkdir(f"{base}/work", 0o755)
        return {"ok": True, "layer": keep}
    if op == "session_close":
        if os.path.exists(base):
            sc.umount2(base, sc.MNT_DETACH)
            os.rmdir(base)
        return {"ok": True}
    return {"error": f"unknown op {op}"}


# ----------------------------------------------------------------------------- main loop


def _fork_init(req: dict, fds: list[int], program: bytes | None, pidns: int, inherited: list[int]) -> int:
    """Fork G directly into a fresh PID namespace, of which it is init.

    Why no intermediate process: a new PID namespace takes effect only for children, so an
    earlier design forked a keeper that unshared and forked again. Profiling (perf, 2 cores)
    showed every fork of this interpreter costing ~1.5 ms of page-table copies, copy-on-write
    faults and exit-time unmapping, about a quarter of a pre-forked run's CPU. Instead the
    server points its own pid_for_children at a fresh namespace (unshare), forks G straight
    into it, and points it back (setns to its own namespace); G joins the cgroups, says hello
    and unshares the other namespaces itself, and the server reaps G and reports its status.
    """
    sc.unshare(sc.CLONE_NEWPID)
    pid = -1
    try:
        pid = os.fork()
        if pid == 0:
            try:
                for fd in inherited:  # the control socket, other executions' status and pidfds
                    os.close(fd)
                sc.set_name(b"sandbox-init")
                _task_init(req, fds, program)
            finally:
                os._exit(EXIT_SETUP_FAILED)
    finally:
        if pid != 0:
            try:
                sc.setns(pidns, sc.CLONE_NEWPID)
            except OSError:
                # Children would land in this execution's namespace from now on: no safe
                # way on. Exiting kills every sandbox; the manager starts a new server.
                os._exit(1)
    return pid


def _report_exit(pid: int, status_fd: int) -> None:
    """Reap G and send its wait status and resource usage (what the task's own status
    message cannot say when G itself was killed) on the execution's status socket."""
    with socket.socket(fileno=status_fd) as sock:
        _, wstatus, ru = os.wait4(pid, 0)
        try:
            _wire.send(sock, {"wstatus": wstatus, "utime": ru.ru_utime, "stime": ru.ru_stime,
                              "maxrss_kb": ru.ru_maxrss})
        except OSError:  # the manager stopped listening
            pass


def _serve(ctl: socket.socket, config: dict) -> None:
    global _TASK_NAME
    _TASK_NAME = sc.get_name()
    sc.set_name(b"sandbox-server")
    warnings = _build_root(config)
    sc.drop_bounding_set()
    for mod in config.get("preload", []):
        try:
            __import__(mod)
        except Exception as e:  # noqa: BLE001
            warnings.append(f"preload {mod!r} failed: {e}")
    program = seccomp.filter_for_machine() if config.get("seccomp", True) else None
    if program is None:
        warnings.append(f"no seccomp filter for {os.uname().machine}: dangerous syscalls are not filtered")
    pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    inits: dict[int, tuple[int, int]] = {}  # pidfd -> (pid of G, our copy of its status socket)
    _wire.send(ctl, {"ready": True, "warnings": warnings})
    while True:
        ready, _, _ = select.select([ctl, *inits], [], [])
        for pidfd in ready:
            if pidfd is not ctl:
                os.close(pidfd)
                _report_exit(*inits.pop(pidfd))
        if ctl not in ready:
            continue
        req, fds = _wire.recv(ctl)
        if req is None:
            os._exit(0)  # manager gone: dying as PID-namespace init kills every sandbox
        if req["op"] == "exec":
            try:
                inherited = [ctl.fileno(), pidns, *inits, *(st for _, st in inits.values())]
                pid = _fork_init(req, fds, program, pidns, inherited)
                try:
                    inits[os.pidfd_open(pid)] = (pid, os.dup(fds[0]))
                except OSError:
                    os.kill(pid, signal.SIGKILL)  # untracked, it could not be reaped
                    os.waitpid(pid, 0)
                    raise
            except OSError as e:
                with socket.socket(fileno=os.dup(fds[0])) as sock:
                    _log_fail(sock, f"fork-server: {e}")
            for fd in fds:
                os.close(fd)
        else:
            reply = socket.socket(fileno=fds[0])
            try:
                out = _session_op(req)
            except OSError as e:
                out = {"error": f"{req['op']}: {e}"}
            _wire.send(reply, out)
            reply.close()


def main() -> None:
    config = json.loads(sys.argv[1])
    ctl = socket.socket(fileno=int(config["ctl_fd"]))
    os.set_inheritable(ctl.fileno(), False)  # never across a task's execve, whatever else happens
    try:
        # No PDEATHSIG here: it fires when the *thread* that spawned us exits, and a Sandbox
        # may be built in a short-lived thread. The manager's death closes the control
        # socket instead, on which the server below exits.
        sc.unshare(sc.CLONE_NEWUSER | sc.CLONE_NEWNS | sc.CLONE_NEWPID | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS)
        _wire.send(ctl, {"map": True})
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
            _log_fail(ctl, f"server set-up failed: {type(e).__name__}: {e}\n{traceback.format_exc()}")
            os._exit(1)
    ctl.close()
    _, wstatus = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(wstatus) & 0xFF)


if __name__ == "__main__":
    main()
