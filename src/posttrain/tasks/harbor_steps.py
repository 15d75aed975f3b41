"""Harbor's multi-step tasks (`[[steps]]` in task.toml, `steps/<name>/`): the records and their loader.

Covers: `TerminalStep` (one step: its instruction, its tests (merged over the task's shared `tests/`), its oracle,
the `workdir/` files uploaded to WORKDIR before the agent acts (a `setup.sh` there runs, then deletes itself),
its timeouts, its verifier env, its `min_reward`), `load_steps(root, config)`, and `combine(rewards, strategy)`:
the task's reward from the steps' (`multi_step_reward_strategy` "mean", the default, or "final"; a step below its
`min_reward` stops the task and the steps not reached score 0). Step `healthcheck` and `artifacts` are notes.
Does not cover: running the steps (`tasks/terminal.py` `judge_steps`), single-step tasks (`harbor_task.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.tasks.jsonl import TaskFileError

STRATEGIES = ("mean", "final")


@dataclass(frozen=True)
class TerminalStep:
    name: str
    instruction: str
    tests: dict[str, bytes]
    """The task's shared tests/ with this step's tests/ over them (as Harbor merges them into /tests)."""
    solution: str | None = None
    solution_files: dict[str, bytes] = field(default_factory=dict)
    workdir_files: dict[str, bytes] = field(default_factory=dict)
    """Uploaded to WORKDIR before the agent acts (`setup.sh` among them runs there first)."""
    executable: tuple[str, ...] = ()
    """`tests/...`, `solution/...`, `workdir/...` paths of this step with the executable bit."""
    agent_timeout_s: float = 600.0
    verifier_timeout_s: float = 600.0
    verifier_env: dict[str, str] = field(default_factory=dict)
    min_reward: float | None = None


def _seconds(table: Any, default: float, where: str) -> float:
    value = table.get("timeout_sec", default) if isinstance(table, dict) else default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise TaskFileError(f"{where}: timeout_sec must be a positive number, got {value!r}")
    return float(value)


def load_steps(root: Path, config: dict[str, Any], read_tree: Any, shared_tests: dict[str, bytes],
               defaults: tuple[float, float]) -> tuple[tuple[TerminalStep, ...], list[str]]:
    """The steps of a multi-step task directory, in task.toml's order, and the notes on what is not applied.
    `read_tree(dir, what)` is the loader's reader (files, executable paths, notes)."""
    where = str(root / "task.toml")
    steps, notes = [], []
    strategy = config.get("multi_step_reward_strategy", "mean")
    if strategy not in STRATEGIES:
        raise TaskFileError(f"{where}: multi_step_reward_strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    for i, table in enumerate(config["steps"]):
        if not isinstance(table, dict) or not isinstance(table.get("name"), str) or not table["name"]:
            raise TaskFileError(f"{where}: steps[{i}] needs a name")
        name = table["name"]
        d = root / "steps" / name
        if not (d / "instruction.md").is_file():
            raise TaskFileError(f"{d / 'instruction.md'}: missing")
        tests, ex, n = read_tree(d / "tests", f"steps/{name}/tests") if (d / "tests").is_dir() else ({}, [], [])
        executable = [f"tests/{p}" for p in ex]
        notes += n
        merged = {**shared_tests, **tests}
        if "test.sh" not in merged:
            raise TaskFileError(f"{d / 'tests' / 'test.sh'}: missing (every step needs a test.sh, its own or shared)")
        solution, solution_files = None, {}
        if (d / "solution" / "solve.sh").is_file():
            solution_files, ex, n = read_tree(d / "solution", f"steps/{name}/solution")
            executable += [f"solution/{p}" for p in ex]
            notes += n
            solution = solution_files.pop("solve.sh").decode("utf-8", "replace")
        workdir, ex, n = read_tree(d / "workdir", f"steps/{name}/workdir") if (d / "workdir").is_dir() else ({}, [], [])
        executable += [f"workdir/{p}" for p in ex]
        notes += n
        verifier = table.get("verifier", {})
        env = verifier.get("env", {}) if isinstance(verifier, dict) else {}
        min_reward = table.get("min_reward")
        if min_reward is not None and (isinstance(min_reward, bool) or not isinstance(min_reward, (int, float))):
            raise TaskFileError(f"{where}: steps[{i}].min_reward must be a number, got {min_reward!r}")
        for key in sorted(set(table) - {"name", "min_reward", "agent", "verifier"}):
            notes.append(f"task.toml steps[{i}] ({name}) {key}: not supported here, ignored")
        steps.append(TerminalStep(
            name=name, instruction=(d / "instruction.md").read_text(encoding="utf-8", errors="replace"), tests=merged,
            solution=solution, solution_files=solution_files, workdir_files=workdir, executable=tuple(executable),
            agent_timeout_s=_seconds(table.get("agent", {}), defaults[0], where),
            verifier_timeout_s=_seconds(verifier, defaults[1], where),
            verifier_env={str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
            min_reward=None if min_reward is None else float(min_reward)))
    if not steps:
        raise TaskFileError(f"{where}: [[steps]] is empty")
    if "artifacts" in config:
        notes.append("task.toml artifacts: not collected here")
    return tuple(steps), notes


def combine(rewards: list[float], total_steps: int, strategy: str) -> float:
    """The task's reward from the rewards of the steps reached (those not reached score 0)."""
    if strategy == "final":
        return rewards[-1] if len(rewards) == total_steps else 0.0
    return sum(rewards) / total_steps
