"""Published Terminal-Bench 1 and Harbor tasks run as published: fixtures of our own that reproduce each convention
those tasks rely on (none of their files are copied here): the workspace their Dockerfile describes, `find $TEST_DIR`
on a real /tests, `pwd -P` in /app, tar restoring uid 1000, the apt-get / curl | sh / uv / uvx test bootstrap
offline, and Harbor's multi-metric reward.json."""

from __future__ import annotations

import asyncio
from importlib import metadata

import pytest

from posttrain.tasks.harbor import load_terminal_task, open_workspace, run_solution, verify_workspace
from posttrain.types import VerdictStatus

# The boilerplate of Terminal-Bench 1's run-tests.sh: apt-get, uv's installer piped to sh, uv init/add/run
TB1_RUN_TESTS = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then echo "Error: No working directory set."; exit 1; fi
uv init
uv add pytest==8.4.1
uv run pytest $TEST_DIR/test_outputs.py -rA
"""
# Terminal-Bench 1's older setup-uv-pytest.sh / run-uv-pytest.sh pair, with `find $TEST_DIR`
TB1_RUN_TESTS_VENV = """#!/bin/bash
set -euo pipefail
apt-get update && apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
uv venv .tbench-testing
source .tbench-testing/bin/activate
uv pip install pytest==8.4.1
for f in $(find $TEST_DIR -name "*test*.py"); do uv run pytest "$f" -rA; done
"""
TB1_TEST = """import os, subprocess
def test_recovered():
    assert os.path.isdir("/app/recovered_logs")
    assert sorted(os.listdir("/app/raw_logs")) == ["a.log", "b.log"]
def test_answer():
    assert open("/app/answer.txt").read().strip() == "42"
def test_generator_was_removed():
    assert not os.path.exists("/app/generator.py") and os.path.exists("/app/data.txt")
def test_env_and_cwd():
    assert os.environ["DATA_MODE"] == "fast"
    assert subprocess.run(["pwd", "-P"], capture_output=True, text=True).stdout.strip() == "/app"
def test_owner_of_extracted_files():
    assert os.stat("/app/extracted/owned.txt").st_uid == 1000
"""
TB1_DOCKERFILE = """FROM ghcr.io/example/python-3-13:20250620
RUN apt-get update && apt-get install -y tmux asciinema
WORKDIR /app
ENV DATA_MODE=fast
COPY workspace/ ./
COPY task_deps/ /app/raw_logs/
COPY generator.py .
RUN mkdir -p /app/recovered_logs/ && python3 generator.py && rm -f generator.py
"""
TB1_SOLUTION = """#!/bin/bash
set -euo pipefail
echo 42 > /app/answer.txt
mkdir -p /tmp/pack/extracted && echo hi > /tmp/pack/extracted/owned.txt
tar -C /tmp/pack --owner=1000 --group=1000 -cf /tmp/pack.tar extracted
tar -xf /tmp/pack.tar -C /app
"""


def tb1_task(root, run_tests=TB1_RUN_TESTS):
    d = root / "tb1-published"
    (d / "tests").mkdir(parents=True)
    (d / "workspace").mkdir()
    (d / "task_deps").mkdir()
    (d / "task.yaml").write_text("instruction: |\n  Recover the logs and write the answer.\nparser_name: pytest\n"
                                 "max_agent_timeout_sec: 60\nmax_test_timeout_sec: 60\n")
    (d / "Dockerfile").write_text(TB1_DOCKERFILE)
    (d / "workspace" / "notes.md").write_text("notes\n")
    (d / "task_deps" / "a.log").write_text("a\n")
    (d / "task_deps" / "b.log").write_text("b\n")
    (d / "generator.py").write_text("open('data.txt', 'w').write('generated\\n')\n")
    (d / "run-tests.sh").write_text(run_tests)
    (d / "tests" / "test_outputs.py").write_text(TB1_TEST)
    (d / "solution.sh").write_text(TB1_SOLUTION)
    return d


HARBOR_TEST_SH = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh
source $HOME/.local/bin/env
correctness=0
style=0
uvx --with pytest==8.4.1 --with pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests/test_state.py -rA \\
  && correctness=1
grep -q '^def ' /app/greet.py && style=1
python3 -c "
import json
json.dump({'correctness': $correctness, 'style': $style}, open('/logs/verifier/reward.json', 'w'))
"
"""


def harbor_task(root):
    d = root / "harbor-published"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("Write /app/greet.py printing hello.\n")
    (d / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n'
                                 "[environment]\nbuild_timeout_sec = 600.0\ncpus = 1\nmemory_mb = 2048\n"
                                 'storage_mb = 10240\nallow_internet = false\nmcp_servers = []\n'
                                 '[environment.env]\nGREETING = "hello"\n')
    (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y python3\n"
                                                 "WORKDIR /app\n")
    (d / "environment" / "unused.txt").write_text("not copied: no COPY names it\n")
    (d / "tests" / "test.sh").write_text(HARBOR_TEST_SH)
    (d / "tests" / "test_state.py").write_text(
        "import subprocess\ndef test_greet():\n"
        "    assert subprocess.run(['python3', '/app/greet.py'], capture_output=True, text=True).stdout == 'hello\\n'\n")
    (d / "solution" / "solve.sh").write_text('printf "def main():\\n    print(\\"$GREETING\\")\\nmain()\\n" > greet.py\n')
    return d


def judge(sandbox, task, oracle):
    async def go():
        with open_workspace(sandbox, task, network=False) as s:
            listing = (await s.aexec("ls -A /app")).stdout.split()
            if oracle:
                r = await run_solution(s, task)
                assert r.ok, r
            return listing, await verify_workspace(s, task)
    return asyncio.run(go())


@pytest.mark.slow
@pytest.mark.parametrize("run_tests", [TB1_RUN_TESTS, TB1_RUN_TESTS_VENV], ids=["uv-init", "uv-venv-find"])
def test_terminal_bench_1_task_runs_as_published(tmp_path, sandbox, run_tests):
    task = load_terminal_task(tb1_task(tmp_path, run_tests))
    notes = "\n".join(task.notes)
    assert "RUN apt-get install -y tmux asciinema: not run" in notes
    listing, v = judge(sandbox, task, oracle=True)
    # COPY destinations, WORKDIR, RUN mkdir, the generator run then removed; tests and solution never copied in
    assert sorted(listing) == ["data.txt", "notes.md", "raw_logs", "recovered_logs"], listing
    assert v.passed and v.status is VerdictStatus.OK, v.details
    assert "5 passed" in v.details or run_tests is TB1_RUN_TESTS_VENV
    subs = "\n".join(v.info["bootstrap"])
    for expected in ("apt-get update: skipped", "apt-get install curl: already on the host",
                     "uv's installer replaced", "pytest==8.4.1"):
        assert expected in subs, subs
    _, noop = judge(sandbox, task, oracle=False)
    assert noop.status is VerdictStatus.OK and not noop.passed and noop.score == 0.0, noop.details


@pytest.mark.slow
def test_harbor_task_with_uvx_bootstrap_and_several_metrics(tmp_path, sandbox):
    task = load_terminal_task(harbor_task(tmp_path))
    notes = "\n".join(task.notes)
    assert "[environment] mcp_servers = []: not supported here, ignored" in notes
    assert "RUN apt-get update: not run" in notes and task.env == {"GREETING": "hello"}
    listing, v = judge(sandbox, task, oracle=True)
    assert listing == []  # the Dockerfile copies nothing: unused.txt stays out
    assert v.passed and (v.score, v.breakdown) == (1.0, {"correctness": 1.0, "style": 1.0}), v.details
    assert "mean of correctness, style" in v.details
    # the script asks for 0.3.5; the host's version is used and said (dev installs >= 0.3.5, whatever pip picks)
    have = metadata.version("pytest-json-ctrf")
    said = ("installed pytest-json-ctrf 0.3.5" if have == "0.3.5"
            else f"not fetched; the installed pytest-json-ctrf {have} is used")
    assert any(f"uvx --with pytest-json-ctrf==0.3.5: {said}" in s for s in v.info["bootstrap"]), v.info
    _, noop = judge(sandbox, task, oracle=False)
    assert noop.status is VerdictStatus.OK and noop.score == 0.0 and noop.breakdown == {"correctness": 0.0, "style": 0.0}


def test_a_missing_requirement_fails_offline_and_is_recorded(tmp_path, sandbox):
    d = tb1_task(tmp_path)
    (d / "run-tests.sh").write_text("#!/bin/bash\nset -e\napt-get install -y no-such-package-xyz || echo apt-failed\n"
                                    "uv pip install no-such-dist-xyz==1.0\nuv run pytest $TEST_DIR -rA\n")
    task = load_terminal_task(d)
    _, v = judge(sandbox, task, oracle=True)
    assert v.status is VerdictStatus.ERROR and not v.passed  # no pytest outcome: nothing was judged
    subs = "\n".join(v.info["bootstrap"])
    assert "no-such-package-xyz: not on the host" in subs and "no-such-dist-xyz==1.0: not installed" in subs
    assert "apt-failed" in v.details


def test_a_failing_run_step_is_a_clear_build_error(tmp_path, sandbox):
    from posttrain.tasks.jsonl import TaskFileError

    d = tb1_task(tmp_path)
    (d / "Dockerfile").write_text("FROM x\nWORKDIR /app\nRUN cat no-such-file > y\n")
    task = load_terminal_task(d)
    with pytest.raises(TaskFileError, match="line 3: RUN cat no-such-file"):
        open_workspace(sandbox, task, network=False)


def multi_step_task(root):
    """Harbor's multi-step layout: shared tests/helpers.sh, steps/<name>/{instruction.md,tests,solution,workdir}."""
    d = root / "multi"
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    (d / "tests" / "helpers.sh").write_text("pass() { echo 1 > /logs/verifier/reward.txt; exit 0; }\n"
                                            "fail() { echo 0 > /logs/verifier/reward.txt; exit 0; }\n")
    (d / "task.toml").write_text('schema_version = "1.1"\nartifacts = ["/app/out.txt"]\n[environment]\nallow_internet = false\n'
                                 '[[steps]]\nname = "first"\nmin_reward = 1.0\n[steps.verifier]\ntimeout_sec = 30.0\n'
                                 '[[steps]]\nname = "second"\n[steps.verifier.env]\nEXPECTED = "two"\n'
                                 '[steps.healthcheck]\ncommand = "true"\n')
    for name, solve, check in (("first", "echo one > /app/out.txt", '[ "$(cat /app/out.txt)" = one ] && pass; fail'),
                               ("second", "cat config.txt > /app/out.txt",
                                '[ "$(cat /app/out.txt)" = "$EXPECTED" ] && pass; fail')):
        s = d / "steps" / name
        (s / "tests").mkdir(parents=True)
        (s / "solution").mkdir()
        (s / "instruction.md").write_text(f"Step {name}\n")
        (s / "tests" / "test.sh").write_text(f"source /tests/helpers.sh\n{check}\n")
        (s / "solution" / "solve.sh").write_text(solve + "\n")
    (d / "steps" / "second" / "workdir").mkdir()
    (d / "steps" / "second" / "workdir" / "config.txt").write_text("two \n")
    (d / "steps" / "second" / "workdir" / "setup.sh").write_text(
        "set -e\nprintf '%s\\n' \"$(tr -d '[:space:]' < config.txt)\" > config.txt\nmkdir -p /logs/artifacts\nrm -- \"$0\"\n")
    return d


def test_a_multi_step_task_runs_step_by_step(tmp_path, sandbox):
    from posttrain.tasks.terminal import judge_script

    task = load_terminal_task(multi_step_task(tmp_path))
    notes = "\n".join(task.notes)
    assert "healthcheck: not supported here" in notes and "artifacts: not collected" in notes
    assert [s.name for s in task.steps] == ["first", "second"] and "## Step 2: second" in task.instruction
    gold = asyncio.run(judge_script(sandbox, task, task.solution, network=False))
    assert gold.passed and gold.breakdown == {"first": 1.0, "second": 1.0}, gold.details
    noop = asyncio.run(judge_script(sandbox, task, "", network=False))
    # the first step fails its min_reward: the task stops, the second scores 0 unrun
    assert noop.status is VerdictStatus.OK and noop.score == 0.0 and noop.breakdown == {"first": 0.0}, noop.details
    assert noop.info["steps_run"] == 1
    half = asyncio.run(judge_script(sandbox, task, "echo one > /app/out.txt", network=False))
    assert (half.score, half.breakdown) == (0.5, {"first": 1.0, "second": 0.0}), half.details
