"""The `demo` agent suite: three small `AgentTask`s, each with its hidden tests and an oracle solution.

Covers: tasks that exercise the runtime end to end on any machine with the sandbox (fix a bug from a
failing test, write a file to a spec, turn a log into a count), for `posttrain agent run --suite demo`
and the tests. Does not cover: a benchmark of agent skill (terminal tasks are, `posttrain.tasks.harbor`).
"""

from __future__ import annotations

from posttrain.agent.env import AgentTask

_CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
_CALC_TEST = "import calc\nassert calc.add(2, 3) == 5, calc.add(2, 3)\nassert calc.mul(2, 3) == 6\nprint('ok')\n"
_LOG = "".join(f"2026-01-01 12:00:{i:02d} {'ERROR' if i % 3 == 0 else 'INFO'} request {i}\n" for i in range(40))


def demo_tasks() -> list[AgentTask]:
    return [
        AgentTask(
            "demo/fix-add", "calc.add returns the wrong result. Fix calc.py so that the tests in test_calc.py pass.",
            files={"calc.py": _CALC, "test_calc.py": _CALC_TEST},
            tests={"test_calc.py": _CALC_TEST}, test_command="python3 test_calc.py",
            visible_test_command="python3 test_calc.py",
            solution="sed -i 's/return a - b/return a + b/' calc.py",
        ),
        AgentTask(
            "demo/hello-file", "Create a file hello.txt whose only line is: hello world",
            tests={".check.sh": "test \"$(cat hello.txt)\" = 'hello world'\n"}, test_command="sh .check.sh",
            solution="echo 'hello world' > hello.txt",
        ),
        AgentTask(
            "demo/count-errors", "app.log holds one request per line. Write the number of ERROR lines, and nothing "
            "else, to errors.txt.",
            files={"app.log": _LOG},
            tests={".check.sh": "test \"$(tr -d ' \\n' < errors.txt)\" = 14\n"}, test_command="sh .check.sh",
            solution="grep -c ERROR app.log > errors.txt",
            documents={"log format": "Each line: date, time, level (INFO or ERROR), the request."},
        ),
    ]
