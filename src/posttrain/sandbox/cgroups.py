"""Per-execution cgroups: memory and pids quotas, CPU accounting, and kill-everything.

Covers: probing what this machine offers (cgroup v2 with memory/pids controllers; else the
v1 ``memory``, ``pids`` and ``cpuacct`` hierarchies; the v2 ``cgroup.kill`` file, which works
on a hybrid host even without controllers), creating one group per execution under
``posttrain-sandbox/<manager>``, reading peak memory, OOM kills and CPU time, and removing
it. ``SlotPool`` keeps v1 groups warm between executions (reset, not rebuilt: creating and
removing three groups cost ~1 ms a run) and reuses one only when its reset provably left
nothing of the previous run. ``sweep_orphans`` removes the groups of managers that died
(SIGKILL included). A task joins its groups itself, by writing "0" into ``join_file`` (v1
``tasks``: no global lock, so no wait for an RCU grace period).

Does not cover: CPU bandwidth (``cpu.max``) or I/O throttling; anything missing is reported
by ``CgroupSupport.warnings`` so the caller can degrade loudly, never silently.
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass, field

ROOT = "/sys/fs/cgroup"
PREFIX = "posttrain-sandbox"


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # no buffered file object: one write(2)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def process_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: with the pid, names a process uniquely across reuse."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def manager_tag(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{process_start_time(pid)}"


@dataclass
class CgroupSupport:
    """Where each mechanism lives on this machine (``None``: unavailable)."""

    memory: str | None = None
    """Hierarchy root holding the memory controller."""
    memory_v2: bool = False
    pids: str | None = None
    pids_v2: bool = False
    cpu: str | None = None
    """Hierarchy root for CPU accounting (v1 cpuacct or v2 cpu.stat)."""
    cpu_v2: bool = False
    kill: str | None = None
    """A v2 hierarchy whose groups have ``cgroup.kill``."""
    warnings: list[str] = field(default_factory=list)

    @property
    def roots(self) -> list[str]:
        return sorted({r for r in (self.memory, self.pids, self.cpu, self.kill) if r})


def _writable(path: str) -> bool:
    probe = os.path.join(path, PREFIX)
    try:
        os.makedirs(probe, exist_ok=True)
        return True
    except OSError:
        return False


def probe() -> CgroupSupport:
    s = CgroupSupport()
    v2 = ROOT if os.path.exists(f"{ROOT}/cgroup.controllers") else f"{ROOT}/unified"
    if os.path.exists(f"{v2}/cgroup.controllers") and _writable(v2):
        ctrls = _read(f"{v2}/cgroup.controllers").split()
        base = f"{v2}/{PREFIX}"
        for c in ("memory", "pids", "cpu"):
            if c in ctrls:
                try:
                    _write(f"{v2}/cgroup.subtree_control", f"+{c}")
                    _write(f"{base}/cgroup.subtree_control", f"+{c}")
                except OSError:
                    continue
                setattr(s, c, v2)
                setattr(s, f"{c}_v2", True)
        # cgroup.kill is only worth a second hierarchy (a migration costs ~0.8 ms) where v2
        # also carries the quotas; on a hybrid host teardown goes through PID-namespace init.
        if os.path.exists(f"{base}/cgroup.kill") and (s.memory_v2 or s.pids_v2):
            s.kill = v2
    for c, attr in (("memory", "memory"), ("pids", "pids"), ("cpuacct", "cpu")):
        if getattr(s, attr) is None and os.path.isdir(f"{ROOT}/{c}") and _writable(f"{ROOT}/{c}"):
            setattr(s, attr, f"{ROOT}/{c}")
    if s.memory is None:
        s.warnings.append("no memory cgroup: memory is limited only by RLIMIT_AS (per process, virtual memory)")
    if s.pids is None:
        s.warnings.append("no pids cgroup: processes are limited only by RLIMIT_NPROC (shared by all sandboxes)")
    if s.cpu is None:
        s.warnings.append("no cpu accounting cgroup: CPU time counts only processes the task waited for")
    return s


_JOIN_FILES: dict[str, str] = {}


def join_file(root: str) -> str:
    """The file through which a single-threaded process joins a group of hierarchy ``root``
    by writing "0": ``tasks`` on cgroup v1, ``cgroup.procs`` on v2.

    Why not ``cgroup.procs`` everywhere: moving a whole process (``cgroup.procs``, or any
    pid but "0") takes the kernel's global ``cgroup_threadgroup_rwsem`` for writing, and a
    writer waits for an RCU grace period unless another one ran moments before: measured
    6-16 ms per execution when runs are 20 ms or more apart (2 cores, HZ=250), most of a
    pre-forked run. Moving the calling thread alone ("0" into v1 ``tasks``) skips that lock
    (``cgroup_procs_write_start`` in recent kernels; older ones lock either way) and takes
    ~0.02 ms; for a single-threaded process it moves the whole process. v2 has no such file for a domain group
    (``cgroup.threads`` needs threaded groups), so v2 keeps ``cgroup.procs``."""
    name = _JOIN_FILES.get(root)
    if name is None:
        name = _JOIN_FILES[root] = "cgroup.procs" if os.path.exists(f"{root}/cgroup.controllers") else "tasks"
    return name


KERNEL_RESIDUE_BYTES = 1 << 20
"""Most kernel memory a reused group may still have charged (see ``TaskCgroup.reset``)."""
_USER_PAGES = ("rss", "rss_huge", "cache", "shmem", "mapped_file", "swap", "unevictable", "dirty", "writeback")

_NO_SWAP_PARENTS: set[str] = set()
"""Manager groups whose swappiness is 0, so that their new children inherit it."""


@dataclass
class TaskStats:
    peak_memory_bytes: int | None = None
    oom_kills: int = 0
    cpu_s: float | None = None


class TaskCgroup:
    """The cgroups of one execution; joined via ``open_join_files`` before the task starts, ``close()`` after."""

    def __init__(self, support: CgroupSupport, manager: str, name: str, memory_bytes: int, pids: int):
        self.support = support
        self.key = (memory_bytes, pids)
        self.oom_base = 0  # OOM kills counted before this execution (a reused v1 group)
        self.paths: dict[str, str] = {}
        for root in support.roots:
            parent = f"{root}/{PREFIX}/{manager}"
            path = f"{parent}/{name}"
            try:
                os.mkdir(path)
            except FileNotFoundError:
                os.makedirs(parent, exist_ok=True)
                if root == support.memory and not support.memory_v2:
                    # v1 copies a new group's swappiness from its parent: set it once here
                    # rather than once per execution (one file write less per run).
                    try:
                        _write(f"{parent}/memory.swappiness", "0")
                        _NO_SWAP_PARENTS.add(parent)
                    except OSError:
                        pass
                os.mkdir(path)
            self.paths[root] = path
        if support.memory:
            p = self.paths[support.memory]
            if support.memory_v2:
                _write(f"{p}/memory.max", str(memory_bytes))
                try:
                    _write(f"{p}/memory.swap.max", "0")
                except OSError:
                    pass
            else:
                _write(f"{p}/memory.limit_in_bytes", str(memory_bytes))
                if f"{support.memory}/{PREFIX}/{manager}" not in _NO_SWAP_PARENTS:
                    try:
                        _write(f"{p}/memory.swappiness", "0")
                    except OSError:
                        pass
        if support.pids:
            _write(f"{self.paths[support.pids]}/pids.max", str(pids))

    def open_join_files(self) -> list[int]:
        """Write-only fds, one per group, through which the task joins by writing "0" (itself)
        while it is single-threaded (a fork): ``join_file`` of each group's hierarchy."""
        return [os.open(f"{path}/{join_file(root)}", os.O_WRONLY | os.O_CLOEXEC) for root, path in self.paths.items()]

    def kill(self) -> bool:
        if self.support.kill:
            try:
                _write(f"{self.paths[self.support.kill]}/cgroup.kill", "1")
                return True
            except OSError:
                return False
        return False

    def cpu_s(self) -> float | None:
        """CPU seconds of the whole group so far (one file read), ``None`` if unknown."""
        s = self.support
        if not s.cpu:
            return None
        p = self.paths[s.cpu]
        try:
            if s.cpu_v2:
                usage = dict(line.split() for line in _read(f"{p}/cpu.stat").splitlines())
                return int(usage["usage_usec"]) / 1e6
            return int(_read(f"{p}/cpuacct.usage")) / 1e9
        except (OSError, ValueError, KeyError):
            return None

    def stats(self) -> TaskStats:
        st = TaskStats()
        s = self.support
        try:
            if s.memory:
                p = self.paths[s.memory]
                if s.memory_v2:
                    st.peak_memory_bytes = int(_read(f"{p}/memory.peak")) if os.path.exists(f"{p}/memory.peak") else None
                    events = dict(line.split() for line in _read(f"{p}/memory.events").splitlines())
                else:
                    st.peak_memory_bytes = int(_read(f"{p}/memory.max_usage_in_bytes"))
                    events = dict(line.split() for line in _read(f"{p}/memory.oom_control").splitlines())
                st.oom_kills = int(events.get("oom_kill", 0)) - self.oom_base
            if s.cpu:
                p = self.paths[s.cpu]
                if s.cpu_v2:
                    usage = dict(line.split() for line in _read(f"{p}/cpu.stat").splitlines())
                    st.cpu_s = int(usage["usage_usec"]) / 1e6
                else:
                    st.cpu_s = int(_read(f"{p}/cpuacct.usage")) / 1e9
        except (OSError, ValueError, KeyError):
            pass
        return st

    def reset(self) -> bool:
        """Make a v1 group set as good as new for the next execution; False when that cannot
        be shown, and then it must not be reused. Call only after the execution's PID
        namespace is gone. Checks that no process is left (pids.current is 0), reclaims
        every page still charged (memory.force_empty, when memory.stat shows any) and checks that no page of the
        previous task is (rss, cache, shmem, mapped_file, swap and unevictable all 0, read
        from memory.stat), restarts the peak (max_usage_in_bytes) and CPU (cpuacct.usage)
        counters, and records the OOM-kill count, which cannot be reset, as the next
        execution's baseline. What may still be charged is kernel memory of the previous
        namespaces that the kernel frees asynchronously (~100 KiB after a network namespace;
        more than ``KERNEL_RESIDUE_BYTES`` and the group is not reused). The limits stay: a
        group is only reused for the same (memory, pids) limits."""
        s = self.support
        if s.memory_v2 or s.pids_v2 or s.cpu_v2 or s.kill or not (s.memory and s.pids and s.cpu):
            return False
        try:
            if int(_read(f"{self.paths[s.pids]}/pids.current")) != 0:
                return False
            mem = self.paths[s.memory]
            stat = dict(line.split() for line in _read(f"{mem}/memory.stat").splitlines())
            if any(int(stat.get(k, 0)) for k in _USER_PAGES):  # reclaim only when something is left (a walk)
                _write(f"{mem}/memory.force_empty", "0")
                stat = dict(line.split() for line in _read(f"{mem}/memory.stat").splitlines())
                if any(int(stat.get(k, 0)) for k in _USER_PAGES):
                    return False
            if int(_read(f"{mem}/memory.usage_in_bytes")) > KERNEL_RESIDUE_BYTES:
                return False
            _write(f"{mem}/memory.max_usage_in_bytes", "0")
            _write(f"{self.paths[s.cpu]}/cpuacct.usage", "0")
            events = dict(line.split() for line in _read(f"{mem}/memory.oom_control").splitlines())
            self.oom_base = int(events.get("oom_kill", 0))
        except (OSError, ValueError, KeyError):
            return False
        return True

    def close(self, timeout_s: float = 2.0) -> bool:
        """Remove the groups; kills stragglers first. False if one could not be removed."""
        deadline = time.monotonic() + timeout_s
        ok = True
        for path in self.paths.values():
            ok &= _remove_group(path, deadline)
        return ok


def _remove_group(path: str, deadline: float) -> bool:
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        try:
            if os.path.exists(f"{path}/cgroup.kill"):
                _write(f"{path}/cgroup.kill", "1")
            else:
                for pid in _read(f"{path}/cgroup.procs").split():
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        time.sleep(0.002)


_NAMES = itertools.count()


class SlotPool:
    """Warm execution cgroups of one manager, keyed by their (memory, pids) limits.

    ``acquire`` hands out an idle group with those limits or creates one; ``release`` (after
    the execution's namespace is gone) resets it with ``TaskCgroup.reset`` and keeps it for
    the next execution, or removes it when the reset cannot show it clean, when ``keep``
    groups are idle already, or when the pool is closed. Thread-safe."""

    def __init__(self, support: CgroupSupport, manager: str, keep: int):
        self.support, self.manager, self.keep = support, manager, keep
        self._idle: dict[tuple[int, int], list[TaskCgroup]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self, memory_bytes: int, pids: int) -> TaskCgroup:
        with self._lock:
            idle = self._idle.get((memory_bytes, pids))
            if idle:
                return idle.pop()
        # Names are unique in this process: several Sandboxes of one manager share its parent group.
        return TaskCgroup(self.support, self.manager, f"t{next(_NAMES)}", memory_bytes=memory_bytes, pids=pids)

    def release(self, cg: TaskCgroup) -> bool:
        """False if the group had to be removed and could not be."""
        with self._lock:
            full = self._closed or sum(map(len, self._idle.values())) >= self.keep
        if not full and cg.reset():
            with self._lock:
                if not self._closed:
                    self._idle.setdefault(cg.key, []).append(cg)
                    return True
        return cg.close()

    def close(self) -> bool:
        """Remove every idle group; later releases remove theirs."""
        with self._lock:
            self._closed = True
            idle = [cg for groups in self._idle.values() for cg in groups]
            self._idle.clear()
        return all([cg.close() for cg in idle])


def remove_manager(support: CgroupSupport, manager: str) -> None:
    """Remove this manager's (empty) parent groups, on close; kept while another Sandbox of
    this process still has groups there."""
    deadline = time.monotonic() + 1.0
    for root in support.roots:
        parent = f"{root}/{PREFIX}/{manager}"
        try:
            if any(os.path.isdir(f"{parent}/{x}") for x in os.listdir(parent)):
                continue
        except OSError:
            continue
        _remove_group(parent, deadline)


def _candidate_roots() -> list[str]:
    """Every hierarchy that may hold our groups, whatever this run's probe chose."""
    roots = [ROOT] + [f"{ROOT}/{d}" for d in sorted(os.listdir(ROOT))] if os.path.isdir(ROOT) else []
    return [r for r in roots if os.path.isdir(f"{r}/{PREFIX}")]


def sweep_orphans() -> int:
    """Remove groups left by managers that no longer run. Returns how many were removed."""
    removed = 0
    for root in _candidate_roots():
        base = f"{root}/{PREFIX}"
        try:
            managers = os.listdir(base)
        except OSError:
            continue
        for tag in managers:
            mdir = f"{base}/{tag}"
            if not os.path.isdir(mdir) or manager_alive(tag):
                continue
            deadline = time.monotonic() + 2.0
            for child in os.listdir(mdir):
                if os.path.isdir(f"{mdir}/{child}"):
                    removed += _remove_group(f"{mdir}/{child}", deadline)
            removed += _remove_group(mdir, deadline)
    return removed


def manager_alive(tag: str) -> bool:
    """Whether the manager a ``manager_tag`` names still runs (the same pid and start time)."""
    pid, _, start = tag.partition("-")
    return pid.isdigit() and process_start_time(int(pid)) == start
