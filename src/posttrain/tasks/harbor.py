"""Terminal tasks in the Harbor format, loaded without Docker, run in the sandbox.

Covers: `TerminalTask` (the record); `load_terminal_task(path)` for a Harbor task directory
(`instruction.md`, `task.toml`, `environment/`, `tests/test.sh`, `solution/solve.sh`) or a
Terminal-Bench 1 one (`task.yaml`, `run-tests.sh`, `tests/`, `solution.sh`); `load_terminal_suite`
(the built-in `terminal` suite, or a directory of task directories, with per-task load errors
collected so the other tasks still run); and the workspace contract the agent runtime drives:
`open_workspace` (a sandbox `Session` holding the environment files), `run_solution` (the oracle),
`verify_workspace` (the task's tests, after the agent is done).

Paths inside the sandbox: the session's workspace `/work` is Harbor's `/app` (the sandbox root links
`/app`, `/tests`, `/logs` and `/solution` into `/work`: `sandbox.WORKSPACE_LINKS`). Agent commands
and `test.sh` run there. `/tests` and `/logs/verifier` resolve to `/work/.harbor/...`, which exists
only from the moment the verifier starts: a test script that lists `/app` sees that `.harbor/`.

What the agent cannot forge: it never sees `tests/` or `solution/` (they are copied in only by
`verify_workspace` / `run_solution`, after the agent has finished); whatever it left under
`/work/.harbor` (a planted `reward.txt`, its own `test.sh`) is deleted before the tests are copied in;
the reward is read by a process of ours (`python3 -I`, so no module the agent planted in the workspace
is imported), and a missing or unreadable reward is an ERROR verdict, never a score of 0.
Known limit, as in Harbor itself: the tests run the agent's code, in the same workspace, as the same
user, so code of the agent that the tests execute could write the reward file; a test script that
writes the reward last (as every built-in one does) overwrites it.

Does not cover: building a task's Dockerfile (its files are copied into the workspace instead; each
task's `notes` say so), the agent loop (`posttrain.agent`), per-command timeouts of the agent (the
runtime's tools set them; `agent_timeout_s` is the budget it should enforce), the `terminal` domain
and its verifier (`tasks/terminal.py`).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import time
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import Verdict, VerdictStatus

if TYPE_CHECKING:
    from posttrain.sandbox import ExecResult, Sandbox, Session

BUILTIN_SUITES = ("terminal",)
HARBOR_DIR = ".harbor"  # under /work: /tests, /logs, /solution link into it (sandbox.WORKSPACE_LINKS)
REWARD_MAX_BYTES = 1 << 16
MAX_TASK_BYTES = 64 << 20  # environment + tests + solution of one task: they travel in one request
_DOCKER_FILES = ("Dockerfile", "docker-compose.yaml", "docker-compose.yml")
_TB1_OWN = {"task.yaml", "solution.sh", "solution.yaml", "run-tests.sh", *_DOCKER_FILES}


@dataclass(frozen=True)
class TerminalTask:
    """One task: what the agent is told, the files it starts from, and the hidden tests that judge it.

    `environment` and `tests` map relative paths to bytes: `environment` is copied into the workspace
    (Harbor's /app) before the agent starts, `tests` into /tests only when it has finished.
    """

    id: str
    instruction: str
    environment: dict[str, bytes]
    tests: dict[str, bytes]
    solution: str | None = None
    """The oracle's `solve.sh` (Terminal-Bench 1: `solution.sh`), or None."""
    agent_timeout_s: float = 600.0
    verifier_timeout_s: float = 600.0
    cpus: float = 1.0
    """CPU cores; the sandbox bounds CPU time, so an execution gets `cpus` x its wall limit of CPU seconds."""
    memory_mb: int = 2048
    allow_internet: bool = True
    """Harbor's default; `open_workspace(network=...)` overrides it."""
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """What this adapter does differently from Docker-based Harbor for this task."""
    test_script: str = "test.sh"
    """The entry point under /tests (`run-tests.sh` for Terminal-Bench 1 tasks)."""
    solution_files: dict[str, bytes] = field(default_factory=dict)
    """The other files of `solution/` (copied to /solution beside solve.sh)."""
    executable: tuple[str, ...] = ()
    """`environment/...`, `tests/...` and `solution/...` paths whose executable bit is set in the task directory."""
    format: Literal["harbor", "terminal-bench"] = "harbor"
    source: str = ""
    """The directory the task was loaded from."""


@dataclass(frozen=True)
class TaskLoadError:
    """A task directory of a suite that could not be loaded; the others still run."""

    path: str
    message: str


# ----------------------------------------------------------------------------- loading


def _read_tree(root: Path, what: str, skip: set[str] = frozenset()) -> tuple[dict[str, bytes], list[str], list[str]]:
    """(files by relative path, relative paths with the executable bit, notes) of a directory tree."""
    files: dict[str, bytes] = {}
    executable: list[str] = []
    notes: list[str] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in skip or path.is_dir() and not path.is_symlink():
            continue
        if path.is_symlink() or not path.is_file():
            notes.append(f"{what}/{rel} is not a regular file: not copied")
            continue
        files[rel] = path.read_bytes()
        if path.stat().st_mode & 0o111:
            executable.append(rel)
    return files, executable, notes


def _number(table: dict[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise TaskFileError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


def _memory_mb(env: dict[str, Any], where: str) -> int:
    """`memory_mb`, or Harbor's older spelling `memory = "2G"`."""
    if "memory_mb" in env:
        return int(_number(env, "memory_mb", 2048, where))
    raw = env.get("memory")
    if raw is None:
        return 2048
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG])?[bB]?\s*", str(raw))
    if not m:
        raise TaskFileError(f"{where}: memory must look like '2G' or '512M', got {raw!r}")
    scale = {"k": 1 / 1024, "m": 1, "g": 1024, None: 1 / (1 << 20)}[(m.group(2) or "").lower() or None]
    return max(1, int(float(m.group(1)) * scale))


def _table(config: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise TaskFileError(f"{where}: [{key}] must be a table")
    return value


def _dockerfile_notes(text: str, where: str) -> list[str]:
    runs = len(re.findall(r"^\s*RUN\b", text, flags=re.MULTILINE | re.IGNORECASE))
    note = f"{where} is not built: the other files beside it are copied into the workspace (/app)"
    return [note + (f"; its {runs} RUN step(s) did not run" if runs else "")]


def _check_size(task_id: str, *parts: dict[str, bytes]) -> None:
    total = sum(len(v) for p in parts for v in p.values())
    if total > MAX_TASK_BYTES:
        raise TaskFileError(f"{task_id}: {total >> 20} MiB of files; at most {MAX_TASK_BYTES >> 20} MiB are supported")


def load_terminal_task(path: str | Path) -> TerminalTask:
    """The task in a Harbor or a Terminal-Bench 1 directory; a bad directory is a one-line `TaskFileError`."""
    root = Path(path)
    if not root.is_dir():
        raise TaskFileError(f"{root}: not a task directory")
    if (root / "task.toml").exists() or (root / "instruction.md").exists():
        return _load_harbor(root)
    if (root / "task.yaml").exists():
        return _load_terminal_bench(root)
    raise TaskFileError(f"{root}: neither a Harbor task (task.toml, instruction.md) nor a Terminal-Bench one (task.yaml)")


def _load_harbor(root: Path) -> TerminalTask:
    toml_path, instr_path = root / "task.toml", root / "instruction.md"
    for p in (toml_path, instr_path):
        if not p.is_file():
            raise TaskFileError(f"{p}: missing")
    try:
        config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{toml_path}: malformed TOML: {exc}") from None
    where = str(toml_path)
    verifier, agent, env = (_table(config, k, where) for k in ("verifier", "agent", "environment"))
    metadata = _table(config, "metadata", where)
    if isinstance(config.get("task"), dict):  # schema 1.1 keeps name/description/keywords in [task]
        metadata = {**config["task"], **metadata}
    tests_dir = root / "tests"
    if not (tests_dir / "test.sh").is_file():
        raise TaskFileError(f"{tests_dir / 'test.sh'}: missing (every Harbor task needs tests/test.sh)")
    notes: list[str] = []
    environment: dict[str, bytes] = {}
    executable: list[str] = []
    env_dir = root / "environment"
    if env_dir.is_dir():
        environment, ex, n = _read_tree(env_dir, "environment")
        notes += n
        executable += [f"environment/{p}" for p in ex]
        for name in _DOCKER_FILES:
            if name in environment:
                notes += _dockerfile_notes(environment.pop(name).decode("utf-8", "replace"), f"environment/{name}")
    tests, ex, n = _read_tree(tests_dir, "tests")
    notes += n
    executable += [f"tests/{p}" for p in ex]
    solution = None
    solution_files: dict[str, bytes] = {}
    if (root / "solution" / "solve.sh").is_file():
        solution_files, ex, n = _read_tree(root / "solution", "solution")
        notes += n
        executable += [f"solution/{p}" for p in ex]
        solution = solution_files.pop("solve.sh").decode("utf-8", "replace")
    _check_size(root.name, environment, tests, solution_files)
    return TerminalTask(
        id=root.name,
        instruction=instr_path.read_text(encoding="utf-8", errors="replace"),
        environment=environment,
        tests=tests,
        solution=solution,
        agent_timeout_s=_number(agent, "timeout_sec", 600.0, where),
        verifier_timeout_s=_number(verifier, "timeout_sec", 600.0, where),
        cpus=_number(env, "cpus", 1.0, where),
        memory_mb=_memory_mb(env, where),
        allow_internet=bool(env.get("allow_internet", True)),
        metadata={**metadata, **({"verifier_env": verifier["env"]} if isinstance(verifier.get("env"), dict) else {})},
        notes=tuple(notes),
        solution_files=solution_files,
        executable=tuple(executable),
        format="harbor",
        source=str(root),
    )


def _load_terminal_bench(root: Path) -> TerminalTask:
    yaml_path = root / "task.yaml"
    try:
        import yaml
    except ImportError:
        raise TaskFileError(f"{yaml_path}: Terminal-Bench 1 tasks need PyYAML: pip install 'posttrain[terminal]'") from None
    try:
        config = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{yaml_path}: malformed YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(config, dict):
        raise TaskFileError(f"{yaml_path}: expected a mapping at the top level")
    instruction = config.get("instruction")
    if instruction is None and isinstance(config.get("descriptions"), list):  # the oldest Terminal-Bench layout
        instruction = next((d.get("description") for d in config["descriptions"]
                            if isinstance(d, dict) and d.get("key") == "base"), None)
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFileError(f"{yaml_path}: no 'instruction'")
    run_tests = root / "run-tests.sh"
    if not run_tests.is_file():
        raise TaskFileError(f"{run_tests}: missing (every Terminal-Bench task needs run-tests.sh)")
    if not (root / "tests").is_dir():
        raise TaskFileError(f"{root / 'tests'}: missing (every Terminal-Bench task needs tests/)")
    where = str(yaml_path)
    notes = []
    environment, ex, n = _read_tree(root, "", skip=_TB1_OWN | {"tests"})
    executable = [f"environment/{p}" for p in ex]
    notes += [x.lstrip("/") for x in n]
    for name in _DOCKER_FILES:
        if (root / name).is_file():
            notes += _dockerfile_notes((root / name).read_text(encoding="utf-8", errors="replace"), name)
    tests, ex, n = _read_tree(root / "tests", "tests")
    notes += n
    executable += [f"tests/{p}" for p in ex]
    if "run-tests.sh" in tests:
        raise TaskFileError(f"{root / 'tests' / 'run-tests.sh'}: clashes with the task's run-tests.sh")
    tests["run-tests.sh"] = run_tests.read_bytes()
    solution = (root / "solution.sh").read_text(encoding="utf-8", errors="replace") if (root / "solution.sh").is_file() else None
    if solution is None and (root / "solution.yaml").is_file():
        notes.append("solution.yaml (tmux keystrokes) is not supported: the task has no oracle solution here")
    parser = config.get("parser_name", "pytest")
    notes.append("Terminal-Bench 1 task: without a reward file the reward is run-tests.sh's pytest outcome "
                 "(1 when it exits 0, 0 when pytest reports failures)")
    if parser != "pytest":
        notes.append(f"parser_name {parser!r} is read as pytest's outcome")
    _check_size(root.name, environment, tests)
    metadata = {k: v for k, v in config.items() if k not in ("instruction", "descriptions")}
    return TerminalTask(
        id=root.name,
        instruction=instruction,
        environment=environment,
        tests=tests,
        solution=solution,
        agent_timeout_s=_number(config, "max_agent_timeout_sec", 360.0, where),
        verifier_timeout_s=_number(config, "max_test_timeout_sec", 60.0, where),
        metadata=metadata,
        notes=tuple(notes),
        test_script="run-tests.sh",
        executable=tuple(executable),
        format="terminal-bench",
        source=str(root),
    )


def builtin_suite_dir(name: str) -> Path:
    """The package-data directory of a built-in suite."""
    return Path(str(resources.files("posttrain.tasks").joinpath("data", name)))


def _task_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and any(
        (p / f).exists() for f in ("task.toml", "instruction.md", "task.yaml")))


def load_terminal_suite(name_or_dir: str | Path, *, errors: list[TaskLoadError] | None = None) -> list[TerminalTask]:
    """The tasks of a built-in suite (`terminal`) or of a directory of task directories (a single task
    directory is a suite of one). Without `errors`, the first bad task raises; with it, each bad task is
    appended there and the others are returned."""
    root = builtin_suite_dir(str(name_or_dir)) if str(name_or_dir) in BUILTIN_SUITES else Path(name_or_dir)
    if not root.is_dir():
        raise TaskFileError(f"{name_or_dir}: neither a built-in suite ({', '.join(BUILTIN_SUITES)}) nor a directory")
    if any((root / f).exists() for f in ("task.toml", "task.yaml")):
        dirs = [root]
    else:
        dirs = _task_dirs(root)
    if not dirs:
        raise TaskFileError(f"{root}: no task directories (each needs task.toml or task.yaml)")
    tasks = []
    for d in dirs:
        try:
            tasks.append(load_terminal_task(d))
        except TaskFileError as exc:
            if errors is None:
                raise
            errors.append(TaskLoadError(str(d), str(exc)))
    return tasks


# ----------------------------------------------------------------------------- the workspace


def _limits(task: TerminalTask, wall_s: float, disk_mb: int):
    from posttrain.sandbox import Limits

    return Limits(wall_s=wall_s, cpu_s=wall_s * task.cpus, memory_mb=task.memory_mb, pids=256, disk_mb=disk_mb,
                  output_bytes=1 << 20)


def _chmod_x(paths: list[str]) -> str:
    return f"chmod +x -- {' '.join(shlex.quote(p) for p in paths)} && " if paths else ""


def open_workspace(sandbox: Sandbox, task: TerminalTask, *, network: bool | None = None, disk_mb: int = 256,
                   command_timeout_s: float = 60.0) -> Session:
    """A session whose workspace (/work, Harbor's /app) holds the task's environment files, snapshotted
    (so `rollback` to the first snapshot restores the start). `network` defaults to the task's
    `allow_internet`; `command_timeout_s` is the wall limit of a command run without limits of its own.
    Raises `SandboxError` when the sandbox cannot start the session (infrastructure, not the task)."""
    from posttrain.sandbox import SandboxError

    session = sandbox.session(limits=_limits(task, command_timeout_s, disk_mb),
                              network=task.allow_internet if network is None else network)
    try:
        execs = [p.split("/", 1)[1] for p in task.executable if p.startswith("environment/")]
        r = session.exec(_chmod_x(execs) + "true", files=dict(task.environment))
        if not r.ok:
            raise SandboxError(f"{task.id}: could not write the environment files: {r.error or r.stderr.strip()}")
        session.snapshot()
    except BaseException:
        session.close()
        raise
    return session


async def run_solution(session: Session, task: TerminalTask) -> ExecResult:
    """Run the oracle `solve.sh` in the workspace (as an agent would act), under `agent_timeout_s`; its
    files are removed afterwards. A task without a solution is a `TaskFileError`."""
    if task.solution is None:
        raise TaskFileError(f"{task.id}: the task has no oracle solution")
    files = {f"{HARBOR_DIR}/solution/{rel}": data for rel, data in task.solution_files.items()}
    files[f"{HARBOR_DIR}/solution/solve.sh"] = task.solution.encode()
    execs = [f"/solution/{p.split('/', 1)[1]}" for p in task.executable if p.startswith("solution/")]
    command = f"{_chmod_x(execs)}bash /solution/solve.sh; rc=$?; rm -rf /work/{HARBOR_DIR}; exit $rc"
    return await session.aexec(command, files=files,
                               limits=_limits(task, task.agent_timeout_s, session.limits.disk_mb))


_CLEAR = (f"chmod -R u+rwx {HARBOR_DIR} 2>/dev/null; rm -rf {HARBOR_DIR}; "
          f"test ! -e {HARBOR_DIR} && test ! -L {HARBOR_DIR}")

# Run as `python3 -I`: nothing the agent left in the workspace is imported. Only regular files count.
_READ_REWARD = f"""
import json, os, stat
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
                if not isinstance(obj, dict) or "reward" not in obj:
                    raise ValueError('expected an object with a "reward" key')
                value, rest = obj["reward"], {k: v for k, v in obj.items() if k != "reward"}
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"reward {value!r} is not a finite number")
        except ValueError as exc:
            problems.append(f"/logs/verifier/{name}: unreadable ({str(exc)[:120]}): {text[:80]!r}")
            continue
        breakdown = {k: float(v) for k, v in rest.items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        return Reward(float(value), breakdown, name)
    return "; ".join(problems) or "the tests wrote no reward (/logs/verifier/reward.txt or reward.json)"


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


async def verify_workspace(session: Session, task: TerminalTask) -> Verdict:
    """Judge the workspace once the agent is done: delete whatever it left under /work/.harbor (a planted
    reward, its own tests), copy the task's tests into /tests, run the test script under
    `verifier_timeout_s`, and read /logs/verifier/reward.txt or reward.json. No reward is an ERROR verdict
    (a Terminal-Bench 1 task falls back to its pytest outcome), a test script past its limit a TIMEOUT."""
    from posttrain.sandbox import ExecStatus
    from posttrain.sandbox.sandbox import task_python

    start = time.perf_counter()
    name = f"terminal:{task.id}"

    def verdict(score: float, status: VerdictStatus, details: str, **info: Any) -> Verdict:
        return Verdict(score, status is VerdictStatus.OK and score >= 1.0 - 1e-9, status, details=details, info=info,
                       latency_s=time.perf_counter() - start)

    cleared = await session.aexec(_CLEAR)
    if not cleared.ok:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: could not clear /work/{HARBOR_DIR} before the tests: "
                       f"{cleared.error or cleared.stderr.strip() or cleared.status.value}")
    files = {f"{HARBOR_DIR}/tests/{rel}": data for rel, data in task.tests.items()}
    execs = [f"/tests/{p.split('/', 1)[1]}" for p in task.executable if p.startswith("tests/")]
    env = {"TEST_DIR": "/tests", **{str(k): str(v) for k, v in task.metadata.get("verifier_env", {}).items()}}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k))
    command = (f"mkdir -p /work/{HARBOR_DIR}/logs/verifier && {_chmod_x(execs)}"
               f"export {exports} && exec bash /tests/{shlex.quote(task.test_script)}")
    run = await session.aexec(command, files=files,
                              limits=_limits(task, task.verifier_timeout_s, session.limits.disk_mb))
    output = _tail(run.stdout + ("\n" + run.stderr if run.stderr else ""))
    info = {"exit_code": run.exit_code, "exec_status": run.status.value, "test_seconds": round(run.wall_s, 3)}
    if run.status is ExecStatus.SANDBOX_ERROR:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: the sandbox failed running the tests: {run.error}", **info)
    if run.status is ExecStatus.TIMEOUT:
        return verdict(0.0, VerdictStatus.TIMEOUT,
                       f"{name}: {task.test_script} ran past its {task.verifier_timeout_s:g} s limit\n{output}", **info)
    read = await session.aexec([task_python(), "-I", "-c", _READ_REWARD])
    if not read.ok:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: could not read the reward: {read.error or read.stderr.strip()}",
                       **info)
    try:
        found = json.loads(read.stdout)
    except ValueError:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: could not read the reward: {read.stdout[:200]!r}", **info)
    reward = parse_reward(found)
    if isinstance(reward, str) and task.format == "terminal-bench" and run.status in (ExecStatus.OK,
                                                                                        ExecStatus.RUNTIME_ERROR):
        if run.exit_code == 0:
            reward = Reward(1.0, {}, "exit status")
        elif _PYTEST_SUMMARY.search(run.stdout):
            reward = Reward(0.0, {}, "pytest summary")
    if isinstance(reward, str):
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: {reward} ({task.test_script}: {run.status.value}, "
                       f"exit {run.exit_code})\n{output}", **info)
    v = verdict(reward.score, VerdictStatus.OK, f"{name}: reward {reward.score:g} from {reward.source}\n{output}",
                reward_source=reward.source, **info)
    v.breakdown = reward.breakdown
    return v
