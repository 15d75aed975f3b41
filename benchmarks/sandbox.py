"""Sandbox speed, as ratios against plain process start-up, measured in one run.

Measures (medians of several rounds, every variant interleaved so that background load
hits all of them alike):
- p50 latency of an isolated ``python3 -c pass`` (fork-server + namespaces + cgroups +
  seccomp + execve) against plain ``subprocess.run([python3, "-c", "pass"])``;
- p50 latency of the pre-forked confined interpreter (``prefork=True``: fork + namespaces,
  no interpreter start-up) against the same baseline;
- throughput of trivial isolated executions on this machine's cores (asyncio pool), at each
  in-flight level of ``--throughput-concurrency`` (default 4 and 8; the best median is the
  headline, and every level's median is printed);
- CPU milliseconds per execution across every process involved (manager, fork-server,
  task), which hardly depends on background load, and the capacity it implies
  (cores / CPU time per execution) for when the cores are the sandbox's alone.

Run: ``nice -n 10 python benchmarks/sandbox.py [--rounds 5 --samples 20 --tasks 300]``.
The last printed line is one JSON object with ``latency_ratio``, ``latency_ratio_prefork``
and ``throughput_per_s`` (the pre-forked mode, the fast path for RL rewards) plus the rest.
Targets from the issue: latency_ratio <= 1.5, latency_ratio_prefork <= 1.0, throughput >= 150/s on 2 cores.
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

from posttrain.sandbox import ExecStatus, Sandbox, SandboxPool


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def latency(sb: Sandbox, rounds: int, samples: int) -> dict[str, float]:
    variants = {
        "plain": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
        "isolated": lambda: _check(sb.run(code="pass")),
        "prefork": lambda: _check(sb.run(code="pass", prefork=True)),
        "isolated_true": lambda: _check(sb.run(["true"])),
        "plain_true": lambda: subprocess.run(["true"], check=True),
    }
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
    med = {k: statistics.median(v) * 1000 for k, v in per_round.items()}
    ratios = {
        "latency_ratio": statistics.median(i / p for i, p in zip(per_round["isolated"], per_round["plain"])),
        "latency_ratio_prefork": statistics.median(i / p for i, p in zip(per_round["prefork"], per_round["plain"])),
    }
    return {**{f"p50_ms_{k}": round(v, 2) for k, v in med.items()}, **{k: round(v, 3) for k, v in ratios.items()}}


def _server_pids(sb: Sandbox) -> list[int]:
    """Host PIDs of the fork-server: its outer process and the namespace init below it."""
    outer = sb._server.proc.pid
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


def cpu_cost(sb: Sandbox, n: int) -> dict[str, float]:
    """CPU milliseconds per execution, all processes involved: unlike wall time this hardly
    depends on what else the machine is running."""
    pids = _server_pids(sb)
    out = {}
    for name, fn in (("plain", lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)),
                     ("isolated", lambda: _check(sb.run(code="pass"))),
                     ("prefork", lambda: _check(sb.run(code="pass", prefork=True)))):
        t0, s0 = os.times(), _cpu_s(pids)
        for _ in range(n):
            fn()
        t1, s1 = os.times(), _cpu_s(pids)
        own = (t1.user - t0.user) + (t1.system - t0.system) + (t1.children_user - t0.children_user) + (
            t1.children_system - t0.children_system)
        out[f"cpu_ms_per_exec_{name}"] = round(1000 * (own + s1 - s0) / n, 2)
    return out


def _check(r) -> None:
    if r.status is not ExecStatus.OK:
        raise RuntimeError(f"benchmark execution failed: {r}")


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


def plain_throughput(tasks: int, concurrency: int) -> float:
    async def one(sem):
        async with sem:
            p = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
            await p.wait()

    async def go() -> float:
        sem = asyncio.Semaphore(concurrency)
        t = time.perf_counter()
        await asyncio.gather(*(one(sem) for _ in range(tasks)))
        return tasks / (time.perf_counter() - t)

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=4, help="for the latency and CPU measurements")
    ap.add_argument("--throughput-concurrency", default="4,8",
                    help="in-flight executions tried for throughput; the best median is the headline")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    levels = [int(c) for c in args.throughput_concurrency.split(",")]
    with Sandbox(max_concurrency=max([args.concurrency, *levels])) as sb:
        lat = latency(sb, args.rounds, args.samples)
        lat.update(cpu_cost(sb, 4 * args.samples))
        lat["cpu_ratio"] = round(lat["cpu_ms_per_exec_isolated"] / lat["cpu_ms_per_exec_plain"], 3)
        lat["cpu_ratio_prefork"] = round(lat["cpu_ms_per_exec_prefork"] / lat["cpu_ms_per_exec_plain"], 3)
        lat["capacity_per_s_prefork"] = round(cores * 1000 / lat["cpu_ms_per_exec_prefork"], 1)
        print(f"cores={cores} load={os.getloadavg()[0]:.2f}")
        for k, v in lat.items():
            print(f"  {k:28s} {v}")
        tp = {}
        for name, kw in (("prefork", dict(code="pass", prefork=True)), ("isolated_python", dict(code="pass")),
                         ("isolated_true", dict(command=["true"]))):
            best = 0.0
            for level in levels:
                throughput(sb, max(20, args.tasks // 5), level, **kw)  # warm the pool's workers at this level
                runs = [throughput(sb, args.tasks, level, **kw) for _ in range(3)]
                tp[f"throughput_per_s_{name}_c{level}"] = round(statistics.median(runs), 1)
                best = max(best, statistics.median(runs))
            tp[f"throughput_per_s_{name}"] = round(best, 1)
        tp["throughput_per_s_plain_python"] = round(statistics.median(
            plain_throughput(args.tasks, args.concurrency) for _ in range(3)), 1)
        for k, v in tp.items():
            print(f"  {k:28s} {v}")
    out = {"latency_ratio": lat["latency_ratio"], "latency_ratio_prefork": lat["latency_ratio_prefork"],
           "throughput_per_s": tp["throughput_per_s_prefork"], "cores": cores,
           "load_avg_1m": round(os.getloadavg()[0], 2), **lat, **tp}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
