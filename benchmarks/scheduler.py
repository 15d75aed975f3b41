"""The multi-domain task scheduler, measured: simulations first (cheap), real runs behind flags.

Simulation figures (no model; the scheduler's own code makes every decision):
  informative_frac  share of sampled groups with reward variance, scheduler (uniform sampling's beside it), on
                    500 synthetic domains whose tasks' pass rates rise with practice (a domain learns only from
                    groups with variance, GRPO's signal); some domains too hard to learn, some solved already
  steps_ratio       steps until the learnable domains' mean pass rate reaches the target: scheduler / uniform
  utilisation       busy share of W rollout workers with 10% long tasks (>= 30x the median duration, log-normal):
                    the scheduler's long lane with cost-based classification, streaming steps (FIFO's beside it:
                    a batch of B drawn alike, each step waiting for its slowest rollout)
  tail_frac         share of a step's rollout wall time spent on its last 10% of rollouts (lane vs FIFO)
  decision_us_p50   one fresh draw (`TaskScheduler.draw`) at 500 domains and 1M tasks seen
  scheduler_mb      the scheduler's memory at 500 domains and 1M tasks seen (every object it references, counted
                    once; the process's RSS growth, which also holds freed garbage, beside it)
Real runs (`--real-smoke`): the built-in model over the glob expansion of many domains, a few dozen steps,
killed and resumed, wasted_frac (rollouts on domains that never produced a passing sample, after their first 50).
Not implemented as measured runs here (printed as null): async_time_ratio, tokens_ratio, failure_suite_gain,
real_gain_ratio; they need hours of CPU (see benchmarks/RESULTS.md). failure_suite_gain is measured by
benchmarks/failure_loop.py, real_gain_ratio by benchmarks/scheduler_gain.py.

    python benchmarks/scheduler.py [--seeds 1 2] [--quick] [--real-smoke]
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import resource
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from posttrain.scheduler.lanes import plan_starts
from posttrain.scheduler.task_scheduler import DomainSpec, SchedulerSettings, TaskScheduler
from posttrain.types import DOMAIN_KEY, Completion, FinishReason, Group, Task, Trajectory, Verdict

N_DOMAINS = 500
TASKS_PER_DOMAIN = 2000  # 1M tasks in all
GROUP = 8
BATCH = 64


# ---------------------------------------------------------------- synthetic domains
@dataclass
class SynthSource:
    """A finite pool of tasks generated on demand (ids only: no task objects held)."""

    domain: int
    size: int

    def sample(self, rng: random.Random, split: str = "train") -> Task:
        return Task(f"d{self.domain}:{rng.randrange(self.size)}", "", None, {})

    def take(self, n: int, split: str = "held_out", seed: int = 0) -> list[Task]:
        return []


class World:
    """500 domains: competence c_d rises by `eta` with each informative group; task i of domain d has difficulty
    b[d, i]; pass probability sigmoid(c_d - b[d, i]). 60% learnable, 20% too hard (never pass), 20% solved."""

    def __init__(self, seed: int, eta: float = 0.04) -> None:
        g = np.random.default_rng(seed)
        kind = g.choice(3, size=N_DOMAINS, p=[0.6, 0.2, 0.2])  # 0 learnable, 1 too hard, 2 solved
        centre = np.where(kind == 0, g.uniform(0.5, 3.0, N_DOMAINS), np.where(kind == 1, 12.0, -12.0))
        self.b = centre[:, None] + g.normal(0.0, 1.5, (N_DOMAINS, TASKS_PER_DOMAIN))
        self.c = np.zeros(N_DOMAINS)
        self.learnable = kind == 0
        self.eta = eta
        self.rng = g

    def p(self, d: int, i: int) -> float:
        return 1.0 / (1.0 + math.exp(-(self.c[d] - self.b[d, i])))

    def play(self, d: int, i: int) -> int:
        passes = int(self.rng.binomial(GROUP, self.p(d, i)))
        if 0 < passes < GROUP:
            self.c[d] += self.eta
        return passes

    def competence(self) -> float:
        """Mean pass rate over the learnable domains' tasks."""
        p = 1.0 / (1.0 + np.exp(-(self.c[self.learnable, None] - self.b[self.learnable])))
        return float(p.mean())


# chosen on seed 0 (the selection seed; figures are reported on other seeds): revisit and recheck_every from
# {0.5, 0.8, 0.9} x {50, 100} (seed 0: informative 0.735 / 0.795 / 0.833; steps 370 / 340 / 330), then
# domain_floor 0.01 (0.856, 320), min_attempts 8 (0.829, 330), both with revisit 0.95 (0.870, 320)
# Then (2026-12-06, on seed 0 only: world seed 0 with scheduler seeds 0/100/200, informative share, mean of three):
# the Beta posterior alone 0.865; task_model "ability" (a Rasch model per domain) with revisits of the weightiest
# pool task not out already, ability_drift 0.01, difficulty_var 4: 0.878 with retirement by counts (min_attempts
# 8), 0.889 without it (now the ability model's rule), 0.883 with domain_floor 0.01 instead of 0.002, 0.878 / 0.866
# with revisit 0.98 / 1.0; on an earlier variant (revisits by a tournament of 16 pool tasks): ability_drift 0.003 /
# 0.03 / 0.1 / 0.3 gave 0.872 / 0.885 / 0.879 / 0.877 (0.01: 0.883), difficulty_var 2 / 8 gave 0.881 / 0.872;
# weighting domains by their best task's worth, or a revisit threshold above the unseen weight: within +-0.005
SIM_SETTINGS = SchedulerSettings(min_attempts=8, recheck_every=100, retire_after_groups=4, retire_informative=0.05,
                                 replay_share=0.0, revisit=0.95, domain_floor=0.002, task_model="ability",
                                 ability_drift=0.01, difficulty_var=4.0)
_COMPLETION = Completion([1], "x", [0.0], FinishReason.STOP, 0)


def synth_group(task: Task, passes: int, n: int = GROUP) -> Group:
    return Group(task, [Trajectory.single_turn(task, [1], _COMPLETION, Verdict(float(j < passes), j < passes, verifier="s"))
                        for j in range(n)])


def parse(task_id: str) -> tuple[int, int]:
    d, i = task_id[1:].split(":")
    return int(d), int(i)


def run_learning(seed: int, policy: str, target: float, max_steps: int) -> tuple[float, int | None]:
    """(informative share of sampled groups, steps to reach `target` competence or None)."""
    world = World(seed)
    rng = random.Random(seed)
    sched = None
    if policy == "scheduler":
        specs = [DomainSpec(f"d{d}", SynthSource(d, TASKS_PER_DOMAIN)) for d in range(N_DOMAINS)]
        sched = TaskScheduler(specs, SIM_SETTINGS, seed=seed)
    informative = total = 0
    reached = None
    for step in range(1, max_steps + 1):
        if sched is not None:
            sched.set_step(step)
            tasks = sched.sample(BATCH)
            ids = [parse(t.id) for t in tasks]
        else:
            ids = [(rng.randrange(N_DOMAINS), rng.randrange(TASKS_PER_DOMAIN)) for _ in range(BATCH)]
            tasks = []
        outcomes = [world.play(d, i) for d, i in ids]
        informative += sum(0 < p < GROUP for p in outcomes)
        total += len(outcomes)
        if sched is not None:
            sched.update([synth_group(t, p) for t, p in zip(tasks, outcomes)])
        if step % 10 == 0 and reached is None and world.competence() >= target:
            reached = step
            break
    return informative / total, reached


# ---------------------------------------------------------------- durations, lanes
def durations(seed: int, n: int, long_share: float = 0.1) -> list[tuple[str, float]]:
    """(domain, seconds): 500 domains, log-normal durations; the long domains' median is 30-100x the others'."""
    g = random.Random(seed)
    scale = {f"d{d}": (g.uniform(30, 100) if d < long_share * N_DOMAINS else 1.0) for d in range(N_DOMAINS)}
    names = list(scale)
    return [(dom, scale[dom] * g.lognormvariate(0.0, 0.5)) for dom in (g.choice(names) for _ in range(n))]


def fifo(tasks: list[tuple[str, float]], workers: int, batch: int) -> tuple[float, float]:
    """Synchronous steps: each step's batch on the workers (earliest free first), the step waits for the last."""
    busy = wall = 0.0
    tails = []
    for s in range(0, len(tasks) - batch + 1, batch):
        free = [0.0] * workers
        ends = []
        for _, dur in tasks[s:s + batch]:
            free.sort()
            free[0] += dur
            ends.append(free[0])
            busy += dur
        ends.sort()
        span = ends[-1]
        wall += span
        tails.append((span - ends[int(0.9 * len(ends)) - 1]) / span)
    return busy / (workers * wall), statistics.mean(tails)


def lane(tasks: list[tuple[str, float]], workers: int, batch: int, long_slots: int, warm: int = 200) -> tuple[float, float]:
    """Streaming steps with a long lane: the cost model learns each domain's duration from what finished and sends
    expected-long tasks to the lane; a step is the next `batch` finished rollouts."""
    import heapq

    from posttrain.scheduler.cost import CostModel

    cost = CostModel(long_factor=10.0)
    for dom, dur in tasks[:warm]:  # what earlier rollouts measured
        cost.observe(dom, "", dur, 0.0)
    queue = tasks[warm:]
    short_q = [t for t in queue if not cost.is_long(t[0])]
    long_q = [t for t in queue if cost.is_long(t[0])]
    si = li = 0
    running: list[tuple[float, bool, float]] = []  # (end, long, duration)
    now = busy = 0.0
    long_running = 0
    finished: list[float] = []
    horizon = None
    while True:
        plan = plan_starts(workers - len(running), long_running, len(short_q) - si, len(long_q) - li, long_slots)
        for _ in range(plan.short):
            heapq.heappush(running, (now + short_q[si][1], False, short_q[si][1]))
            si += 1
        for _ in range(plan.long):
            heapq.heappush(running, (now + long_q[li][1], True, long_q[li][1]))
            li += 1
            long_running += 1
        if not running or si >= len(short_q) - workers:  # stop while the queues still feed every worker
            horizon = now
            break
        end, is_long, dur = heapq.heappop(running)
        long_running -= is_long
        busy += dur
        now = end
        finished.append(end)
    # busy time inside [0, horizon]: finished work plus the elapsed part of what is still running
    busy += sum(horizon - (end - dur) for end, _, dur in running)
    tails = []
    for s in range(batch, len(finished) - batch + 1, batch):
        step = finished[s:s + batch]
        start = finished[s - 1]
        span = step[-1] - start
        if span > 0:
            tails.append((step[-1] - step[int(0.9 * batch) - 1]) / span)
    return busy / (workers * horizon), statistics.mean(tails)


# ---------------------------------------------------------------- scale: 500 domains, 1M tasks
def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def deep_mb(root: object) -> float:
    """Bytes held by `root` and everything it references (each object once), in MB: the scheduler's own memory,
    apart from the freed garbage an RSS figure would also count."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type) or callable(obj) and not hasattr(obj, "__dict__"):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            stack.append(vars(obj))
        elif hasattr(obj, "__slots__"):
            stack.extend(getattr(obj, a) for a in obj.__slots__ if hasattr(obj, a))
    return total / 2**20


def scale(seed: int, tasks: int) -> tuple[float, float, float]:
    gc.collect()
    before = rss_mb()
    specs = [DomainSpec(f"d{d}", SynthSource(d, tasks // N_DOMAINS)) for d in range(N_DOMAINS)]
    sched = TaskScheduler(specs, SIM_SETTINGS, seed=seed)  # the settings the simulation's figures come from
    g = random.Random(seed)
    # every task seen once (its posterior counts), through `update` in batches of groups of 2
    per = tasks // N_DOMAINS
    for d in range(N_DOMAINS):
        batch = [synth_group(Task(f"d{d}:{i}", "", None, {DOMAIN_KEY: f"d{d}"}), g.randint(0, 2), 2) for i in range(per)]
        sched.update(batch)
        sched.drain_failures()  # the trainer stores them every step; they are not the scheduler's to keep
        del batch
    gc.collect()
    rss = rss_mb() - before
    mb = deep_mb(sched)
    times = []
    for _ in range(50_000):
        t0 = time.perf_counter_ns()
        sched.draw()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000.0, mb, rss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--target", type=float, default=0.6)
    ap.add_argument("--max-steps", type=int, default=4000)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="fewer steps and tasks (a smoke of the script)")
    ap.add_argument("--skip-scale", action="store_true", help="leave out the 1M-task scale figures (printed as null)")
    ap.add_argument("--real-smoke", action="store_true", help="also the real multi-domain smoke (benchmarks/scheduler_real.py)")
    args = ap.parse_args()
    if args.quick:
        args.max_steps, args.tasks = 300, 50_000
    out: dict[str, object] = {"machine": os.uname().nodename, "load": os.getloadavg()[0], "seeds": args.seeds}

    inf_s, inf_u, ratios = [], [], []
    for seed in args.seeds:
        t0 = time.perf_counter()
        fs, steps_s = run_learning(seed, "scheduler", args.target, args.max_steps)
        fu, steps_u = run_learning(seed, "uniform", args.target, args.max_steps)
        inf_s.append(fs)
        inf_u.append(fu)
        ratio = steps_s / steps_u if steps_s and steps_u else None
        ratios.append(ratio)
        print(f"seed {seed}: informative scheduler {fs:.3f} uniform {fu:.3f}; steps to {args.target}: "
              f"scheduler {steps_s} uniform {steps_u} ratio {ratio}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    out["informative_frac"] = statistics.mean(inf_s)
    out["informative_frac_uniform"] = statistics.mean(inf_u)
    done = [r for r in ratios if r is not None]
    out["steps_ratio"] = max(done) if len(done) == len(ratios) else None  # the worst seed
    out["steps_ratio_per_seed"] = ratios

    utl, tails, utl_f, tails_f = [], [], [], []
    for seed in args.seeds:
        tasks = durations(seed, 20_000 if not args.quick else 4000)
        u, t = lane(tasks, args.workers, BATCH, long_slots=args.workers // 2)
        uf, tf = fifo(tasks, args.workers, BATCH)
        utl.append(u), tails.append(t), utl_f.append(uf), tails_f.append(tf)
        print(f"seed {seed}: utilisation lane {u:.3f} fifo {uf:.3f}; tail_frac lane {t:.3f} fifo {tf:.3f}", flush=True)
    out["utilisation"], out["utilisation_fifo"] = min(utl), statistics.mean(utl_f)
    out["tail_frac"], out["tail_frac_fifo"] = max(tails), statistics.mean(tails_f)

    if args.skip_scale:
        out["decision_us_p50"] = out["scheduler_mb"] = out["scale_tasks"] = None
    else:
        us, mb, rss = scale(args.seeds[0], args.tasks)
        print(f"scale: {N_DOMAINS} domains, {args.tasks} tasks seen: draw p50 {us:.1f} us, scheduler {mb:.0f} MB "
              f"(RSS grew {rss:.0f} MB, freed garbage included)", flush=True)
        out["decision_us_p50"], out["scheduler_mb"], out["scale_tasks"] = us, mb, args.tasks
        out["scheduler_rss_delta_mb"] = rss
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for key in ("async_time_ratio", "tokens_ratio", "failure_suite_gain", "real_gain_ratio"):
        out[key] = None  # not measured by this script's default path (benchmarks/RESULTS.md says why)
    if args.real_smoke:
        sys.path.insert(0, os.path.dirname(__file__))
        from scheduler_real import real_smoke

        out.update(real_smoke())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
