"""Workspace set-up for a GRPO group: n forks of one template session vs n fresh sessions.

A group's n episodes start from one workspace. Two ways to give each its own copy, measured in
one run on one ``Sandbox``, interleaved round by round so that background load hits both alike:

- ``fork``: the template is set up once (``sb.session(files=...)``), then each workspace is
  ``template.fork()`` (one fork-server call; the fork reads the template's layers, nothing copied).
- ``fresh``: each workspace is ``sb.session(files=...)`` with the same files (sent to the server,
  written by a task, snapshotted), as without forks.

The files: 50 files of 4 KB plus one 5 MB file. Reported: p50 milliseconds per workspace of each
(``fork_setup_ms``, ``fresh_setup_ms``) and their ratio (``fork_setup_ratio``, fork / fresh);
``fork_setup_amortized_ms``, the template's own set-up spread over the n forks plus a fork's p50
(what a group pays per episode); and the p50 of the first command in each kind of workspace
(``first_exec_fork_ms``, ``first_exec_fresh_ms``), which shows whether a fork's deeper overlay
costs its executions anything. The load average is recorded at start and end: figures taken on
a busy machine are provisional.

Run: ``nice -n 5 python benchmarks/session_fork.py [--n 8 --rounds 5]``. The last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from posttrain.sandbox import Limits, Sandbox


def workspace_files() -> dict[str, bytes]:
    files = {f"src/f{i:02d}.txt": bytes([65 + i % 26]) * 4096 for i in range(50)}
    files["data/blob.bin"] = os.urandom(5 << 20)
    return files


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8, help="workspaces per group")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    files = workspace_files()
    limits = Limits(wall_s=30, cpu_s=30, memory_mb=256, disk_mb=64, output_bytes=1 << 16)
    load_start = os.getloadavg()
    fork_ms: list[float] = []
    fresh_ms: list[float] = []
    template_ms: list[float] = []
    first_fork: list[float] = []
    first_fresh: list[float] = []
    check = "test $(ls src | wc -l) = 50 && test $(stat -c %s data/blob.bin) = 5242880"
    with Sandbox(limits) as sb:
        sb.session().close()  # the server is warm before anything is timed
        for r in range(args.rounds):
            for kind in (("fork", "fresh") if r % 2 == 0 else ("fresh", "fork")):
                sessions = []
                if kind == "fork":
                    t0 = time.perf_counter()
                    template = sb.session(files=files)
                    template_ms.append(_ms(t0))
                    for _ in range(args.n):
                        t0 = time.perf_counter()
                        sessions.append(template.fork())
                        fork_ms.append(_ms(t0))
                else:
                    template = None
                    for _ in range(args.n):
                        t0 = time.perf_counter()
                        sessions.append(sb.session(files=files))
                        fresh_ms.append(_ms(t0))
                for s in sessions:
                    t0 = time.perf_counter()
                    out = s.exec(check)
                    (first_fork if kind == "fork" else first_fresh).append(_ms(t0))
                    if not out.ok:
                        raise SystemExit(f"{kind} workspace is wrong: {out}")
                    s.close()
                if template is not None:
                    template.close()
    load_end = os.getloadavg()
    p50 = statistics.median
    fork, fresh = p50(fork_ms), p50(fresh_ms)
    amortized = p50(template_ms) / args.n + fork
    print(f"load average at start {load_start}, at end {load_end}, {os.cpu_count()} cpus")
    print(f"{args.n} workspaces x {args.rounds} rounds; files: 50 x 4 KB + 5 MB")
    print(f"fork:  p50 {fork:8.2f} ms per workspace (template set-up p50 {p50(template_ms):.1f} ms once per group; "
          f"amortized {amortized:.2f} ms)")
    print(f"fresh: p50 {fresh:8.2f} ms per workspace")
    print(f"fork / fresh = {fork / fresh:.4f}; amortized / fresh = {amortized / fresh:.3f}")
    print(f"first command: fork p50 {p50(first_fork):.2f} ms, fresh p50 {p50(first_fresh):.2f} ms")
    print(json.dumps({"n": args.n, "rounds": args.rounds, "cpus": os.cpu_count(),
                      "load_avg_start": round(load_start[0], 2),
                      "fork_setup_ms": round(fork, 3), "fresh_setup_ms": round(fresh, 3),
                      "fork_setup_ratio": round(fork / fresh, 4),
                      "fork_setup_amortized_ms": round(amortized, 3),
                      "first_exec_fork_ms": round(p50(first_fork), 3),
                      "first_exec_fresh_ms": round(p50(first_fresh), 3),
                      "load_avg_end": round(load_end[0], 2)}))


if __name__ == "__main__":
    main()
