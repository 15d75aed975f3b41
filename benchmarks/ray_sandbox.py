"""Executions/s through 2 Ray sandbox workers ÷ the local sandbox pool, measured the same way in one run.

Both sides run the same batch of pre-forked Python executions (the code verifiers' fast path: ``prefork=True``,
the verifiers' preloaded modules) with the same number in flight: a local ``SandboxPool`` in this process, and a
``RaySandboxPool`` over 2 ``SandboxWorker`` actors on a local Ray cluster (each its own fork-server; half the
in-flight bound each). Rounds alternate between the sides, so background load hits both alike; the figure is the
median round. On one machine the workers share its cores, so the ratio is the Ray path's overhead (serialisation,
the actor hop), not the scale-out across nodes the backend exists for.

Run: ``nice -n 5 python benchmarks/ray_sandbox.py [--rounds 3 --tasks 200 --inflight 16]``.
The last printed line is one JSON object: ``ray_sandbox_throughput_ratio`` (Ray ÷ local), both rates, the load
average at start and end (figures from a busy machine are provisional).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

from posttrain.distributed.ray_sandbox import RaySandboxPool
from posttrain.rewards.code import PRELOAD
from posttrain.sandbox import ExecStatus, SandboxPool

WORK = "s = 0\nfor i in range(20000):\n    s += i * i\nprint(s)"  # a few ms of a typical test's Python


async def _batch(pool, tasks: int) -> float:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(pool.run(code=WORK) for _ in range(tasks)))
    dt = time.perf_counter() - t0
    bad = [r for r in results if r.status is not ExecStatus.OK]
    if bad:
        raise SystemExit(f"an execution failed: {bad[0]}")
    return tasks / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--inflight", type=int, default=16)
    args = ap.parse_args()
    import ray

    load_start = [round(x, 2) for x in os.getloadavg()]
    cores = os.cpu_count() or 1
    ray.init(address="local", num_cpus=cores, object_store_memory=200 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False)
    sandbox = {"prefork": True, "preload": PRELOAD}
    local = SandboxPool(max_concurrency=args.inflight, **sandbox)
    remote = RaySandboxPool(2, max_concurrency=args.inflight // 2, inflight=args.inflight // 2, worker_cpus=0.0,
                            **sandbox)
    try:
        asyncio.run(_batch(local, 20))  # warm both: fork-servers started, preloads imported
        asyncio.run(_batch(remote, 20))
        rates: dict[str, list[float]] = {"local": [], "ray": []}
        for r in range(args.rounds):
            for name, pool in (("local", local), ("ray", remote)) if r % 2 == 0 else (("ray", remote), ("local", local)):
                rates[name].append(asyncio.run(_batch(pool, args.tasks)))
            print(f"round {r}: local {rates['local'][-1]:.1f}/s  ray {rates['ray'][-1]:.1f}/s")
        per_worker = remote.stats().per_worker
    finally:
        remote.close()
        local.close()
        ray.shutdown()
    local_rate, ray_rate = statistics.median(rates["local"]), statistics.median(rates["ray"])
    out = {"ray_sandbox_throughput_ratio": round(ray_rate / local_rate, 3), "ray_exec_per_s": round(ray_rate, 1),
           "local_exec_per_s": round(local_rate, 1), "workers": 2, "per_worker": per_worker, "inflight": args.inflight,
           "tasks": args.tasks, "rounds": args.rounds, "cores": cores, "load_avg_start": load_start,
           "load_avg_end": [round(x, 2) for x in os.getloadavg()]}
    print(f"ray sandbox workers / local pool: {out['ray_sandbox_throughput_ratio']:.3f} "
          f"({ray_rate:.1f} vs {local_rate:.1f} executions/s, load {load_start} -> {out['load_avg_end']})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
