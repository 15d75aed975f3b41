"""Thin ctypes wrappers over the Linux calls the sandbox needs and Python 3.11 lacks.

Covers: unshare, setns, namespace setup (mount, umount2, pivot_root, sethostname),
capability dropping (capset, bounding set, securebits), no_new_privs, PDEATHSIG,
bringing up the loopback interface of a fresh network namespace, and ``clone_idle``: a
process that shares its creator's memory and only sleeps (a PID namespace's init).

Does not cover: seccomp filters (``seccomp.py``), cgroups (``cgroups.py``), or any policy;
every function here raises ``OSError`` with the errno of the failing call and nothing else.
Linux x86_64/aarch64 glibc only.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_VM = 0x00000100
CLONE_FILES = 0x00000400
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_RELATIME = 1 << 21
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_GET_NAME = 16
PR_SET_DUMPABLE = 4
PR_SET_SECUREBITS = 28
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
CAP_SYS_ADMIN = 21
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_CAP_AMBIENT_RAISE = 2
# What root of a task's namespace keeps with Limits(owners=True): CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER
OWNER_CAPS = (0, 1, 3)

# SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | ..._LOCKED | KEEP_CAPS_LOCKED
SECUREBITS_LOCKED_DOWN = 0x01 | 0x02 | 0x04 | 0x08 | 0x20

_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long
_libc.clone.restype = ctypes.c_int
_libc.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _b(s: str | bytes | None) -> bytes | None:
    return s.encode() if isinstance(s, str) else s


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(fd, nstype), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {target}")


def umount2(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(_b(target), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    nr = 155 if os.uname().machine == "x86_64" else 41
    _check(_libc.syscall(nr, _b(new_root), _b(put_old)), "pivot_root")


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(_libc.sethostname(raw, len(raw)), "sethostname")


def prctl(option: int, a2: int = 0, a3: int = 0, a4: int = 0, a5: int = 0) -> int:
    return _check(_libc.prctl(option, a2, a3, a4, a5), f"prctl({option})")


_prctl_buf = _libc["prctl"]  # a second prototype: the name calls pass a buffer
_prctl_buf.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def set_name(name: bytes) -> None:
    """The process's comm (``ps``, /proc/PID/comm), at most 15 bytes."""
    _check(_prctl_buf(PR_SET_NAME, name[:15], 0, 0, 0), "prctl(PR_SET_NAME)")


def get_name() -> bytes:
    buf = ctypes.create_string_buffer(16)
    _check(_libc.prctl(PR_GET_NAME, ctypes.addressof(buf), 0, 0, 0), "prctl(PR_GET_NAME)")
    return buf.value


def set_pdeathsig(sig: int) -> None:
    prctl(PR_SET_PDEATHSIG, sig)


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 40


_LAST_CAP = _last_cap()


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_bounding_set(keep: tuple[int, ...] = ()) -> None:
    """Empty the capability bounding set (what an execve could ever grant), but `keep`. Inherited by
    every child: the fork-server does it once (keeping ``OWNER_CAPS``, which each task drops unless its
    limits ask for owners), as it never executes anything itself, and keeps its effective capabilities
    for the mounts it makes. One commit_creds per capability made this ~0.7 ms of every execution when
    each task's init did it, so only capabilities still in the set are dropped."""
    for cap in range(_last_cap() + 1):
        if cap in keep:
            continue
        try:
            if prctl(PR_CAPBSET_READ, cap):
                prctl(PR_CAPBSET_DROP, cap)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise


def drop_all_capabilities(keep: tuple[int, ...] = ()) -> None:
    """Empty the bounding, ambient, inheritable, permitted and effective sets but `keep` (capabilities
    below 32), and lock securebits so that a later execve (even as uid 0 in the namespace) regains
    nothing; what is kept is raised into the ambient set, the one set an execve passes on. The bounding
    set holds at most ``OWNER_CAPS`` here (``drop_bounding_set`` in the fork-server); the rest is dropped."""
    drop_bounding_set(keep)
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass
    prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    mask = sum(1 << cap for cap in keep)
    data[0].effective = data[0].permitted = data[0].inheritable = mask
    nr = 126 if os.uname().machine == "x86_64" else 91
    _check(_libc.syscall(nr, ctypes.byref(header), ctypes.byref(data)), "capset")
    for cap in keep:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)


def loopback_up() -> None:
    """Bring up ``lo`` in a fresh network namespace (it starts down), so code that talks to
    itself over 127.0.0.1 works while nothing outside the namespace is reachable."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), siocgifflags, ifreq))[1]
        fcntl.ioctl(s.fileno(), siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


# The code an idle init runs: x86_64 ``syscall(SYS_pause)`` (a bare assembly stub that touches
# no thread state); elsewhere glibc's ``pause`` (a direct syscall in a single-threaded process).
if os.uname().machine == "x86_64":
    _IDLE_FN, _IDLE_ARG = ctypes.cast(_libc.syscall, ctypes.c_void_p).value, 34  # __NR_pause
else:
    _IDLE_FN, _IDLE_ARG = ctypes.cast(_libc.pause, ctypes.c_void_p).value, 0
IDLE_STACK_BYTES = 4096


def clone_idle(stack: ctypes.Array) -> int:
    """Start a process that shares this one's memory and descriptor table (CLONE_VM |
    CLONE_FILES) and does nothing but ``pause()`` until it is killed; returns its pid.

    What it is for: the init of a fresh PID namespace (call after ``unshare(CLONE_NEWPID)``).
    Sharing the address space means no page tables are copied and none are torn down at its
    exit, so it costs a few microseconds where forking this interpreter costs milliseconds.
    It runs no Python and no code of its own, on ``stack`` (``IDLE_STACK_BYTES``, which the
    caller keeps alive until the process is reaped). Callers must make sure that no signal
    has a handler when they call this (the handler would run here, on shared memory), and
    that their memory is non-dumpable (PR_SET_DUMPABLE 0) so that nothing in the namespace
    can open /proc/1/mem, /proc/1/fd or /proc/1/root. Its exit signal is SIGCHLD."""
    top = (ctypes.addressof(stack) + len(stack) - 64) & ~0xF
    return _check(_libc.clone(_IDLE_FN, top, CLONE_VM | CLONE_FILES | signal.SIGCHLD, _IDLE_ARG), "clone")
