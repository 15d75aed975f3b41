"""Terminal tasks in the Harbor format, loaded without Docker and run in the sandbox: the one import.

The contract the agent runtime codes against, in one place:

    task = load_terminal_task("path/to/task")            # or load_terminal_suite("terminal")
    with open_workspace(sandbox, task) as session:        # /work = Harbor's /app, holding environment/
        ...  # the agent acts: await session.aexec(cmd) runs in /app; it never sees tests/ or solution/
        verdict = await verify_workspace(session, task)   # tests copied in now; reward.txt / reward.json

`run_solution(session, task)` runs the oracle instead of an agent. The records and loaders live in
`tasks/harbor_task.py`, the workspace and the verifier (and their threat model) in
`tasks/harbor_workspace.py`; the `terminal` domain and its `Verifier` in `tasks/terminal.py`.
"""

from __future__ import annotations

from posttrain.tasks.harbor_task import (
    BUILTIN_SUITES,
    TaskLoadError,
    TerminalTask,
    builtin_suite_dir,
    load_terminal_suite,
    load_terminal_task,
)
from posttrain.tasks.harbor_workspace import (
    Reward,
    open_workspace,
    parse_reward,
    run_solution,
    task_prefix,
    verify_workspace,
)

__all__ = [
    "BUILTIN_SUITES",
    "Reward",
    "TaskLoadError",
    "TerminalTask",
    "builtin_suite_dir",
    "load_terminal_suite",
    "load_terminal_task",
    "open_workspace",
    "parse_reward",
    "run_solution",
    "task_prefix",
    "verify_workspace",
]
