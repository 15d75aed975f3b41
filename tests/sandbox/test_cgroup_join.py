"""How an execution joins its cgroups: every process and thread of the task lands in its groups,
and joining costs no RCU grace period (``cgroups.join_file``)."""

from __future__ import annotations

import json
import os
import statistics
import time

from posttrain.sandbox import ExecStatus, cgroups

REPORT = """
import json, os, threading
def groups(path):
    return sorted(line.strip() for line in open(path))
seen = {}
t = threading.Thread(target=lambda: seen.update(thread=groups(f"/proc/self/task/{threading.get_native_id()}/cgroup")))
t.start(); t.join()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, json.dumps(groups("/proc/self/cgroup")).encode()); os._exit(0)
os.close(w); os.waitpid(pid, 0)
print(json.dumps({"task": groups("/proc/self/cgroup"), "child": json.loads(os.read(r, 1 << 16)), **seen}))
"""


def _group_of(lines: list[str], root: str) -> str | None:
    """The path, in ``/proc/PID/cgroup`` lines, of the group in the hierarchy mounted at ``root``."""
    v2 = os.path.exists(f"{root}/cgroup.controllers")
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (v2 and controllers == "") or (not v2 and os.path.basename(root) in controllers.split(",")):
            return path
    return None


def test_the_task_its_threads_and_children_are_in_the_execution_groups(sandbox):
    roots = cgroups.probe().roots
    assert roots, "this suite runs as root on a machine with cgroups"
    for prefork in (True, False):
        r = sandbox.run(code=REPORT, prefork=prefork)
        assert r.status is ExecStatus.OK, r
        seen = json.loads(r.stdout)
        assert seen["thread"] == seen["task"] and seen["child"] == seen["task"], seen
        for root in roots:
            path = _group_of(seen["task"], root)
            assert path is not None and path.startswith(f"/{cgroups.PREFIX}/{sandbox.manager}/t"), (root, seen)


def test_joining_after_an_idle_gap_takes_no_grace_period():
    """A single-threaded process joins a v1 group through ``tasks`` without the global lock whose
    writers wait for an RCU grace period (6-16 ms measured after 20 ms idle, through ``cgroup.procs``);
    on v2 it goes through ``cgroup.procs``."""
    support = cgroups.probe()
    # this process's own manager tag: another test process's `sweep_orphans` (pytest-xdist runs two) removes every
    # group whose tag names no live process, and a made-up tag names none
    manager = cgroups.manager_tag()
    groups = [cgroups.TaskCgroup(support, manager, f"g{i}", memory_bytes=64 << 20, pids=8) for i in range(2)]
    try:
        for root in support.roots:
            v2 = os.path.exists(f"{root}/cgroup.controllers")
            assert cgroups.join_file(root) == ("cgroup.procs" if v2 else "tasks")
            if v2:
                continue
            fds = [os.open(f"{g.paths[root]}/{cgroups.join_file(root)}", os.O_WRONLY) for g in groups]
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # one thread, whatever the test process runs
                times = []
                for i in range(6):
                    time.sleep(0.03)  # long enough for the kernel's fast path to expire
                    t = time.perf_counter()
                    os.write(fds[i % 2], b"0")
                    times.append(time.perf_counter() - t)
                os.write(w, json.dumps(times).encode())
                os._exit(0)
            os.close(w)
            os.waitpid(pid, 0)
            times = json.loads(os.read(r, 1 << 16))
            os.close(r)
            for fd in fds:
                os.close(fd)
            assert len(times) == 6 and statistics.median(times) < 0.002, (root, times)
    finally:
        for g in groups:
            assert g.close()
        cgroups.remove_manager(support, manager)
