"""Quotas for one execution, validated at construction.

Covers: the numbers a caller can set and how they map to mechanisms (cgroup first, rlimit
as a second layer). Does not cover: enforcement (``_server.py``, ``cgroups.py``, ``supervise.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    """Wall-clock limit; the whole task is killed at this time (TIMEOUT)."""
    cpu_s: float = 10.0
    """CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL 1 s later) and for the
    whole group (cgroup accounting) (CPU_LIMIT)."""
    memory_mb: int = 512
    """Memory of the whole process tree incl. tmpfs pages it writes (cgroup; OOM)."""
    pids: int = 64
    """Processes and threads of the whole tree, the task's init included (pids cgroup)."""
    output_bytes: int = 1 << 20
    """Bytes kept per stream (stdout, stderr); more kills the task (OUTPUT_LIMIT)."""
    disk_mb: int = 64
    """Size of each of /work, /tmp and /dev/shm for one-shot runs (tmpfs), of the session's
    layer store for sessions, and RLIMIT_FSIZE."""
    nofile: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    owners: bool = False
    """Root of the sandbox's namespace may change owners and pass file permissions (CAP_CHOWN,
    CAP_DAC_OVERRIDE, CAP_FOWNER, kept across execve), on the namespace's own files only: its uids
    1-65535 map to unused host ids, host files are not among them. What `tar` as root restoring
    uid 1000, or a task's `chown`, needs. Off: no capability at all."""

    def __post_init__(self) -> None:
        if not isinstance(self.owners, bool):
            raise ValueError(f"Limits.owners must be true or false, got {self.owners!r}")
        for name in ("wall_s", "cpu_s", "memory_mb", "pids", "output_bytes", "disk_mb", "nofile"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if self.pids < 2:
            raise ValueError("Limits.pids must be at least 2 (the task and its init)")
        if self.nofile < 16:
            raise ValueError("Limits.nofile must be at least 16")

    def to_dict(self) -> dict:
        return asdict(self)
