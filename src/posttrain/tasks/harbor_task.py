"""Terminal tasks as records, and their loaders: Harbor and Terminal-Bench 1 task directories, without Docker.

Covers: `TerminalTask` (the record); `load_terminal_task(path)` for a Harbor task directory
(`instruction.md`, `task.toml` with `[verifier] timeout_sec`, `[agent] timeout_sec`, `[environment]
cpus / memory_mb / allow_internet`, `[metadata]`; `environment/`, `tests/test.sh`, `solution/solve.sh`)
or a Terminal-Bench 1 one (`task.yaml`, `run-tests.sh`, `tests/`, `solution.sh`; needs PyYAML, the
`terminal` extra); `load_terminal_suite` (the built-in `terminal` suite, package data under
`tasks/data/terminal/`, or a directory of task directories, with per-task load errors collected so
the other tasks still run). A bad directory is a one-line `TaskFileError` naming the file.
What differs from Docker-based Harbor is said per task in `TerminalTask.notes`: a Dockerfile is not
built as an image; the workspace it describes (`COPY`/`ADD`, `WORKDIR`, `ENV`, file-shaping `RUN` steps) is
planned by `tasks/dockerfile_plan.py` and applied in the sandbox, and each step it cannot apply (package
installs, downloads, paths outside /app) is a note; non-regular files are skipped. Fields of `task.toml`
that are not supported are notes too, never load errors.
Does not cover: running a task (`tasks/harbor_workspace.py`), the `terminal` domain (`tasks/terminal.py`).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from posttrain.tasks.dockerfile_plan import DEFAULT_WORKDIR, BuildPlan, plan_workspace
from posttrain.tasks.harbor_steps import TerminalStep, load_steps
from posttrain.tasks.jsonl import TaskFileError

BUILTIN_SUITES = ("terminal",)
MAX_TASK_BYTES = 64 << 20  # environment + tests + solution of one task: they travel in one request
_DOCKER_FILES = ("Dockerfile", "docker-compose.yaml", "docker-compose.yml")
_TB1_OWN = frozenset({"task.yaml", "solution.sh", "solution.yaml", "run-tests.sh", *_DOCKER_FILES})


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
    build: BuildPlan | None = None
    """The workspace the task's Dockerfile describes (None without one: `environment` is copied into /app as is)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of the agent's commands, the oracle and the tests: the Dockerfile's ENV, then `[environment.env]`."""
    disk_mb: int = 256
    """The workspace's disk quota (`[environment] storage_mb`, capped)."""
    steps: tuple[TerminalStep, ...] = ()
    """Harbor's multi-step tasks: the steps in order (then `instruction` joins theirs, `tests` are the last
    step's, and `tasks/terminal.py` `judge_steps` runs them one by one)."""
    step_strategy: str = "mean"

    @property
    def workdir(self) -> str:
        """Where commands start: the Dockerfile's last WORKDIR (under /app), else /app."""
        return self.build.workdir if self.build is not None else DEFAULT_WORKDIR


@dataclass(frozen=True)
class TaskLoadError:
    """A task directory of a suite that could not be loaded; the others still run."""

    path: str
    message: str


# ----------------------------------------------------------------------------- loading


def _read_tree(root: Path, what: str, skip: frozenset[str] = frozenset()) -> tuple[dict[str, bytes], list[str], list[str]]:
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


def _plan(text: str, where: str, context: dict[str, bytes], executable: list[str], prefix: str,
          dockerignore: str) -> tuple[BuildPlan, list[str]]:
    """The Dockerfile's workspace plan, and its notes (the steps it does not apply)."""
    execs = frozenset(p[len(prefix):] for p in executable if p.startswith(prefix))
    try:
        plan = plan_workspace(text, context, execs, name=where, dockerignore=dockerignore)
    except Exception as exc:  # noqa: BLE001 - a parser's failure on a malformed file is the task's
        raise TaskFileError(f"{where}: cannot be read: {exc}") from None
    notes = [f"{where} is not built as an image: its workspace is applied in the sandbox ({len(plan.steps)} step(s))"]
    return plan, notes + [f"not applied: {s}" for s in plan.skipped]


# Fields of current Harbor task.toml tables that posttrain reads; others are notes, never load errors.
_READ_FIELDS = {
    "verifier": {"timeout_sec", "env"},
    "agent": {"timeout_sec"},
    "environment": {"cpus", "memory_mb", "memory", "allow_internet", "env", "workdir", "storage_mb", "storage",
                    "build_timeout_sec", "gpus"},
}


def _unsupported(tables: dict[str, dict[str, Any]], config: dict[str, Any]) -> list[str]:
    notes = []
    for name, table in tables.items():
        for key in sorted(set(table) - _READ_FIELDS.get(name, set())):
            notes.append(f"task.toml [{name}] {key} = {table[key]!r}: not supported here, ignored")
    env = tables.get("environment", {})
    if env.get("gpus"):
        notes.append(f"task.toml [environment] gpus = {env['gpus']!r}: the sandbox has no GPU")
    if env.get("workdir") not in (None, DEFAULT_WORKDIR):
        notes.append(f"task.toml [environment] workdir = {env['workdir']!r}: the workspace is /app here")
    if "steps" in config and not isinstance(config["steps"], list):
        notes.append("task.toml steps: expected [[steps]] tables, ignored")
    for key in sorted(set(config) - {"version", "schema_version", "task", "metadata", "verifier", "agent",
                                     "environment", "steps", "multi_step_reward_strategy", "artifacts", "source"}):
        notes.append(f"task.toml {key}: not supported here, ignored")
    return notes


def _env_table(table: dict[str, Any], where: str) -> dict[str, str]:
    value = table.get("env", {})
    if not isinstance(value, dict):
        raise TaskFileError(f"{where}: env must be a table of strings")
    return {str(k): str(v) for k, v in value.items()}


def _check_size(task_id: str, *parts: dict[str, bytes]) -> None:
    total = sum(len(v) for p in parts for v in p.values())
    if total > MAX_TASK_BYTES:
        raise TaskFileError(f"{task_id}: {total >> 20} MiB of files; at most {MAX_TASK_BYTES >> 20} MiB are supported")


def load_terminal_task(path: str | Path) -> TerminalTask:
    """The task in a Harbor or a Terminal-Bench 1 directory; a bad directory is a one-line `TaskFileError`."""
    root = Path(path)
    if not root.is_dir():
        raise TaskFileError(f"{root}: not a task directory")
    try:
        if (root / "task.toml").exists() or (root / "instruction.md").exists():
            return _load_harbor(root)
        if (root / "task.yaml").exists():
            return _load_terminal_bench(root)
    except OSError as exc:  # an unreadable file, a directory where a file belongs
        raise TaskFileError(f"{exc.filename or root}: {exc.strerror or exc}") from None
    raise TaskFileError(f"{root}: neither a Harbor task (task.toml, instruction.md) nor a Terminal-Bench one (task.yaml)")


@dataclass
class _Workspace:
    """A task's starting files and what its Dockerfile makes of them, as a loader reads them."""

    files: dict[str, bytes] = field(default_factory=dict)
    """Relative path -> bytes, the Docker files removed."""
    executable: list[str] = field(default_factory=list)
    """`environment/...` paths with the executable bit."""
    notes: list[str] = field(default_factory=list)
    plan: BuildPlan | None = None


@dataclass
class _Judging:
    """What a Harbor task is judged by and what its oracle runs: one step's files, or the last of several steps'."""

    instruction: str
    tests: dict[str, bytes]
    executable: list[str]
    """Every executable path of the task so far (environment, tests, solution), in reading order."""
    notes: list[str]
    solution: str | None = None
    solution_files: dict[str, bytes] = field(default_factory=dict)
    steps: tuple[TerminalStep, ...] = ()


def _read_task_toml(toml_path: Path) -> dict[str, Any]:
    if not toml_path.is_file():
        raise TaskFileError(f"{toml_path}: missing")
    try:
        return tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{toml_path}: malformed TOML: {exc}") from None


def _harbor_workspace(env_dir: Path) -> _Workspace:
    """`environment/`: its files, and the plan of its Dockerfile when it has one (compose files are not used)."""
    if not env_dir.is_dir():
        return _Workspace()
    environment, ex, notes = _read_tree(env_dir, "environment")
    executable = [f"environment/{p}" for p in ex]
    plan = None
    if "Dockerfile" in environment:
        dockerfile = environment["Dockerfile"].decode("utf-8", "replace")
        ignore = environment.get(".dockerignore", b"").decode("utf-8", "replace")
        plan, n = _plan(dockerfile, "environment/Dockerfile", environment, executable, "environment/", ignore)
        notes += n
    for name in _DOCKER_FILES:
        if environment.pop(name, None) is not None and name != "Dockerfile":
            notes.append(f"environment/{name}: not used (services of a compose file do not run here)")
    return _Workspace(environment, executable, notes, plan)


def _harbor_one_step(root: Path, instruction: str, tests: dict[str, bytes], executable: list[str]) -> _Judging:
    """A single-step task: `tests/`, and `solution/` (solve.sh and the files beside it) when there is one."""
    judging = _Judging(instruction, tests, list(executable), [])
    if (root / "solution" / "solve.sh").is_file():
        files, ex, judging.notes = _read_tree(root / "solution", "solution")
        judging.executable += [f"solution/{p}" for p in ex]
        judging.solution = files.pop("solve.sh").decode("utf-8", "replace")
        judging.solution_files = files
    return judging


def _harbor_steps(root: Path, config: dict[str, Any], tests: dict[str, bytes], executable: list[str],
                  timeouts: tuple[float, float]) -> _Judging:
    """A multi-step task: every step's instruction at once, the last step's tests, the steps' solutions in order."""
    steps, notes = load_steps(root, config, _read_tree, tests, timeouts)
    notes += [f"multi-step task ({len(steps)} steps): the oracle and the do-nothing agent run step by step; "
              "an agent episode sees every step's instruction at once and is judged by the last step's tests"]
    instruction = "\n\n".join(f"## Step {i + 1}: {st.name}\n\n{st.instruction}" for i, st in enumerate(steps))
    executable = [p for p in executable if not p.startswith("tests/")] + [
        p for p in steps[-1].executable if p.startswith("tests/")]
    solution = "\n".join(st.solution or "" for st in steps) if all(st.solution is not None for st in steps) else None
    return _Judging(instruction, dict(steps[-1].tests), executable, notes, solution, steps=steps)


def _load_harbor(root: Path) -> TerminalTask:
    toml_path, instr_path, tests_dir = root / "task.toml", root / "instruction.md", root / "tests"
    config = _read_task_toml(toml_path)
    multi = isinstance(config.get("steps"), list)
    if not multi and not instr_path.is_file():
        raise TaskFileError(f"{instr_path}: missing")
    where = str(toml_path)
    verifier, agent, env = (_table(config, k, where) for k in ("verifier", "agent", "environment"))
    metadata = _table(config, "metadata", where)
    if isinstance(config.get("task"), dict):  # schema 1.1 keeps name/description/keywords in [task]
        metadata = {**config["task"], **metadata}
    if not multi and not (tests_dir / "test.sh").is_file():
        raise TaskFileError(f"{tests_dir / 'test.sh'}: missing (every Harbor task needs tests/test.sh)")
    workspace = _harbor_workspace(root / "environment")
    notes = workspace.notes + _unsupported({"verifier": verifier, "agent": agent, "environment": env}, config)
    tests, ex, n = _read_tree(tests_dir, "tests") if tests_dir.is_dir() else ({}, [], [])
    notes += n
    executable = workspace.executable + [f"tests/{p}" for p in ex]
    timeouts = (_number(agent, "timeout_sec", 600.0, where), _number(verifier, "timeout_sec", 600.0, where))
    instruction = instr_path.read_text(encoding="utf-8", errors="replace") if instr_path.is_file() else ""
    judging = (_harbor_steps(root, config, tests, executable, timeouts) if multi
               else _harbor_one_step(root, instruction, tests, executable))
    _check_size(root.name, workspace.files, judging.tests, judging.solution_files)
    plan = workspace.plan
    return TerminalTask(
        id=root.name,
        instruction=judging.instruction,
        environment=workspace.files,
        tests=judging.tests,
        solution=judging.solution,
        agent_timeout_s=timeouts[0],
        verifier_timeout_s=timeouts[1],
        cpus=_number(env, "cpus", 1.0, where),
        memory_mb=_memory_mb(env, where),
        allow_internet=bool(env.get("allow_internet", True)),
        metadata={**metadata, **({"verifier_env": _env_table(verifier, where)} if "env" in verifier else {})},
        notes=tuple(notes + judging.notes),
        solution_files=judging.solution_files,
        executable=tuple(judging.executable),
        format="harbor",
        source=str(root),
        build=plan,
        env={**(plan.env if plan else {}), **_env_table(env, where)},
        disk_mb=min(int(_number(env, "storage_mb", 256, where)), 2048) if "storage_mb" in env else 256,
        steps=judging.steps,
        step_strategy=str(config.get("multi_step_reward_strategy", "mean")),
    )


def _read_task_yaml(yaml_path: Path) -> dict[str, Any]:
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
    return config


def _tb1_instruction(config: dict[str, Any], yaml_path: Path) -> str:
    instruction = config.get("instruction")
    if instruction is None and isinstance(config.get("descriptions"), list):  # the oldest Terminal-Bench layout
        instruction = next((d.get("description") for d in config["descriptions"]
                            if isinstance(d, dict) and d.get("key") == "base"), None)
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFileError(f"{yaml_path}: no 'instruction'")
    return instruction


def _tb1_workspace(root: Path) -> _Workspace:
    """The task directory itself, less the task's own files and tests/, and the plan of its Dockerfile."""
    environment, ex, n = _read_tree(root, "", skip=_TB1_OWN | {"tests"})
    workspace = _Workspace(environment, [f"environment/{p}" for p in ex], [x.lstrip("/") for x in n])
    if (root / "Dockerfile").is_file():
        ignore = (root / ".dockerignore").read_text(errors="replace") if (root / ".dockerignore").is_file() else ""
        workspace.plan, n = _plan((root / "Dockerfile").read_text(encoding="utf-8", errors="replace"), "Dockerfile",
                                  environment, workspace.executable, "environment/", ignore)
        workspace.notes += n
    return workspace


def _load_terminal_bench(root: Path) -> TerminalTask:
    yaml_path, run_tests = root / "task.yaml", root / "run-tests.sh"
    config = _read_task_yaml(yaml_path)
    instruction = _tb1_instruction(config, yaml_path)
    if not run_tests.is_file():
        raise TaskFileError(f"{run_tests}: missing (every Terminal-Bench task needs run-tests.sh)")
    if not (root / "tests").is_dir():
        raise TaskFileError(f"{root / 'tests'}: missing (every Terminal-Bench task needs tests/)")
    where = str(yaml_path)
    workspace = _tb1_workspace(root)
    notes = workspace.notes
    tests, ex, n = _read_tree(root / "tests", "tests")
    notes += n
    executable = workspace.executable + [f"tests/{p}" for p in ex]
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
    _check_size(root.name, workspace.files, tests)
    return TerminalTask(
        id=root.name,
        instruction=instruction,
        environment=workspace.files,
        tests=tests,
        solution=solution,
        agent_timeout_s=_number(config, "max_agent_timeout_sec", 360.0, where),
        verifier_timeout_s=_number(config, "max_test_timeout_sec", 60.0, where),
        metadata={k: v for k, v in config.items() if k not in ("instruction", "descriptions")},
        notes=tuple(notes),
        test_script="run-tests.sh",
        executable=tuple(executable),
        format="terminal-bench",
        source=str(root),
        build=workspace.plan,
        env=dict(workspace.plan.env) if workspace.plan else {},
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
