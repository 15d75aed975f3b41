"""Published Terminal-Bench 1 and Harbor tasks run as published in posttrain's sandbox: oracles pass, doing nothing fails.

For every task directory under DIR (Harbor `task.toml` or Terminal-Bench 1 `task.yaml`), in the default sandbox
on this machine, offline unless `--network`: the oracle (`solve.sh` / `solution.sh`) then the tests, and the
do-nothing agent (an empty script) then the tests, each in a fresh workspace built from the task's Dockerfile.
- `oracle_pass_frac`: tasks whose oracle scored full marks / tasks (a task that does not load counts as failed);
- `noop_fail_frac`: tasks whose do-nothing run was judged (a verdict, not an error) and scored below full marks;
- `failing`: each task that broke either rule, with its cause (the verdict's first lines, or the load error).
The baseline of both figures is the ideal (1.0): a suite whose oracles all pass and whose do-nothing runs all
fail; there is no slower or older path to compare against. The load average is printed at start and end.

Getting the published tasks (never committed: they are others' data): `--export REPO_GIT_DIR:SUBDIR[:N[:GLOB]]`
copies the first N task directories (sorted by name, numbers numerically; only names matching GLOB) under
SUBDIR of a git checkout or bare mirror into DIR first, reading blobs with `git cat-file` (a task with an
unreadable blob is skipped and named).

Run: `nice -n 10 python benchmarks/terminal_published.py DIR [--export ...] [--network] [--jobs 2]`.
The last line is one JSON object. Goals (issue 44): oracle_pass_frac >= 0.9, noop_fail_frac = 1.0.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def export(spec: str, dest: Path) -> list[str]:
    """Copy the first N task directories under SUBDIR of a git repository into `dest`; returns problems."""
    repo, subdir, *rest = spec.split(":")
    limit = int(rest[0]) if rest and rest[0] else None
    pattern = rest[1] if len(rest) > 1 else "*"
    git = ["git", "-C", repo]
    names = subprocess.run([*git, "ls-tree", "-d", "--name-only", f"HEAD:{subdir}"], capture_output=True, text=True,
                           check=True).stdout.split()
    names = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
    names = sorted(names, key=lambda n: (len(n), n) if n.isdigit() else (0, n))[:limit]
    problems = []
    for name in names:
        listing = subprocess.run([*git, "ls-tree", "-r", "--full-tree", "HEAD", f"{subdir}/{name}/"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
        target = dest / (f"{Path(subdir).name}-{name}" if name.isdigit() else name)
        ok = True
        for line in listing:
            meta, path = line.split("\t", 1)
            mode, _, sha = meta.split()
            blob = subprocess.run([*git, "cat-file", "blob", sha], capture_output=True)
            if blob.returncode != 0:
                problems.append(f"{name}: {path}: blob not in this copy of the repository")
                ok = False
                break
            out = target / path[len(subdir) + len(name) + 2:]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(blob.stdout)
            if mode == "100755":
                out.chmod(0o755)
        if not ok and target.exists():
            subprocess.run(["rm", "-rf", str(target)], check=True)
    return problems


def first_lines(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[:n])[:400]


async def judge(sandbox, task, script: str | None, network: bool, runner=None):
    """The verdict of `script` (the oracle when None) on a fresh workspace of `task` (`TerminalVerifier`'s path),
    or in a container of the task's image when `runner` is a container engine."""
    from posttrain.tasks.terminal import judge_script
    from posttrain.types import Verdict, VerdictStatus

    if script is None and task.solution is None:
        return Verdict(0.0, False, VerdictStatus.ERROR, details="the task has no oracle solution")
    script = task.solution if script is None else script
    try:
        if runner is not None:
            from posttrain.tasks.container import judge_in_container

            return await judge_in_container(runner, task, script, network=network)
        return await judge_script(sandbox, task, script, network=network)
    except Exception as exc:  # noqa: BLE001 - a workspace that cannot be built is this task's failure
        return Verdict(0.0, False, VerdictStatus.ERROR, details=f"workspace: {exc}")


async def run_all(tasks, network: bool, jobs: int, runner=None) -> list[dict]:
    from posttrain.sandbox import Sandbox

    gate = asyncio.Semaphore(jobs)
    with Sandbox(max_concurrency=2 * jobs) as sandbox:
        async def one(task) -> dict:
            async with gate:
                t0 = time.perf_counter()
                oracle = await judge(sandbox, task, None, network, runner)
                noop = await judge(sandbox, task, "", network, runner)
                return {"task": task.id, "oracle": oracle, "noop": noop, "seconds": time.perf_counter() - t0}

        return list(await asyncio.gather(*(one(t) for t in tasks)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--export", action="append", default=[], help="REPO_GIT_DIR:SUBDIR[:N[:GLOB]], copied into DIR first")
    ap.add_argument("--network", action="store_true", help="tasks get the host's network (default: offline)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--environment", choices=("sandbox", "podman", "docker"), default="sandbox",
                    help="where tasks run: posttrain's sandbox, or a container of the task's image")
    ap.add_argument("--base", help="with a container engine: a local image replacing each Dockerfile's first FROM")
    ap.add_argument("--only", help="only task directories whose name matches this glob")
    args = ap.parse_args()
    from posttrain.tasks.harbor import TaskLoadError, load_terminal_suite
    from posttrain.types import VerdictStatus

    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    args.dir.mkdir(parents=True, exist_ok=True)
    for spec in args.export:
        for problem in export(spec, args.dir):
            print(f"export: {problem}", file=sys.stderr)
    errors: list[TaskLoadError] = []
    tasks = load_terminal_suite(args.dir, errors=errors)
    if args.only:
        tasks = [t for t in tasks if fnmatch.fnmatchcase(t.id, args.only)]
        errors = [e for e in errors if fnmatch.fnmatchcase(Path(e.path).name, args.only)]
    runner = None
    if args.environment != "sandbox":
        from posttrain.tasks.container import EngineRunner

        runner = EngineRunner(args.environment, base=args.base)
    t0 = time.perf_counter()
    rows = asyncio.run(run_all(tasks, args.network, args.jobs, runner))
    failing: dict[str, str] = {Path(e.path).name: f"does not load: {e.message}" for e in errors}
    oracle_pass = noop_fail = 0
    for row in rows:
        o, n = row["oracle"], row["noop"]
        o_ok = o.passed
        n_ok = n.status is VerdictStatus.OK and not n.passed
        oracle_pass += o_ok
        noop_fail += n_ok
        causes = []
        if not o_ok:
            causes.append(f"oracle {o.status.value} {o.score:g}: {first_lines(o.details)}")
        if not n_ok:
            causes.append(f"do-nothing {n.status.value} {n.score:g}: {first_lines(n.details)}")
        if causes:
            failing[row["task"]] = "; ".join(causes)
        subs = o.info.get("bootstrap", [])
        print(f"{row['task']:40s} oracle={o.status.value}:{o.score:g} noop={n.status.value}:{n.score:g} "
              f"{row['seconds']:.1f}s substituted={len(subs)}", file=sys.stderr)
    for task, cause in sorted(failing.items()):
        print(f"FAILING {task}: {cause}", file=sys.stderr)
    total = len(rows) + len(errors)
    print(f"load average at end: {os.getloadavg()}", file=sys.stderr)
    print(json.dumps({"tasks": total, "oracle_pass_frac": round(oracle_pass / max(total, 1), 4),
                      "noop_fail_frac": round(noop_fail / max(total, 1), 4), "network": args.network,
                      "environment": args.environment,
                      "seconds": round(time.perf_counter() - t0, 1), "failing": failing}))


if __name__ == "__main__":
    main()
