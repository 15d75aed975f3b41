"""Sandbox speed against like-for-like baselines, measured in one run.

Every comparison runs the same interpreter binary on both sides: the one sandboxed tasks run
(``task_python()``, which is ``sys.executable``, a virtual environment in /tmp included; the
run stops if the two differ). Measures (medians of several rounds, every variant interleaved
so that background load hits all of them alike):

- ``latency_ratio``: p50 latency of an isolated ``python -I -S -c pass`` (fork-server +
  namespaces + cgroups + seccomp + execve) over plain ``subprocess.run`` of the very same argv.
  ``-I -S`` (no ``site``, no user site, no ``PYTHON*`` variables) is the clean interpreter: what
  is left is the interpreter's own start-up, so the ratio is the isolation's cost and not that of
  whatever ``.pth`` hooks this machine's site-packages run.
- ``latency_ratio_default_interpreter``: the same with the default flags (``-c pass``, ``site``
  and its ``.pth`` files included), as a user's ``code=`` runs; the machine's own default.
- ``prefork_ms``: the pre-forked confined interpreter (``prefork=True``: fork + namespaces +
  cgroups + seccomp, no interpreter start-up), in absolute milliseconds, beside
  ``warm_fork_ms``: a plain ``os.fork`` of a warm interpreter running the same code (same
  binary, same ``-s -S`` flags and same imported modules as the fork-server, no isolation),
  round trip from this process over a pipe. Their difference is what isolation adds to a fork.
- throughput of trivial isolated executions (pre-forked ``pass``, and a clean ``python -I -S -c
  pass`` command) at 2, 4 and 8 in flight, every level reported; ``throughput_per_s`` is the
  pre-forked mode (the fast path for RL rewards) at concurrency 4, fixed in advance.
- CPU milliseconds per execution across every process involved (manager, fork-server, task;
  for the warm-fork baseline, this process, the helper and its children), which hardly depends
  on background load, and the capacity it implies (cores / CPU time per execution) for when the
  cores are the sandbox's alone.
- the load average (1, 5, 15 min) at start and end: figures taken on a busy machine are
  provisional.

Run: ``nice -n 5 python benchmarks/sandbox.py [--rounds 5 --samples 20 --tasks 300]``.
The last printed line is one JSON object; goals from the issue: ``latency_ratio`` <= 1.5,
``throughput_per_s`` >= 150 on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import posttrain
from posttrain.sandbox import ExecStatus, Sandbox, SandboxPool
from posttrain.sandbox.sandbox import task_python

CLEAN = ("-I", "-S")
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # -I ignores PYTHON* anyway
PACKAGE_ROOT = str(Path(posttrain.__file__).resolve().parents[1])  # as the fork-server's PYTHONPATH

# The warm-fork baseline: an interpreter started as the fork-server is (same binary, -s -S, the same
# modules imported, site-packages on sys.path without running .pth files) that forks a child per
# request; the child runs the code and exits. No namespaces, cgroups, seccomp or status protocol.
WARM_FORK = r"""
import os, sys
import posttrain.sandbox._server as server
server.add_site_paths()
code = compile(sys.argv[1], "<string>", "exec")
while os.read(0, 1):
    pid = os.fork()
    if pid == 0:
        exec(code, {"__name__": "__main__"})
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    os.write(1, bytes([os.waitstatus_to_exitcode(status) & 0xFF]))
"""


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _check(r) -> None:
    if r.status is not ExecStatus.OK:
        raise RuntimeError(f"benchmark execution failed: {r}")


class WarmFork:
    """A warm interpreter that forks once per ``run()``."""

    def __init__(self, exe: str, code: str):
        env = {"PYTHONHASHSEED": "0", "PYTHONPATH": PACKAGE_ROOT, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONNOUSERSITE": "1"}
        self.proc = subprocess.Popen([exe, "-s", "-S", "-c", WARM_FORK, code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0, env=env, cwd="/")

    def run(self) -> None:
        self.proc.stdin.write(b"x")
        if self.proc.stdout.read(1) != b"\0":
            raise RuntimeError("warm-fork baseline: the child failed")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def latency(sb: Sandbox, exe: str, rounds: int, samples: int) -> dict[str, float]:
    warm = WarmFork(exe, "pass")
    variants = {
        "plain_clean": lambda: subprocess.run([exe, *CLEAN, "-c", "pass"], check=True, env=CLEAN_ENV),
        "isolated_clean": lambda: _check(sb.run([exe, *CLEAN, "-c", "pass"])),
        "plain_default": lambda: subprocess.run([exe, "-c", "pass"], check=True),
        "isolated_default": lambda: _check(sb.run(code="pass")),
        "prefork": lambda: _check(sb.run(code="pass", prefork=True)),
        "warm_fork": warm.run,
        "plain_true": lambda: subprocess.run(["true"], check=True),
        "isolated_true": lambda: _check(sb.run(["true"])),
    }
    try:
        for fn in variants.values():  # warm caches
            fn()
        per_round: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(rounds):
            xs: dict[str, list[float]] = {k: [] for k in variants}
            for _ in range(samples):
                for k, fn in variants.items():
                    xs[k].append(_time(fn))
            for k in variants:
                per_round[k].append(statistics.median(xs[k]))
    finally:
        warm.close()
    med = {k: statistics.median(v) * 1000 for k, v in per_round.items()}

    def ratio(num: str, den: str) -> float:
        return round(statistics.median(i / p for i, p in zip(per_round[num], per_round[den], strict=True)), 3)

    return {
        "latency_ratio": ratio("isolated_clean", "plain_clean"),
        "latency_ratio_default_interpreter": ratio("isolated_default", "plain_default"),
        "prefork_ms": round(med["prefork"], 2),
        "warm_fork_ms": round(med["warm_fork"], 2),
        "prefork_overhead_ms": round(med["prefork"] - med["warm_fork"], 2),
        **{f"p50_ms_{k}": round(v, 2) for k, v in med.items()},
    }


def _server_pids(sb: Sandbox) -> list[int]:
    """Host PIDs of the fork-server: its outer process and the namespace init below it."""
    outer = sb.server_pid
    assert outer is not None
    pids = [outer]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == outer:
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def _cpu_s(pids: list[int]) -> float:
    """utime+stime+cutime+cstime of ``pids`` (children they reaped included)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def cpu_cost(sb: Sandbox, exe: str, n: int) -> dict[str, float]:
    """CPU milliseconds per execution, all processes involved: unlike wall time this hardly
    depends on what else the machine is running."""
    server = _server_pids(sb)
    warm = WarmFork(exe, "pass")
    warm.run()
    out = {}
    try:
        for name, fn, pids in (
                ("plain_clean", lambda: subprocess.run([exe, *CLEAN, "-c", "pass"], check=True, env=CLEAN_ENV), []),
                ("isolated_clean", lambda: _check(sb.run([exe, *CLEAN, "-c", "pass"])), server),
                ("prefork", lambda: _check(sb.run(code="pass", prefork=True)), server),
                ("warm_fork", warm.run, [warm.proc.pid])):
            t0, s0 = os.times(), _cpu_s(pids)
            for _ in range(n):
                fn()
            t1, s1 = os.times(), _cpu_s(pids)
            own = (t1.user - t0.user) + (t1.system - t0.system) + (t1.children_user - t0.children_user) + (
                t1.children_system - t0.children_system)
            out[f"cpu_ms_per_exec_{name}"] = round(1000 * (own + s1 - s0) / n, 2)
    finally:
        warm.close()
    return out


def throughput(sb: Sandbox, tasks: int, concurrency: int, **kwargs) -> float:
    pool = SandboxPool(sb, max_concurrency=concurrency)

    async def go() -> float:
        t = time.perf_counter()
        rs = await pool.map([kwargs] * tasks)
        elapsed = time.perf_counter() - t
        bad = [r for r in rs if r.status is not ExecStatus.OK]
        if bad:
            raise RuntimeError(f"{len(bad)} failed: {bad[0]}")
        return tasks / elapsed

    return asyncio.run(go())


def plain_throughput(exe: str, tasks: int, concurrency: int) -> float:
    async def one(sem):
        async with sem:
            p = await asyncio.create_subprocess_exec(exe, *CLEAN, "-c", "pass", env=CLEAN_ENV)
            await p.wait()

    async def go() -> float:
        sem = asyncio.Semaphore(concurrency)
        t = time.perf_counter()
        await asyncio.gather(*(one(sem) for _ in range(tasks)))
        return tasks / (time.perf_counter() - t)

    return asyncio.run(go())


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3, help="throughput runs per mode and level (median reported)")
    args = ap.parse_args()
    load_start = _load()
    cores = len(os.sched_getaffinity(0))
    exe = task_python()
    if exe != os.path.abspath(sys.executable):
        raise SystemExit(f"tasks run {exe}, not this interpreter ({sys.executable}): no like-for-like baseline here")
    levels = (2, 4, 8)
    with Sandbox(max_concurrency=max(levels)) as sb:
        lat = latency(sb, exe, args.rounds, args.samples)
        lat.update(cpu_cost(sb, exe, 4 * args.samples))
        lat["cpu_ratio"] = round(lat["cpu_ms_per_exec_isolated_clean"] / lat["cpu_ms_per_exec_plain_clean"], 3)
        lat["capacity_per_s_prefork"] = round(cores * 1000 / lat["cpu_ms_per_exec_prefork"], 1)
        print(f"cores={cores} load={load_start} interpreter={exe}")
        for k, v in lat.items():
            print(f"  {k:36s} {v}")
        tp: dict[str, float] = {}
        for name, kw in (("prefork", dict(code="pass", prefork=True)),
                         ("isolated_clean", dict(command=[exe, *CLEAN, "-c", "pass"]))):
            for level in levels:
                throughput(sb, max(args.tasks // 5, min(20, args.tasks)), level, **kw)  # warm the pool at this level
                runs = [throughput(sb, args.tasks, level, **kw) for _ in range(args.repeats)]
                tp[f"throughput_per_s_{name}_c{level}"] = round(statistics.median(runs), 1)
        tp["throughput_per_s_plain_clean_c4"] = round(statistics.median(
            plain_throughput(exe, args.tasks, 4) for _ in range(args.repeats)), 1)
        for k, v in tp.items():
            print(f"  {k:36s} {v}")
    out = {"latency_ratio": lat["latency_ratio"], "throughput_per_s": tp["throughput_per_s_prefork_c4"],
           "throughput_per_s_c2": tp["throughput_per_s_prefork_c2"],
           "throughput_per_s_c8": tp["throughput_per_s_prefork_c8"],
           "prefork_ms": lat["prefork_ms"], "warm_fork_ms": lat["warm_fork_ms"],
           "latency_ratio_default_interpreter": lat["latency_ratio_default_interpreter"],
           "load_avg_start": load_start, "load_avg_end": _load(), "cores": cores, "interpreter": exe,
           **lat, **tp}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
