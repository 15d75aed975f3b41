"""The container back end (`tasks/container.py`) against a faked engine: the flow (build, start, the script in the
image's WORKDIR, the tests in /tests, the reward read with the sandbox's rules, the container removed whatever
happens), its failures as ERROR/TIMEOUT verdicts, and the podman/docker command lines it would run."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from posttrain.tasks.container import EngineRunner, RunOutput, judge_in_container
from posttrain.tasks.harbor import load_terminal_task
from posttrain.types import VerdictStatus

PASSED = RunOutput(0, "ok")


class FakeEngine:
    """Records every call; answers the test script and the reward read as told."""

    def __init__(self, build_rc=0, test=PASSED, reward="reward.txt\0" + "1\n\0", fail_copy=False):
        self.calls: list[tuple] = []
        self.build_rc, self.test, self.reward, self.fail_copy = build_rc, test, reward, fail_copy
        self.copied: dict[str, dict[str, bytes]] = {}

    def build(self, context: Path, tag: str, timeout_s: float) -> RunOutput:
        self.calls.append(("build", tag, sorted(p.name for p in context.iterdir())))
        return RunOutput(self.build_rc, "", "" if self.build_rc == 0 else "step 2/3: no such image")

    def start(self, tag, network):
        self.calls.append(("start", tag, network))
        return "c1"

    def exec(self, container, script, *, env, cwd, timeout_s):
        self.calls.append(("exec", script, cwd, dict(env)))
        if script.startswith("mkdir -p /logs/verifier"):
            return self.test
        if script.startswith("for f in reward.txt"):
            return RunOutput(0, self.reward)
        return RunOutput(0)

    def copy_in(self, container, source: Path, dest):
        if self.fail_copy:
            raise RuntimeError("podman cp: no space left")
        self.copied[dest] = {p.relative_to(source).as_posix(): p.read_bytes() for p in source.rglob("*") if p.is_file()}
        self.calls.append(("copy_in", dest))

    def remove(self, container, tag=None):
        self.calls.append(("remove", container, tag))


def task_dir(root: Path) -> Path:
    d = root / "ctask"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("do it\n")
    (d / "task.toml").write_text("[environment]\nallow_internet = false\n[environment.env]\nMODE = 'x'\n"
                                 "[verifier.env]\nLEVEL = '3'\n")
    (d / "environment" / "Dockerfile").write_text("FROM python:3.13\nWORKDIR /app/src\nCOPY a.txt ./\nENV K=v\n")
    (d / "environment" / "a.txt").write_text("a\n")
    (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (d / "solution" / "solve.sh").write_text("echo solved\n")
    (d / "solution" / "helper.py").write_text("print(1)\n")
    return d


def test_the_oracle_runs_in_the_image_then_the_tests(tmp_path):
    task = load_terminal_task(task_dir(tmp_path))
    engine = FakeEngine()
    v = asyncio.run(judge_in_container(engine, task, task.solution))
    assert v.passed and v.status is VerdictStatus.OK and v.info["environment"] == "container", v.details
    kinds = [c[0] for c in engine.calls]
    assert kinds == ["build", "start", "copy_in", "exec", "exec", "copy_in", "exec", "exec", "remove"], kinds
    assert engine.calls[0][2] == ["Dockerfile", "a.txt"] and engine.calls[1][2] is False  # offline: no network
    solve = engine.calls[3]
    assert solve[1] == "bash /solution/solve.sh" and solve[2] == "/app/src" and solve[3] == {"K": "v", "MODE": "x"}
    assert set(engine.copied["/solution"]) == {"solve.sh", "helper.py"} and set(engine.copied["/tests"]) == {"test.sh"}
    tests = engine.calls[6]
    assert tests[3]["TEST_DIR"] == "/tests" and tests[3]["LEVEL"] == "3" and tests[2] == "/app/src"
    assert engine.calls[-1] == ("remove", "c1", engine.calls[0][1])


def test_doing_nothing_runs_only_the_tests_and_a_multi_metric_reward_is_kept(tmp_path):
    task = load_terminal_task(task_dir(tmp_path))
    engine = FakeEngine(reward='reward.json\0{"a": 1, "b": 0}\0')
    v = asyncio.run(judge_in_container(engine, task, ""))
    assert "/solution" not in engine.copied
    assert (v.score, v.breakdown, v.passed) == (0.5, {"a": 1.0, "b": 0.0}, False)


@pytest.mark.parametrize("engine,status,text", [
    (FakeEngine(build_rc=1), VerdictStatus.ERROR, "could not be built: step 2/3"),
    (FakeEngine(test=RunOutput(None, "...")), VerdictStatus.TIMEOUT, "ran past"),
    (FakeEngine(reward=""), VerdictStatus.ERROR, "wrote no reward"),
])
def test_failures_are_verdicts_never_scores(tmp_path, engine, status, text):
    task = load_terminal_task(task_dir(tmp_path))
    v = asyncio.run(judge_in_container(engine, task, task.solution))
    assert v.status is status and not v.passed and text in v.details, v.details
    if status is not VerdictStatus.ERROR or "built" not in text:
        assert engine.calls[-1][0] == "remove"


def test_the_container_is_removed_when_the_engine_fails_midway(tmp_path):
    task = load_terminal_task(task_dir(tmp_path))
    engine = FakeEngine(fail_copy=True)
    with pytest.raises(RuntimeError, match="no space left"):
        asyncio.run(judge_in_container(engine, task, task.solution))
    assert engine.calls[-1][0] == "remove"


def test_engine_command_lines(tmp_path, monkeypatch):
    seen = []

    def fake_run(argv, **kw):
        seen.append(argv[1:])
        return subprocess.CompletedProcess(argv, 0, b"cid\n", b"")

    monkeypatch.setattr("posttrain.tasks.container.shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("posttrain.tasks.container.subprocess.run", fake_run)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("# c\nFROM python:3.13 AS x\nRUN true\n")
    EngineRunner("podman", base="localhost/base").build(ctx, "t", 10)
    assert seen[-1] == ["build", "-t", "t", "-f", str(ctx / "Dockerfile"), "--from", "localhost/base", str(ctx)]
    EngineRunner("docker", base="localhost/base").build(ctx, "t", 10)  # no --from: the Dockerfile is rewritten
    assert "FROM localhost/base\n" in (ctx / "Dockerfile").read_text() and "--from" not in seen[-1]
    assert EngineRunner("podman").start("t", network=False) == "cid"
    assert seen[-1] == ["run", "-d", "--rm", "--network", "none", "--entrypoint", "sleep", "t", "infinity"]
    with pytest.raises(ValueError, match="environment must be one of podman, docker"):
        EngineRunner("lxc")


def test_an_empty_build_context_builds(tmp_path):
    d = task_dir(tmp_path)
    (d / "environment" / "a.txt").unlink()
    (d / "environment" / "Dockerfile").write_text("FROM python:3.13\nWORKDIR /app\n")
    engine = FakeEngine()
    v = asyncio.run(judge_in_container(engine, load_terminal_task(d), ""))
    assert engine.calls[0][2] == ["Dockerfile"] and v.status is VerdictStatus.OK
