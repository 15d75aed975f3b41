"""A seccomp-BPF deny-list filter for sandboxed code, assembled in pure Python.

Covers: building a classic-BPF program that returns EPERM for syscalls an RL task never
needs and that widen the kernel attack surface (ptrace, keyctl, bpf, perf_event_open,
mount and the new mount API, namespace creation, module loading, io_uring, userfaultfd,
TIOCSTI ...), ENOSYS for clone3 (so libc falls back to clone, whose flags a BPF filter can
inspect), and kills the process on a foreign ABI (i386 or x32 entry on x86_64); installing it
with ``prctl(PR_SET_SECCOMP)``.

Does not cover: allow-list profiles per language, argument filtering beyond clone flags and
two ioctls, or architectures other than x86_64 (``filter_for_machine`` returns ``None``
elsewhere and the caller must warn). No libseccomp: the program is ~150 instructions and
writing it here avoids a native dependency that does not install into virtualenvs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from posttrain.sandbox import _syscalls

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

# x86_64 numbers. Denied with EPERM.
DENIED_X86_64: dict[str, int] = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_getfd": 438, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
    "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "unshare": 272, "setns": 308, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164,
    "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "iopl": 172, "ioperm": 173,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "lookup_dcookie": 212, "quotactl": 179,
    "syslog": 103, "vhangup": 153, "uselib": 134, "_sysctl": 156, "fanotify_init": 300,
}
_CLONE = 56
_CLONE3 = 435
_IOCTL = 16
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
_NAMESPACE_FLAGS = (
    _syscalls.CLONE_NEWNS | _syscalls.CLONE_NEWCGROUP | _syscalls.CLONE_NEWUTS | _syscalls.CLONE_NEWIPC
    | _syscalls.CLONE_NEWUSER | _syscalls.CLONE_NEWPID | _syscalls.CLONE_NEWNET
)


def _stmt(code: int, k: int) -> bytes:
    return struct.pack("HBBI", code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def build_filter_x86_64() -> bytes:
    """The filter as a packed ``struct sock_filter[]``."""
    eperm = RET_ERRNO | errno.EPERM
    prog = [
        _stmt(_LD_W_ABS, 4),                        # A = arch
        _jump(_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        _stmt(_RET_K, RET_KILL_PROCESS),            # i386 ABI via int 0x80
        _stmt(_LD_W_ABS, 0),                        # A = nr
        _jump(_JGE_K, X32_SYSCALL_BIT, 0, 1),
        _stmt(_RET_K, RET_KILL_PROCESS),            # x32 ABI
    ]
    for nr in sorted(DENIED_X86_64.values()):
        prog += [_jump(_JEQ_K, nr, 0, 1), _stmt(_RET_K, eperm)]
    prog += [_jump(_JEQ_K, _CLONE3, 0, 1), _stmt(_RET_K, RET_ERRNO | errno.ENOSYS)]
    # clone(flags, ...): refuse any namespace flag (nested user namespaces above all).
    prog += [
        _jump(_JEQ_K, _CLONE, 0, 3),
        _stmt(_LD_W_ABS, 16),                       # low 32 bits of args[0]
        _jump(_JSET_K, _NAMESPACE_FLAGS, 0, 1),
        _stmt(_RET_K, eperm),
    ]
    # ioctl(fd, TIOCSTI|TIOCLINUX): terminal input injection.
    prog += [
        _stmt(_LD_W_ABS, 0),
        _jump(_JEQ_K, _IOCTL, 0, 4),
        _stmt(_LD_W_ABS, 24),                       # low 32 bits of args[1]
        _jump(_JEQ_K, _TIOCSTI, 1, 0),
        _jump(_JEQ_K, _TIOCLINUX, 0, 1),
        _stmt(_RET_K, eperm),
        _stmt(_RET_K, RET_ALLOW),
    ]
    return b"".join(prog)


def filter_for_machine(machine: str | None = None) -> bytes | None:
    """The filter for this CPU, or ``None`` where no syscall table is written (warn then)."""
    return build_filter_x86_64() if (machine or os.uname().machine) == "x86_64" else None


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes) -> None:
    """Install ``program`` on the calling thread (needs no_new_privs or CAP_SYS_ADMIN)."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _syscalls.prctl(22, 2, ctypes.addressof(fprog))  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
