"""How many cores each phase of a synchronous step keeps busy, and the bound that puts on any overlap.

Runs `posttrain train CONFIG` synchronously (default `examples/code.toml`: unit tests in the sandbox) for
`--steps` steps, no evaluation, and reads the CPU time of this run's own processes (this process, its live
descendants and the reaped ones: the learner, its engine, the sandbox's processes; `psutil`, so other jobs on
the machine are not counted; the machine-wide `/proc/stat` figure is printed beside it) around the rollout
phase (`Trainer.collect`: sampling and verification) and the learning phase (`Learner.update`). The first
5 steps are a warm-up, not counted.

What it tells: with C CPU-seconds of work per step on P cores, no schedule of the same work (asynchronous
or not) takes less than C / P seconds a step. It is an equal-steps bound: `async_time_ratio` at equal
steps is >= (C / P) / (synchronous step seconds); an asynchronous run that needs more steps to the same
gain (staleness) sits further above it. Busy time counts OpenMP spin-waiting as work; run it also
with `OMP_NUM_THREADS=1` (nothing spins) or `OMP_WAIT_POLICY=PASSIVE` to see the work alone. Last line: one JSON object.

    python benchmarks/phase_cpu.py [--config examples/code.toml] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from posttrain.config import load_config
from posttrain.rl.trainer import Trainer

WARMUP = 5


def machine_busy_seconds() -> float:
    """CPU seconds every core has spent not idle since boot (the first line of /proc/stat): every process."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


def run_cpu_seconds() -> float:
    """CPU seconds of this process, its reaped children and its live descendants (this run's work only)."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.Error:  # it ended between the listing and the read: its time is in children_* once reaped
            continue
        total += c.user + c.system
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "examples" / "code.toml"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "posttrain-async-bench-cache"),
                    help="model.base.cache_dir (benchmarks/async.py's by default)")
    args = ap.parse_args()
    if args.steps <= WARMUP:
        raise SystemExit(f"--steps must be > {WARMUP} (the first {WARMUP} are a warm-up)")
    with tempfile.TemporaryDirectory() as run:
        cfg = load_config(args.config, [f"run_dir='{run}'", f"train.steps={args.steps}", "eval.every=0",
                                        "train.checkpoint_every=0", "tensorboard=false",
                                        f"model.base.cache_dir='{args.cache}'"])
        trainer = Trainer(cfg, overwrite=True)
        phases = {"rollout": [0.0, 0.0, 0.0], "learn": [0.0, 0.0, 0.0]}  # wall, this run's CPU, machine-wide CPU

        def timed(name, fn):
            def wrapper(*a, **k):
                b, m, t = run_cpu_seconds(), machine_busy_seconds(), time.perf_counter()
                out = fn(*a, **k)
                phases[name][0] += time.perf_counter() - t
                phases[name][1] += run_cpu_seconds() - b
                phases[name][2] += machine_busy_seconds() - m
                return out
            return wrapper

        trainer.collect = timed("rollout", trainer.collect)
        trainer.learner.update = timed("learn", trainer.learner.update)
        load_start = os.getloadavg()
        for step in range(args.steps):
            trainer.train_step()
            if step == WARMUP - 1:
                for v in phases.values():
                    v[:] = [0.0, 0.0, 0.0]
        trainer.close()
    n, cores = args.steps - WARMUP, os.cpu_count() or 1
    out: dict = {"config": args.config, "steps_counted": n, "cores": cores,
                 "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    for name, (wall, cpu, machine) in phases.items():
        out[f"{name}_ms"] = round(1e3 * wall / n, 1)
        out[f"{name}_cpu_ms"] = round(1e3 * cpu / n, 1)
        out[f"{name}_machine_cpu_ms"] = round(1e3 * machine / n, 1)
        out[f"{name}_cores_busy"] = round(cpu / wall, 2)
        print(f"{name}: {1e3 * wall / n:.0f} ms a step, {1e3 * cpu / n:.0f} ms of this run's CPU "
              f"({1e3 * machine / n:.0f} machine-wide), {cpu / wall:.2f} cores busy")
    wall, cpu, machine = (sum(v[i] for v in phases.values()) for i in (0, 1, 2))
    out.update(step_ms=round(1e3 * wall / n, 1), step_cpu_ms=round(1e3 * cpu / n, 1),
               overlap_floor_ratio=round(cpu / cores / wall, 3),
               overlap_floor_ratio_machine=round(machine / cores / wall, 3),
               load_start=load_start, load_end=os.getloadavg())
    print(f"step: {1e3 * wall / n:.0f} ms, {1e3 * cpu / n:.0f} ms of this run's CPU: at equal steps no schedule on "
          f"{cores} cores is below {cpu / cores / wall:.2f} of it")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
