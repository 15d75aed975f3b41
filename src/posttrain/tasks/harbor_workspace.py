"""Running a terminal task: its workspace in a sandbox session, the oracle, and the verifier.

Covers: `open_workspace` (a sandbox session holding the environment files: a local `Session`, or a Ray
sandbox worker's, as any `sandbox.workspace.Workspace`), `run_solution` (the
oracle's solve.sh), `verify_workspace` (the task's tests, once the agent is done) and `parse_reward`.

Paths inside the sandbox: the session's workspace `/work` is Harbor's `/app` (each execution binds `/work` on
`/app`, and `/work/.harbor/{tests,logs,solution}` on `/tests`, `/logs`, `/solution` when they exist:
`sandbox.WORKSPACE_BINDS`). The workspace is built as the task's Dockerfile describes (`BuildPlan`: COPY,
WORKDIR, ENV, file-shaping RUN steps); the agent's commands (`agent/terminal.py`), the oracle and `test.sh`
start in its WORKDIR with its ENV (`task_prefix`). `.harbor/`
exists only while the verifier or the oracle runs: a test script that lists `/app` sees it. Sessions keep
owners (`Limits.owners`): tar as root restores uid 1000, as in a container. The tests run with the bootstrap
stand-ins first on PATH (`harbor_bootstrap.py`: apt-get, curl, uv, uvx, pip), and the verdict's
`info["bootstrap"]` lists what they substituted.

What the agent cannot forge: it never sees `tests/` or `solution/` (they are copied in only by
`verify_workspace` / `run_solution`, after the agent has finished, and removed when they are done);
whatever it left under `/work/.harbor` (a planted `reward.txt`, its own `test.sh`) is deleted before
the tests are copied in; the reward is read by a process of ours (`python3 -I`, so no module the agent
planted in the workspace is imported), and a missing or unreadable reward is an ERROR verdict, never a
score of 0. Known limit, as in Harbor itself: the tests run the agent's code, in the same workspace,
as the same user, so code of the agent that the tests execute could write the reward file; a test
script that writes the reward last (as every built-in one does) overwrites it.

Does not cover: per-command timeouts of the agent (the runtime's tools set them; `agent_timeout_s` is
the budget it should enforce), the agent loop (`posttrain.agent`), loading (`tasks/harbor_task.py`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posttrain.tasks.dockerfile_plan import CopyStep
from posttrain.tasks.harbor_bootstrap import BOOTSTRAP_PATH, bootstrap_files, executables, substitutions
from posttrain.tasks.harbor_task import TerminalTask
from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import Verdict, VerdictStatus

if TYPE_CHECKING:
    from posttrain.sandbox import ExecResult, Limits, Workspace, Workspaces

HARBOR_DIR = ".harbor"  # under /work: bound on /tests, /logs, /solution (sandbox.WORKSPACE_BINDS)
BUILD_DIR = ".posttrain-build"  # under /work while the Dockerfile's workspace is built; moved to /tmp at once
REWARD_MAX_BYTES = 1 << 16
BUILD_TIMEOUT_S = 300.0


def _limits(task: TerminalTask, wall_s: float, disk_mb: int) -> Limits:
    from posttrain.sandbox import Limits

    return Limits(wall_s=wall_s, cpu_s=wall_s * task.cpus, memory_mb=task.memory_mb, pids=256, disk_mb=disk_mb,
                  output_bytes=1 << 20, owners=True)


def chmod_x(paths: list[str]) -> str:
    return f"chmod +x -- {' '.join(shlex.quote(p) for p in paths)} && " if paths else ""


def _exports(env: dict[str, str]) -> str:
    pairs = [f"{k}={shlex.quote(v)}" for k, v in env.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    return f"export {' '.join(pairs)}; " if pairs else ""


def task_prefix(task: TerminalTask, env: dict[str, str] | None = None) -> str:
    """`cd` to the task's WORKDIR and export its ENV (then `env`): what a command in its container starts with."""
    return f"cd {shlex.quote(task.workdir)} 2>/dev/null || cd /app; {_exports({**task.env, **(env or {})})}"


def build_script(task: TerminalTask) -> tuple[str, dict[str, bytes]]:
    """The shell script and the staged files that build the workspace the task's Dockerfile describes, in its
    order (COPY, then a RUN that removes a file, leaves it removed). A failing RUN step stops the build."""
    assert task.build is not None
    files: dict[str, bytes] = {}
    lines = [f"mkdir -p /work/{BUILD_DIR} && mv /work/{BUILD_DIR} /tmp/{BUILD_DIR} || exit 1",
             'fail() { echo "posttrain: the Dockerfile workspace failed at $1 (exit $2)" >&2; exit 1; }']
    for i, step in enumerate(task.build.steps):
        where = f"line {step.line}"
        if isinstance(step, CopyStep):
            for d in step.dirs:
                lines.append(f"mkdir -p /app/{shlex.quote(d)} || fail {shlex.quote(where)} $?")
            if not step.files:
                continue
            for rel, data in step.files.items():
                files[f"{BUILD_DIR}/{i}/{rel}"] = data
            stage = f"/tmp/{BUILD_DIR}/{i}"
            lines.append(chmod_x([f"{stage}/{p}" for p in sorted(step.executable)]) + f"cp -a {stage}/. /app/ "
                         f"|| fail {shlex.quote(where)} $?")
            if step.chown:
                tops = sorted({rel.split("/")[0] for rel in step.files})
                lines.append(f"chown -R {shlex.quote(step.chown)} -- {' '.join(shlex.quote('/app/' + t) for t in tops)} "
                             f"|| fail {shlex.quote(where + ' (--chown)')} $?")
        else:
            lines.append(f"(cd {shlex.quote(step.workdir)} && {_exports(step.env)}exec /bin/sh -c {shlex.quote(step.command)}) "
                         f"|| fail {shlex.quote(where + ': RUN ' + step.command[:80])} $?")
    lines.append(f"rm -rf /tmp/{BUILD_DIR}")
    return "\n".join(lines) + "\n", files


def open_workspace(sandbox: Workspaces, task: TerminalTask, *, network: bool | None = None, disk_mb: int = 256,
                   command_timeout_s: float = 60.0) -> Workspace:
    """A session whose workspace (/work, Harbor's /app) holds the task's environment files, snapshotted
    (so `rollback` to the first snapshot restores the start). `network` defaults to the task's
    `allow_internet`; `command_timeout_s` is the wall limit of a command run without limits of its own.
    Raises `SandboxError` when the sandbox cannot start the session (infrastructure, not the task)."""
    from posttrain.sandbox import SandboxError

    session = sandbox.session(limits=_limits(task, command_timeout_s, max(disk_mb, task.disk_mb)),
                              network=task.allow_internet if network is None else network)
    try:
        if task.build is None:  # no Dockerfile: the environment's files are the workspace
            execs = [p.split("/", 1)[1] for p in task.executable if p.startswith("environment/")]
            r = session.exec(chmod_x(execs) + "true", files=dict(task.environment))
            if not r.ok:
                raise SandboxError(f"{task.id}: could not write the environment files: {r.error or r.stderr.strip()}")
        else:
            script, files = build_script(task)
            r = session.exec(["/bin/bash", "-c", script], files=files,
                             limits=_limits(task, BUILD_TIMEOUT_S, max(disk_mb, task.disk_mb)))
            if r.status.value == "sandbox_error":
                raise SandboxError(f"{task.id}: could not build the workspace: {r.error}")
            if not r.ok:
                raise TaskFileError(f"{task.id}: the workspace its Dockerfile describes could not be built here: "
                                    f"{(r.stderr.strip() or r.status.value)[-600:]}")
        session.snapshot()
    except BaseException:
        session.close()
        raise
    return session


async def run_solution(session: Workspace, task: TerminalTask) -> ExecResult:
    """Run the oracle `solve.sh` in the workspace (as an agent would act), under `agent_timeout_s`; its
    files are removed afterwards. A task without a solution is a `TaskFileError`."""
    if task.solution is None:
        raise TaskFileError(f"{task.id}: the task has no oracle solution")
    files = {f"{HARBOR_DIR}/solution/{rel}": data for rel, data in task.solution_files.items()}
    files[f"{HARBOR_DIR}/solution/solve.sh"] = task.solution.encode()
    execs = [f"/solution/{p.split('/', 1)[1]}" for p in task.executable if p.startswith("solution/")]
    # /solution is bound when .harbor/solution exists as the execution starts: made (after clearing whatever
    # the agent left there) by the run before
    cleared = await session.aexec(f"cd /work && {_CLEAR} && mkdir -p {HARBOR_DIR}/solution")
    if not cleared.ok:
        return cleared
    command = (f"{chmod_x(execs)}{task_prefix(task)}bash /solution/solve.sh; rc=$?; rm -rf /work/{HARBOR_DIR}; "
               "exit $rc")
    return await session.aexec(command, files=files,
                               limits=_limits(task, task.agent_timeout_s, session.limits.disk_mb))


_CLEAR = (f"chmod -R u+rwx {HARBOR_DIR} 2>/dev/null; rm -rf {HARBOR_DIR}; "
          f"test ! -e {HARBOR_DIR} && test ! -L {HARBOR_DIR}")

# Run as `python3 -I -S`: nothing the agent left in the workspace is imported (-S: nor site-packages, which
# only slow the start). Only regular files count.
# The tests go with it, so a session that goes on (a runtime that lets the agent continue) never sees them.
_READ_REWARD = f"""
import json, os, shutil, stat
out = {{}}
for name in ("reward.txt", "reward.json"):
    p = "/work/{HARBOR_DIR}/logs/verifier/" + name
    try:
        st = os.lstat(p)
    except OSError:
        continue
    if not stat.S_ISREG(st.st_mode):
        out[name] = {{"error": "not a regular file"}}
        continue
    with open(p, "rb") as f:
        out[name] = {{"text": f.read({REWARD_MAX_BYTES}).decode("utf-8", "replace")}}
try:
    with open("/work/{HARBOR_DIR}/bootstrap.log", "rb") as f:
        out["bootstrap"] = {{"text": f.read({REWARD_MAX_BYTES}).decode("utf-8", "replace")}}
except OSError:
    pass
shutil.rmtree("/work/{HARBOR_DIR}", ignore_errors=True)
print(json.dumps(out))
"""

# pytest's last line: "==== 2 failed, 3 passed in 0.12s ====" (Terminal-Bench 1 tasks without a reward file).
_PYTEST_SUMMARY = re.compile(r"^=+ .*\b(failed|passed|errors?|no tests ran)\b.* in [\d.]+s.* =+$", re.MULTILINE)


@dataclass(frozen=True)
class Reward:
    """What the reward file said: the score, the other numbers of reward.json, and which file it was."""

    score: float
    breakdown: dict[str, float]
    source: str


def parse_reward(files: dict[str, dict[str, str]]) -> Reward | str:
    """The reward from what `_READ_REWARD` found (reward.txt first, as Harbor reads it), or why there is none."""
    problems = []
    for name in ("reward.txt", "reward.json"):
        found = files.get(name)
        if found is None:
            continue
        if "error" in found:
            problems.append(f"/logs/verifier/{name}: {found['error']}")
            continue
        text = found["text"].strip()
        try:
            if name == "reward.txt":
                value: Any = float(text)
                rest: dict[str, Any] = {}
            else:
                obj = json.loads(text)
                if not isinstance(obj, dict) or not obj:
                    raise ValueError("expected an object of metrics")
                value, rest, name = _named_reward(obj, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"reward {value!r} is not a finite number")
        except ValueError as exc:
            problems.append(f"/logs/verifier/{name}: unreadable ({str(exc)[:120]}): {text[:80]!r}")
            continue
        breakdown = {k: float(v) for k, v in rest.items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        return Reward(float(value), breakdown, name)
    return "; ".join(problems) or "the tests wrote no reward (/logs/verifier/reward.txt or reward.json)"


def _named_reward(obj: dict[str, Any], name: str) -> tuple[Any, dict[str, Any], str]:
    """(the reward, every numeric metric, where it came from) of a reward.json: its "reward" key; else its one
    metric; else the mean of its metrics (Harbor leaves several to a custom metric; the verdict keeps each in
    its breakdown). Values that are not finite numbers are not metrics."""
    metrics = {k: v for k, v in obj.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    if "reward" in obj:
        return obj["reward"], {k: v for k, v in metrics.items() if k != "reward"}, name
    if not metrics:
        raise ValueError("no numeric metric")
    if len(metrics) == 1:
        (key, value), = metrics.items()
        return value, dict(metrics), f"{name} ({key})"
    return sum(metrics.values()) / len(metrics), dict(metrics), f"{name} (mean of {', '.join(metrics)})"


def task_reward(task: TerminalTask, found: dict[str, dict[str, str]], exit_code: int | None, stdout: str) -> Reward | str:
    """`parse_reward`, and for a Terminal-Bench 1 task without a reward file its test script's outcome (exit 0:
    1; a pytest summary: 0). The one rule for the sandbox and the container back end."""
    reward = parse_reward(found)
    if isinstance(reward, str) and task.format == "terminal-bench":
        if exit_code == 0:
            return Reward(1.0, {}, "exit status")
        if _PYTEST_SUMMARY.search(stdout):
            return Reward(0.0, {}, "pytest summary")
    return reward


_SOURCE_HASH: list[str] = []


def verifier_id() -> str:
    """`terminal@<hash of this module>`: which checking code judged a workspace (`tests_hash` in a verdict's
    `info` names the task's tests, as a task's own data)."""
    if not _SOURCE_HASH:
        with open(__file__, "rb") as f:
            _SOURCE_HASH.append(hashlib.sha256(f.read()).hexdigest()[:12])
    return f"terminal@{_SOURCE_HASH[0]}"


def tests_hash(task: TerminalTask) -> str:
    h = hashlib.sha256(task.test_script.encode())
    for rel in sorted(task.tests):
        h.update(b"\0" + rel.encode() + b"\0" + task.tests[rel])
    return h.hexdigest()[:12]


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


async def verify_workspace(session: Workspace, task: TerminalTask) -> Verdict:
    """Judge the workspace once the agent is done: delete whatever it left under /work/.harbor (a planted
    reward, its own tests), copy the task's tests into /tests, run the test script under
    `verifier_timeout_s`, and read /logs/verifier/reward.txt or reward.json. No reward is an ERROR verdict
    (a Terminal-Bench 1 task falls back to its pytest outcome), a test script past its limit a TIMEOUT, one
    killed for memory, CPU or output an ERROR (what it wrote before may not be its last word). The tests
    are removed again afterwards."""
    from posttrain.sandbox.sandbox import task_python

    verdict = _VerdictOf(task, time.perf_counter())
    # .harbor/tests and .harbor/logs are made here, so the next execution binds them on /tests and /logs
    cleared = await session.aexec(f"cd /work && {_CLEAR} && mkdir -p {HARBOR_DIR}/tests {HARBOR_DIR}/logs/verifier")
    if not cleared.ok:
        return verdict(0.0, VerdictStatus.ERROR, f"terminal:{task.id}: could not clear /work/{HARBOR_DIR} before the "
                       f"tests: {cleared.error or cleared.stderr.strip() or cleared.status.value}")
    command, files = _test_command(task, bool(getattr(session, "network", False)))
    run = await session.aexec(command, files=files,
                              limits=_limits(task, task.verifier_timeout_s, session.limits.disk_mb))
    read = await session.aexec([task_python(), "-I", "-S", "-c", _READ_REWARD])  # reads, then removes the tests
    if not read.ok:
        await session.aexec(_CLEAR)
    return _judge(task, run, read, verdict)


@dataclass(frozen=True)
class _VerdictOf:
    """Makes a task's verdicts: `passed` from the score, the tests' hash in `info`, the latency since `start`."""

    task: TerminalTask
    start: float

    def __call__(self, score: float, status: VerdictStatus, details: str, **info: Any) -> Verdict:
        return Verdict(score, status is VerdictStatus.OK and score >= 1.0 - 1e-9, status, verifier=verifier_id(),
                       details=details, info={**info, "tests_hash": tests_hash(self.task)},
                       latency_s=time.perf_counter() - self.start)


def _test_command(task: TerminalTask, network: bool) -> tuple[str, dict[str, bytes]]:
    """The command that runs the task's test script (its environment, PATH with the bootstrap's stand-ins
    first, the executable bits), and the files it needs: the tests under .harbor/tests, the bootstrap's."""
    from posttrain.sandbox.sandbox import task_python

    files = {f"{HARBOR_DIR}/tests/{rel}": data for rel, data in task.tests.items()}
    files.update(bootstrap_files(task_python()))
    execs = [f"/tests/{p.split('/', 1)[1]}" for p in task.executable if p.startswith("tests/")] + executables()
    env = {"TEST_DIR": "/tests", **{str(k): str(v) for k, v in task.metadata.get("verifier_env", {}).items()},
           "POSTTRAIN_NETWORK": "1" if network else "0"}
    command = (f"{chmod_x(execs)}{task_prefix(task, env)}export PATH={BOOTSTRAP_PATH}:$PATH; "
               f"exec bash /tests/{shlex.quote(task.test_script)}")
    return command, files


def _judge(task: TerminalTask, run: ExecResult, read: ExecResult, verdict: _VerdictOf) -> Verdict:
    """The verdict on a finished test run (`run`) and the reward files it left (`read`): how the run ended
    first, then the reward."""
    from posttrain.sandbox import ExecStatus

    name = f"terminal:{task.id}"
    output = _tail(run.stdout + ("\n" + run.stderr if run.stderr else ""))
    info = {"exit_code": run.exit_code, "exec_status": run.status.value, "test_seconds": round(run.wall_s, 3)}
    if run.status is ExecStatus.SANDBOX_ERROR:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: the sandbox failed running the tests: {run.error}", **info)
    if run.status is ExecStatus.TIMEOUT:
        return verdict(0.0, VerdictStatus.TIMEOUT,
                       f"{name}: {task.test_script} ran past its {task.verifier_timeout_s:g} s limit\n{output}", **info)
    if run.status not in (ExecStatus.OK, ExecStatus.RUNTIME_ERROR):
        # killed (memory, CPU, output): a reward it wrote on the way may not be its last word
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: {task.test_script} did not finish: {run.status.value}\n{output}",
                       **info)
    if not read.ok:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: could not read the reward: {read.error or read.stderr.strip()}",
                       **info)
    try:
        found = json.loads(read.stdout)
    except ValueError:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: could not read the reward: {read.stdout[:200]!r}", **info)
    reward = task_reward(task, found, run.exit_code, run.stdout)
    if "bootstrap" in found:
        info["bootstrap"] = substitutions(found["bootstrap"].get("text", ""))
    if isinstance(reward, str):
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: {reward} ({task.test_script}: {run.status.value}, "
                       f"exit {run.exit_code})\n{output}", **info)
    v = verdict(reward.score, VerdictStatus.OK, f"{name}: reward {reward.score:g} from {reward.source}\n{output}",
                reward_source=reward.source, **info)
    v.breakdown = reward.breakdown
    return v
