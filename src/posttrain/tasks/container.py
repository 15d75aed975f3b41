"""The container back end of terminal tasks: the task's Dockerfile built as an image, the agent's script and the tests
run in a container of it (`environment = "podman"` or `"docker"`), for tasks that need their image's packages or
interpreter. The in-sandbox path (`harbor_workspace.py`) stays the default.

Covers: `ContainerRunner`, the protocol a container engine satisfies (build, start, exec, copy in, remove), with a
runnable fake in the tests; `EngineRunner`, the `podman` / `docker` command line; `judge_in_container(runner, task,
script)`: build the image (the first `FROM` may be replaced by a local `base` image, for machines that reach no
registry), start a container (no network unless the task allows it), copy the oracle or the agent's script to
/solution and run it in the image's WORKDIR, copy the tests to /tests, run them, read /logs/verifier/reward.txt or
reward.json with the same rules as the sandbox (`harbor_workspace.task_reward`), and remove the container, whatever
happened. A build failure or an engine that is missing is an ERROR verdict (infrastructure), never a score.
Does not cover: agent episodes in a container (the agent runtime drives sandbox sessions), multi-step tasks,
container isolation beyond the engine's own (rootful podman: root in the container is root on the host kernel).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from posttrain.tasks.harbor_task import TerminalTask
from posttrain.types import Verdict, VerdictStatus

ENGINES = ("podman", "docker")
_READ = ("for f in reward.txt reward.json; do p=/logs/verifier/$f; [ -f \"$p\" ] && "
         "{ printf '%s\\0' \"$f\"; head -c 65536 \"$p\"; printf '\\0'; }; done; true")


@dataclass(frozen=True)
class RunOutput:
    exit_code: int | None
    """None when the command ran past its timeout (and was killed)."""
    stdout: str = ""
    stderr: str = ""


class ContainerRunner(Protocol):
    """What `judge_in_container` needs of an engine. `EngineRunner` is podman's or docker's command line.

    >>> runner = EngineRunner("podman", base="localhost/posttrain-base")        # doctest: +SKIP
    >>> verdict = asyncio.run(judge_in_container(runner, task, task.solution))   # doctest: +SKIP
    """

    def build(self, context: Path, tag: str, timeout_s: float) -> RunOutput: ...

    def start(self, tag: str, network: bool) -> str: ...

    def exec(self, container: str, script: str, *, env: dict[str, str], cwd: str, timeout_s: float) -> RunOutput: ...

    def copy_in(self, container: str, source: Path, dest: str) -> None: ...

    def remove(self, container: str, tag: str | None = None) -> None: ...


@dataclass
class EngineRunner:
    """`podman` or `docker` by its command line. `base`: an image that replaces the Dockerfile's first FROM
    (`podman build --from`; docker has no such flag: the Dockerfile is rewritten)."""

    engine: str = "podman"
    base: str | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"environment must be one of {', '.join(ENGINES)}, got {self.engine!r}")

    def _run(self, args: list[str], timeout_s: float, stdin: bytes | None = None) -> RunOutput:
        exe = shutil.which(self.engine)
        if exe is None:
            return RunOutput(127, "", f"{self.engine}: not installed on this machine")
        try:
            p = subprocess.run([exe, *args], input=stdin, capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            return RunOutput(None, (exc.stdout or b"").decode(errors="replace"), (exc.stderr or b"").decode(errors="replace"))
        return RunOutput(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))

    def build(self, context: Path, tag: str, timeout_s: float) -> RunOutput:
        args = ["build", "-t", tag, "-f", str(context / "Dockerfile")]
        if self.base and self.engine == "podman":
            args += ["--from", self.base]
        elif self.base:
            text = (context / "Dockerfile").read_text()
            lines = text.splitlines()
            first = next(i for i, ln in enumerate(lines) if ln.strip().upper().startswith("FROM"))
            lines[first] = f"FROM {self.base}"
            (context / "Dockerfile").write_text("\n".join(lines) + "\n")
        return self._run([*args, str(context)], timeout_s)

    def start(self, tag: str, network: bool) -> str:
        out = self._run(["run", "-d", "--rm", *([] if network else ["--network", "none"]), "--entrypoint", "sleep",
                         tag, "infinity"], 120)
        if out.exit_code != 0:
            raise RuntimeError(f"{self.engine} run: {out.stderr.strip()[-300:]}")
        return out.stdout.strip()

    def exec(self, container: str, script: str, *, env: dict[str, str], cwd: str, timeout_s: float) -> RunOutput:
        flags = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
        return self._run(["exec", "-i", "-w", cwd, *flags, container, "bash", "-s"], timeout_s, script.encode())

    def copy_in(self, container: str, source: Path, dest: str) -> None:
        out = self._run(["cp", f"{source}/.", f"{container}:{dest}"], 120)
        if out.exit_code != 0:
            raise RuntimeError(f"{self.engine} cp: {out.stderr.strip()[-300:]}")

    def remove(self, container: str, tag: str | None = None) -> None:
        self._run(["rm", "-f", container], 60)
        if tag:  # untag only: tasks with the same Dockerfile share one image, which a forced removal would take away
            self._run(["rmi", tag], 60)


def _write(root: Path, files: dict[str, bytes], executable: list[str]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for rel in executable:
        if (root / rel).exists():
            (root / rel).chmod(0o755)
    return root


def _context(task: TerminalTask, root: Path) -> Path:
    """The build context: the environment files and the Dockerfile (Harbor: environment/; TB1: the task root
    without its tests and solution)."""
    src = Path(task.source)
    dockerfile = src / "environment" / "Dockerfile" if task.format == "harbor" else src / "Dockerfile"
    execs = [p.split("/", 1)[1] for p in task.executable if p.startswith("environment/")]
    root.mkdir(parents=True, exist_ok=True)  # an empty context is a context
    _write(root, task.environment, execs)
    shutil.copyfile(dockerfile, root / "Dockerfile")
    return root


def _reward_files(text: str) -> dict[str, dict[str, str]]:
    parts = text.split("\0")
    return {parts[i]: {"text": parts[i + 1]} for i in range(0, len(parts) - 1, 2) if parts[i]}


async def judge_in_container(runner: ContainerRunner, task: TerminalTask, script: str, *,
                             network: bool | None = None, build_timeout_s: float = 1800.0) -> Verdict:
    """Build the task's image, run `script` (the oracle when it is `task.solution`; nothing when empty) in a
    container of it, then the tests; the verdict follows the sandbox's reward rules."""
    import asyncio

    return await asyncio.to_thread(_judge, runner, task, script, task.allow_internet if network is None else network,
                                   build_timeout_s)


def _judge(runner: ContainerRunner, task: TerminalTask, script: str, network: bool, build_timeout_s: float) -> Verdict:
    from posttrain.tasks.harbor_workspace import task_reward, tests_hash

    start = time.perf_counter()
    name = f"terminal:{task.id}"

    def verdict(score: float, status: VerdictStatus, details: str, **info: object) -> Verdict:
        return Verdict(score, status is VerdictStatus.OK and score >= 1.0 - 1e-9, status, verifier="terminal-container",
                       details=details, info={**info, "tests_hash": tests_hash(task), "environment": "container"},
                       latency_s=time.perf_counter() - start)

    if task.steps:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: multi-step tasks run in the sandbox only")
    if task.build is None:
        return verdict(0.0, VerdictStatus.ERROR, f"{name}: no Dockerfile to build")
    tag = f"localhost/posttrain-task-{task.id.lower()}:{tests_hash(task)}"
    with tempfile.TemporaryDirectory(prefix="posttrain-container-") as tmp:
        built = runner.build(_context(task, Path(tmp) / "context"), tag, build_timeout_s)
        if built.exit_code != 0:
            return verdict(0.0, VerdictStatus.ERROR, f"{name}: the image could not be built: "
                           f"{(built.stderr or built.stdout).strip()[-600:]}")
        try:
            container = runner.start(tag, network)
        except RuntimeError as exc:
            return verdict(0.0, VerdictStatus.ERROR, f"{name}: {exc}")
        try:
            env = {**task.env}
            if script.strip():
                own = script == task.solution
                files = {"solve.sh": script.encode(), **(task.solution_files if own else {})}
                runner.copy_in(container, _write(Path(tmp) / "solution", files, []), "/solution")
                acted = runner.exec(container, "bash /solution/solve.sh", env=env, cwd=task.workdir,
                                    timeout_s=task.agent_timeout_s)
                runner.exec(container, "rm -rf /solution", env=env, cwd="/", timeout_s=60)
            else:
                acted = None
            execs = [p.split("/", 1)[1] for p in task.executable if p.startswith("tests/")]
            runner.copy_in(container, _write(Path(tmp) / "tests", task.tests, execs), "/tests")
            env.update({"TEST_DIR": "/tests", **{str(k): str(v) for k, v in task.metadata.get("verifier_env", {}).items()}})
            run = runner.exec(container, f"mkdir -p /logs/verifier && exec bash /tests/{task.test_script}", env=env,
                              cwd=task.workdir, timeout_s=task.verifier_timeout_s)
            output = (run.stdout + ("\n" + run.stderr if run.stderr else ""))[-2000:]
            info = {"exit_code": run.exit_code, "script_exit_code": acted.exit_code if acted else None}
            if run.exit_code is None:
                return verdict(0.0, VerdictStatus.TIMEOUT, f"{name}: {task.test_script} ran past its "
                               f"{task.verifier_timeout_s:g} s limit\n{output}", **info)
            read = runner.exec(container, _READ, env={}, cwd="/", timeout_s=60)
            reward = task_reward(task, _reward_files(read.stdout), run.exit_code, run.stdout)
            if isinstance(reward, str):
                return verdict(0.0, VerdictStatus.ERROR, f"{name}: {reward} (exit {run.exit_code})\n{output}", **info)
            v = verdict(reward.score, VerdictStatus.OK, f"{name}: reward {reward.score:g} from {reward.source} "
                        f"(container)\n{output}", reward_source=reward.source, **info)
            v.breakdown = reward.breakdown
            return v
        finally:
            runner.remove(container, tag)
