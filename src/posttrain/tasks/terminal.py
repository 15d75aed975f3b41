"""The `terminal` domain: Harbor-format terminal tasks as `Task`s, and the verifier that judges them.

Covers: `terminal_task_of(task)` (the `TerminalTask` a `Task` carries in `meta["terminal_task"]`),
`TerminalVerifier` (the `rewards.Verifier` protocol: a response is a shell script, run as the agent
in a fresh workspace, opened where the run's sessions open (`sandbox.sandboxes.current_sandboxes`: the
run's `[sandbox]` back end, or this process's local sandbox), then the task's tests judge the workspace;
the oracle's `solve.sh` is the gold response, the empty script the do-nothing one), and the registry entries
`terminal` (the built-in suite) and `terminal:<dir>` (a directory of Harbor or Terminal-Bench 1 task directories).

How an agent episode is judged: the runtime holds the session it acted in, so it calls
`tasks.harbor.verify_workspace(session, terminal_task_of(task))` itself; `TerminalVerifier` is the
single-response form of the same check (same tests, same reward rules), which `posttrain tasks
validate` and single-turn evaluation use.
Does not cover: loading task directories or the workspace contract (`tasks/harbor.py`), the agent loop.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.tasks.domains import Domain, SamplingDefaults, register_domain, reject_unknown
from posttrain.tasks.harbor import (
    TaskLoadError,
    TerminalTask,
    load_terminal_suite,
    open_workspace,
    run_solution,
    verify_workspace,
)
from posttrain.tasks.harbor_steps import TerminalStep, combine
from posttrain.tasks.jsonl import ListSource, TaskFileError
from posttrain.types import Task, Verdict, VerdictStatus

TASK_KEY = "terminal_task"  # Task.meta key holding the TerminalTask
NULL_RESPONSE = ""  # the do-nothing agent: a script that changes nothing
_FENCE = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.DOTALL)


def terminal_task_of(task: Task) -> TerminalTask:
    tt = task.meta.get(TASK_KEY)
    if not isinstance(tt, TerminalTask):
        raise TaskFileError(f"task {task.id!r} is not a terminal task (no meta[{TASK_KEY!r}])")
    return tt


def as_task(tt: TerminalTask, suite: str) -> Task:
    """The registry's view of a terminal task: the instruction is the prompt, solve.sh the gold answer."""
    # What this sandbox does not apply of the task (skipped Dockerfile steps, unsupported task.toml fields):
    # `tasks validate` prints it per task
    notes = [n for n in tt.notes if "is not built as an image" not in n]
    return Task(id=tt.id, prompt=tt.instruction, answer=tt.solution,
                meta={TASK_KEY: tt, "suite": suite, "rollouter": "agent", "notes": notes,
                      **{k: v for k, v in tt.metadata.items() if k in ("difficulty", "category")}})


def script_of(response: str) -> str:
    """The shell script a response holds: its last ```bash fenced block, else the whole text."""
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


@dataclass
class TerminalVerifier:
    """Runs each response as a bash script in a fresh workspace of its task, then the task's tests.

    >>> verifier = TerminalVerifier()
    >>> t = load_domain("terminal").suite().tasks[0]                       # doctest: +SKIP
    >>> safe_verify(verifier, t, t.answer).passed, safe_verify(verifier, t, "").passed   # doctest: +SKIP
    (True, False)
    """

    max_concurrency: int = 8  # workspaces at once (most of a task's time is spent waiting on its processes)
    name: str = "terminal"
    environment: str = "sandbox"
    """"sandbox" (the default), or "podman" / "docker": the task's Dockerfile built and run (`tasks/container.py`)."""
    base_image: str | None = None
    """With a container engine: a local image that replaces each Dockerfile's first FROM (no registry pull)."""

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        if self.environment != "sandbox":
            from posttrain.tasks.container import EngineRunner, judge_in_container

            runner = EngineRunner(self.environment, base=self.base_image)
            gate = asyncio.Semaphore(self.max_concurrency)

            async def in_container(task: Task, response: str) -> Verdict:
                async with gate:
                    return await judge_in_container(runner, terminal_task_of(task), script_of(response))

            return list(await asyncio.gather(*(in_container(t, r) for t, r in zip(tasks, responses))))
        from posttrain.sandbox.sandboxes import current_sandboxes

        try:
            sandbox = current_sandboxes().workspaces  # the run's `[sandbox]` back end (a local sandbox, Ray workers)
        except Exception as exc:  # noqa: BLE001 - no sandbox here: infrastructure, never a wrong answer
            return [Verdict(0.0, False, VerdictStatus.ERROR, details=f"sandbox unavailable: {exc}") for _ in tasks]
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(task: Task, response: str) -> Verdict:
            async with gate:
                return await judge_script(sandbox, terminal_task_of(task), script_of(response))

        return list(await asyncio.gather(*(one(t, r) for t, r in zip(tasks, responses))))


async def judge_script(sandbox: Any, tt: TerminalTask, script: str, *, network: bool | None = None) -> Verdict:
    """A fresh workspace, `script` run in it as the agent (under `agent_timeout_s`), then `verify_workspace`;
    a multi-step task goes step by step (`judge_steps`). `network` defaults to the task's `allow_internet`."""
    from dataclasses import replace

    session = await sandbox.in_worker(lambda: open_workspace(sandbox, tt, network=network))
    try:
        if tt.steps:
            return await judge_steps(session, tt, script)
        acted = None
        if script.strip():
            own = tuple(p for p in tt.executable if not p.startswith("solution/"))
            acted = await run_solution(session, tt if script == tt.solution else replace(
                tt, solution=script, solution_files={}, executable=own))
        verdict = await verify_workspace(session, tt)
        if acted is not None and not acted.ok:  # the script's own failure explains a low reward
            verdict.info["script_status"] = acted.status.value
            verdict.details += f"\n[the script: {acted.status.value}, exit {acted.exit_code}] {acted.stderr[-500:]}"
        return verdict
    finally:
        await sandbox.in_worker(session.close)


def step_task(tt: TerminalTask, step: TerminalStep) -> TerminalTask:
    """The single-step task a step of `tt` is judged as: its tests, oracle, timeouts and verifier env."""
    from dataclasses import replace

    prefixed = tuple(p for p in step.executable if p.startswith(("tests/", "solution/")))
    return replace(tt, tests=step.tests, solution=step.solution, solution_files=step.solution_files,
                   executable=prefixed, agent_timeout_s=step.agent_timeout_s, verifier_timeout_s=step.verifier_timeout_s,
                   metadata={**tt.metadata, "verifier_env": {**tt.metadata.get("verifier_env", {}), **step.verifier_env}},
                   steps=())


async def judge_steps(session: Any, tt: TerminalTask, script: str) -> Verdict:
    """Harbor's multi-step run on one workspace: per step, its `workdir/` uploaded to WORKDIR (its `setup.sh` run
    there), the agent's act (the oracle: the step's `solve.sh`; another script acts in the first step only), and
    the step's tests; a step below its `min_reward` stops the task. The reward combines the steps'
    (`harbor_steps.combine`); each step's is in the breakdown. A step that cannot be judged is an ERROR verdict."""
    from dataclasses import replace

    from posttrain.tasks.harbor_workspace import chmod_x, task_prefix

    oracle = script == tt.solution
    rewards: list[float] = []
    details = []
    last: Verdict | None = None
    for i, step in enumerate(tt.steps):
        st = step_task(tt, step)
        if step.workdir_files:
            base = tt.workdir[len("/app"):].strip("/")
            files = {f"{base}/{rel}".lstrip("/"): data for rel, data in step.workdir_files.items()}
            execs = [f"/work/{base}/{p.split('/', 1)[1]}".replace("//", "/") for p in step.executable
                     if p.startswith("workdir/")]
            setup = "bash setup.sh" if "setup.sh" in step.workdir_files else "true"
            # /logs is Harbor's, writable during a step (setup.sh may log there): made first, so it is bound
            await session.aexec("mkdir -p /work/.harbor/logs")
            r = await session.aexec(f"{chmod_x(execs)}{task_prefix(tt)}{setup}", files=files)
            if not r.ok:
                return Verdict(0.0, False, VerdictStatus.ERROR, details=f"terminal:{tt.id}: step {step.name}: its "
                               f"workdir/setup.sh failed: {r.status.value} {r.stderr[-300:]}")
        if oracle and step.solution is not None:
            await run_solution(session, st)
        elif not oracle and i == 0 and script.strip():
            await run_solution(session, replace(st, solution=script, solution_files={},
                                                executable=tuple(p for p in st.executable if p.startswith("tests/"))))
        last = await verify_workspace(session, st)
        details.append(f"[{step.name}] {last.details.splitlines()[0] if last.details else ''}")
        if last.status is not VerdictStatus.OK:
            last.details = f"step {step.name}: {last.details}"
            return last
        rewards.append(last.score)
        if step.min_reward is not None and last.score < step.min_reward:
            details.append(f"[{step.name}] reward {last.score:g} < min_reward {step.min_reward:g}: the task stops")
            break
    assert last is not None
    score = combine(rewards, len(tt.steps), tt.step_strategy)
    verdict = Verdict(score, score >= 1.0 - 1e-9, VerdictStatus.OK, verifier=last.verifier,
                      details=f"terminal:{tt.id}: reward {score:g} ({tt.step_strategy} of {len(tt.steps)} steps)\n"
                      + "\n".join(details), info={**last.info, "steps_run": len(rewards)})
    verdict.breakdown = {st.name: r for st, r in zip(tt.steps, rewards)}
    return verdict


_OPTIONS = ("limit", "held_out_fraction", "seed", "environment", "base_image")


def terminal_domain(spec: str, tasks: list[TerminalTask], errors: list[TaskLoadError], options: dict[str, Any]) -> Domain:
    """A benchmark, as HumanEval: every task is in the evaluation view; `held_out_fraction` splits what
    training draws from (by a hash of each id)."""
    reject_unknown(spec, options, _OPTIONS)
    items = [as_task(t, spec) for t in tasks]
    if not items:
        raise TaskFileError(f"{spec}: no task loaded" + "".join(f"\n  {e.path}: {e.message}" for e in errors))
    limit = options.get("limit")
    source = ListSource(items, name=spec, held_out_fraction=options.get("held_out_fraction") or 0.0)
    environment = str(options.get("environment") or "sandbox")
    if environment not in ("sandbox", "podman", "docker"):
        raise TaskFileError(f"{spec}: environment must be sandbox, podman or docker, got {environment!r}")
    verifier = TerminalVerifier(environment=environment, base_image=options.get("base_image"))
    return Domain(spec, source, verifier,
                  evaluation=lambda n, _seed: items[:n], sampling=SamplingDefaults(max_tokens=1024),
                  rollouter="agent",  # the default AgentSpec (agent/spec.py) runs the TerminalTask it carries
                  description=f"{len(items[:limit])} terminal tasks (Harbor format)",
                  meta={"limit": limit, "tasks": len(items), "null_response": NULL_RESPONSE,
                        "load_errors": [vars(e) for e in errors]}, eval_limit=limit, eval_seed=options.get("seed", 0))


@register_domain("terminal", "built-in terminal tasks in the Harbor format: an agent acts in the sandbox, tests/test.sh judges")
def _builtin(**options: Any) -> Domain:
    return terminal_domain("terminal", load_terminal_suite("terminal"), [], options)


@register_domain("terminal:", "a directory of Harbor (task.toml) or Terminal-Bench 1 (task.yaml) task directories")
def _directory(path: str, **options: Any) -> Domain:
    errors: list[TaskLoadError] = []
    tasks = load_terminal_suite(path, errors=errors)
    return terminal_domain(f"terminal:{path}", tasks, errors, options)
