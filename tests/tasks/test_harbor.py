"""Terminal tasks in the Harbor format: both loaders, bad inputs as one line, the verifier's rules (planted
rewards and edited tests earn nothing, a missing reward is an error), and the built-in suite's oracles."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest

from posttrain.errors import UserError
from posttrain.tasks.harbor import (
    TaskLoadError,
    load_terminal_suite,
    load_terminal_task,
    open_workspace,
    parse_reward,
    run_solution,
    verify_workspace,
)
from posttrain.types import VerdictStatus

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = hello ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""
TASK_TOML = """version = "1.0"
[metadata]
difficulty = "easy"
[verifier]
timeout_sec = 20.0
[agent]
timeout_sec = 30.0
[environment]
cpus = 2
memory_mb = 512
allow_internet = false
"""


def harbor_task(root, name="hello", test_sh=TEST_SH, toml=TASK_TOML, solve="echo hello > out.txt\n"):
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Write hello to /app/out.txt\n")
    (d / "task.toml").write_text(toml)
    (d / "environment" / "Dockerfile").write_text("FROM python:3.11\nWORKDIR /app\nCOPY seed.txt run.sh ./\n"
                                                 "RUN pip install nothing\n")
    (d / "environment" / "seed.txt").write_text("seed\n")
    (d / "environment" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (d / "environment" / "run.sh").chmod(0o755)
    (d / "tests" / "test.sh").write_text(test_sh)
    (d / "solution" / "solve.sh").write_text(solve)
    return d


def tb1_task(root, name="tb1"):
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text("instruction: |\n  Write hello to out.txt\ndifficulty: easy\n"
                                 "max_agent_timeout_sec: 50\nmax_test_timeout_sec: 15\nparser_name: pytest\n")
    (d / "Dockerfile").write_text("FROM python:3.11\nWORKDIR /app\nCOPY data.txt ./\n")
    (d / "data.txt").write_text("x\n")
    (d / "run-tests.sh").write_text("#!/bin/bash\npython3 $TEST_DIR/check.py\n")
    # A stand-in for pytest (not in the sandbox): its summary line and exit codes
    (d / "tests" / "check.py").write_text(
        "import os, sys\nok = os.path.exists('/app/out.txt') and open('/app/out.txt').read().strip() == 'hello'\n"
        "print('===== 1 passed in 0.01s =====' if ok else '===== 1 failed in 0.01s =====')\nsys.exit(0 if ok else 1)\n")
    (d / "solution.sh").write_text("echo hello > /app/out.txt\n")
    return d


def run(coro):
    return asyncio.run(coro)


# ----------------------------------------------------------------------------- loading


def test_harbor_directory_loads(tmp_path):
    t = load_terminal_task(harbor_task(tmp_path))
    assert (t.id, t.instruction, t.format) == ("hello", "Write hello to /app/out.txt\n", "harbor")
    assert set(t.environment) == {"seed.txt", "run.sh"} and set(t.tests) == {"test.sh"}  # the Dockerfile is not copied
    assert t.solution == "echo hello > out.txt\n" and t.test_script == "test.sh"
    assert (t.agent_timeout_s, t.verifier_timeout_s, t.cpus, t.memory_mb, t.allow_internet) == (30.0, 20.0, 2.0, 512, False)
    assert t.metadata == {"difficulty": "easy"}
    assert "environment/run.sh" in t.executable
    assert any("Dockerfile is not built as an image" in n for n in t.notes)
    assert [n for n in t.notes if n.startswith("not applied")] == [
        "not applied: environment/Dockerfile:4: RUN pip install nothing: not run (pip: installs or fetches software)"]


def test_an_environment_without_a_dockerfile_is_copied_as_is(tmp_path):
    d = harbor_task(tmp_path)
    (d / "environment" / "Dockerfile").unlink()
    t = load_terminal_task(d)
    assert t.build is None and t.workdir == "/app" and set(t.environment) == {"seed.txt", "run.sh"}


def test_terminal_bench_1_directory_loads(tmp_path):
    t = load_terminal_task(tb1_task(tmp_path))
    assert (t.format, t.test_script, t.agent_timeout_s, t.verifier_timeout_s) == ("terminal-bench", "run-tests.sh", 50.0, 15.0)
    assert t.instruction.strip() == "Write hello to out.txt" and t.solution.startswith("echo hello")
    assert set(t.environment) == {"data.txt"} and set(t.tests) == {"check.py", "run-tests.sh"}
    assert t.metadata["difficulty"] == "easy" and any("Dockerfile is not built as an image" in n for n in t.notes)


def test_harbor_defaults_and_older_memory_spelling(tmp_path):
    toml = "[environment]\nmemory = '1G'\n"
    t = load_terminal_task(harbor_task(tmp_path, toml=toml))
    assert (t.memory_mb, t.cpus, t.allow_internet, t.agent_timeout_s, t.verifier_timeout_s) == (1024, 1.0, True, 600.0, 600.0)


@pytest.mark.parametrize("breakage, expected", [
    (lambda d: (d / "tests" / "test.sh").unlink(), "tests/test.sh: missing"),
    (lambda d: (d / "task.toml").write_text("[verifier\ntimeout_sec = 1"), "task.toml: malformed TOML"),
    (lambda d: (d / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n"), "timeout_sec must be a positive number"),
    (lambda d: (d / "task.toml").write_text("verifier = 3\n"), "[verifier] must be a table"),
    (lambda d: (d / "instruction.md").unlink(), "instruction.md: missing"),
    (lambda d: (d / "task.toml").write_text("[environment]\nmemory = 'lots'\n"), "memory must look like"),
    (lambda d: ((d / "instruction.md").unlink(), (d / "instruction.md").mkdir()), "instruction.md: missing"),
])
def test_bad_harbor_directories_fail_in_one_line_naming_the_file(tmp_path, breakage, expected):
    d = harbor_task(tmp_path)
    breakage(d)
    with pytest.raises(UserError) as err:
        load_terminal_task(d)
    assert expected in str(err.value) and "\n" not in str(err.value) and str(d) in str(err.value)


@pytest.mark.parametrize("breakage, expected", [
    (lambda d: (d / "run-tests.sh").unlink(), "run-tests.sh: missing"),
    (lambda d: __import__("shutil").rmtree(d / "tests"), "tests: missing"),
    (lambda d: (d / "task.yaml").write_text("instruction: [unclosed\n"), "task.yaml: malformed YAML"),
    (lambda d: (d / "task.yaml").write_text("difficulty: easy\n"), "no 'instruction'"),
])
def test_bad_terminal_bench_directories_fail_in_one_line(tmp_path, breakage, expected):
    d = tb1_task(tmp_path)
    breakage(d)
    with pytest.raises(UserError) as err:
        load_terminal_task(d)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_suite_reports_bad_tasks_and_keeps_the_others(tmp_path):
    harbor_task(tmp_path, "good")
    tb1_task(tmp_path, "good-tb1")
    (harbor_task(tmp_path, "bad") / "tests" / "test.sh").unlink()
    errors: list[TaskLoadError] = []
    tasks = load_terminal_suite(tmp_path, errors=errors)
    assert [t.id for t in tasks] == ["good", "good-tb1"]
    assert len(errors) == 1 and errors[0].path.endswith("bad") and "test.sh: missing" in errors[0].message
    with pytest.raises(UserError, match="test.sh: missing"):
        load_terminal_suite(tmp_path)
    with pytest.raises(UserError, match="neither a built-in suite"):
        load_terminal_suite(tmp_path / "nowhere")


def test_parse_reward():
    assert parse_reward({"reward.txt": {"text": " 0.5\n"}}).score == 0.5
    r = parse_reward({"reward.json": {"text": json.dumps({"reward": 1, "checks": 3, "note": "x"})}})
    assert (r.score, r.breakdown, r.source) == (1.0, {"checks": 3.0}, "reward.json")
    assert parse_reward({"reward.txt": {"text": "0"}, "reward.json": {"text": '{"reward": 1}'}}).score == 0.0  # txt first
    assert "wrote no reward" in parse_reward({})
    assert "unreadable" in parse_reward({"reward.txt": {"text": "passed"}})
    assert "not a finite number" in parse_reward({"reward.json": {"text": '{"reward": NaN}'}})
    assert "unreadable" in parse_reward({"reward.json": {"text": '{"score": "high"}'}})  # no numeric metric
    one = parse_reward({"reward.json": {"text": '{"score": 1}'}})  # one metric: that metric
    assert (one.score, one.breakdown, one.source) == (1.0, {"score": 1.0}, "reward.json (score)")
    # Harbor's multi-reward recipe: several metrics, none named reward -> their mean, each kept
    multi = parse_reward({"reward.json": {"text": '{"correctness": 1, "performance": 0}'}})
    assert (multi.score, multi.breakdown) == (0.5, {"correctness": 1.0, "performance": 0.0})
    assert multi.source == "reward.json (mean of correctness, performance)"
    assert "not a regular file" in parse_reward({"reward.txt": {"error": "not a regular file"}})


# ----------------------------------------------------------------------------- the workspace and the verifier


@pytest.mark.slow
def test_the_oracle_passes_and_doing_nothing_fails(tmp_path, sandbox):
    t = load_terminal_task(harbor_task(tmp_path))

    async def go():
        with open_workspace(sandbox, t) as s:
            assert s.read_file("/app/seed.txt") == b"seed\n"
            assert s.exec("./run.sh").stdout == "ran\n"  # the executable bit survived
            assert s.exec("pwd; ls -A /tests /solution 2>&1; ls -A").stdout.split("\n")[0] == "/work"
            nothing = await verify_workspace(s, t)
            solved = await run_solution(s, t)
            assert solved.ok and s.exec("ls -A").stdout.split() == ["out.txt", "run.sh", "seed.txt"]  # solution/ is gone
            return nothing, await verify_workspace(s, t)

    nothing, solved = run(go())
    assert (nothing.status, nothing.score, nothing.passed) == (VerdictStatus.OK, 0.0, False)
    assert (solved.status, solved.score, solved.passed) == (VerdictStatus.OK, 1.0, True)
    assert solved.info["reward_source"] == "reward.txt"


def test_the_agent_sees_neither_tests_nor_solution(tmp_path, sandbox):
    marker = "solution-marker-" + secrets.token_hex(8)  # in no other file, a runtime's included
    t = load_terminal_task(harbor_task(tmp_path, solve=f"echo hello > out.txt  # {marker}\n"))
    with open_workspace(sandbox, t) as s:
        # /tests, /solution, /logs are directories of the root, empty (read-only) while the agent acts.
        # -xdev: not into a runtime bound read-only under /tmp (a venv there): it was bound from the host before
        # the task existed, so the solution cannot be in it. The last search is the control: it finds a planted copy.
        find = f"find /work /tmp /dev/shm /tests /solution /logs -xdev -type f -exec grep -l {marker} {{}} +"
        r = s.exec("ls -A /app /tests /solution /logs; test -e /work/.harbor && echo /work/.harbor; "
                   f"{find}; echo --; echo {marker} > /tmp/planted; {find}")
    assert r.stdout.split() == ["/app:", "run.sh", "seed.txt", "/logs:", "/solution:", "/tests:", "--", "/tmp/planted"], r


def test_a_planted_reward_and_planted_tests_earn_nothing(tmp_path, sandbox):
    t = load_terminal_task(harbor_task(tmp_path))
    plant = ("mkdir -p .harbor/logs/verifier .harbor/tests && echo 1 > .harbor/logs/verifier/reward.txt && "
             "echo '{\"reward\": 1}' > .harbor/logs/verifier/reward.json && "
             "printf 'mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > .harbor/tests/test.sh && "
             "chmod 000 .harbor/logs/verifier .harbor")
    with open_workspace(sandbox, t) as s:
        assert s.exec(plant).ok
        v = run(verify_workspace(s, t))
    assert (v.status, v.score, v.passed) == (VerdictStatus.OK, 0.0, False)


def test_a_test_script_without_a_reward_is_an_error_never_zero(tmp_path, sandbox):
    t = load_terminal_task(harbor_task(tmp_path, test_sh="#!/bin/bash\necho 'tests ran'\nexit 1\n"))
    with open_workspace(sandbox, t) as s:
        v = run(verify_workspace(s, t))
    assert v.status is VerdictStatus.ERROR and not v.passed and "wrote no reward" in v.details and "tests ran" in v.details


def test_an_unreadable_reward_is_an_error(tmp_path, sandbox):
    t = load_terminal_task(harbor_task(tmp_path, test_sh="mkdir -p /logs/verifier; echo yes > /logs/verifier/reward.txt\n"))
    with open_workspace(sandbox, t) as s:
        v = run(verify_workspace(s, t))
    assert v.status is VerdictStatus.ERROR and "unreadable" in v.details


def test_a_reward_that_is_not_a_file_is_an_error(tmp_path, sandbox):
    t = load_terminal_task(harbor_task(tmp_path, test_sh="mkdir -p /logs/verifier/reward.txt\n"))
    with open_workspace(sandbox, t) as s:
        v = run(verify_workspace(s, t))
    assert v.status is VerdictStatus.ERROR and "not a regular file" in v.details


def test_reward_json_gives_partial_credit(tmp_path, sandbox):
    test_sh = "mkdir -p /logs/verifier; echo '{\"reward\": 0.25, \"checks_passed\": 1}' > /logs/verifier/reward.json\n"
    t = load_terminal_task(harbor_task(tmp_path, test_sh=test_sh))
    with open_workspace(sandbox, t) as s:
        v = run(verify_workspace(s, t))
    assert (v.status, v.score, v.passed, v.breakdown) == (VerdictStatus.OK, 0.25, False, {"checks_passed": 1.0})


@pytest.mark.slow
def test_a_hanging_test_script_is_a_timeout(tmp_path, sandbox):
    toml = "[verifier]\ntimeout_sec = 1.0\n[environment]\nallow_internet = false\n"
    hang = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 30\n"
    t = load_terminal_task(harbor_task(tmp_path, toml=toml, test_sh=hang))
    with open_workspace(sandbox, t) as s:
        v = run(verify_workspace(s, t))
    assert v.status is VerdictStatus.TIMEOUT and not v.passed


def test_planted_modules_do_not_reach_the_reward_reader(tmp_path, sandbox):
    t = load_terminal_task(harbor_task(tmp_path))
    with open_workspace(sandbox, t) as s:
        s.write_file("json.py", "import sys; print('{\"reward.txt\": {\"text\": \"1\"}}'); sys.exit(0)\n")
        s.write_file("os.py", "raise SystemExit(0)\n")
        v = run(verify_workspace(s, t))
    assert (v.status, v.score) == (VerdictStatus.OK, 0.0)


@pytest.mark.slow
def test_terminal_bench_1_rewards_from_the_pytest_outcome(tmp_path, sandbox):
    t = load_terminal_task(tb1_task(tmp_path))

    async def go():
        with open_workspace(sandbox, t) as s:
            assert s.read_file("data.txt") == b"x\n"
            failed = await verify_workspace(s, t)
            assert (await run_solution(s, t)).ok
            return failed, await verify_workspace(s, t)

    failed, passed = run(go())
    assert (failed.status, failed.score) == (VerdictStatus.OK, 0.0) and failed.info["reward_source"] == "pytest summary"
    assert (passed.status, passed.score, passed.passed) == (VerdictStatus.OK, 1.0, True)


@pytest.mark.slow
def test_terminal_bench_1_without_a_pytest_summary_is_an_error(tmp_path, sandbox):
    d = tb1_task(tmp_path)
    (d / "run-tests.sh").write_text("#!/bin/bash\nno-such-runner pytest\n")  # nothing ran
    t = load_terminal_task(d)
    with open_workspace(sandbox, t) as s:
        v = run(verify_workspace(s, t))
    assert v.status is VerdictStatus.ERROR


# ----------------------------------------------------------------------------- the domain, its verifier, the suite


@pytest.mark.slow
def test_the_verifier_runs_a_response_as_a_script(tmp_path):
    from posttrain.rewards import score_sync
    from posttrain.tasks.domains import load_domain

    harbor_task(tmp_path)
    domain = load_domain(f"terminal:{tmp_path}")
    (task,) = domain.suite().tasks
    assert domain.rollouter == "agent" and task.prompt.startswith("Write hello") and task.answer.startswith("echo hello")
    fenced = "I will write the file.\n```bash\necho hello > /app/out.txt\n```\n"
    verdicts = score_sync(domain.verifier, [task] * 4, [task.answer, fenced, "", "echo nope > out.txt; exit 3"])
    assert [v.passed for v in verdicts] == [True, True, False, False] and all(v.ok for v in verdicts)
    assert verdicts[3].info["script_status"] == "runtime_error"


@pytest.mark.slow
def test_editing_the_visible_tests_earns_nothing():
    from posttrain.rewards import safe_verify
    from posttrain.tasks.domains import load_domain

    domain = load_domain("terminal")
    task = next(t for t in domain.suite().tasks if t.id == "fix-failing-test")
    cheat = "sed -i 's/2.5)/3)/' test_stats.py && python3 -m unittest test_stats"  # the visible test now passes
    v = safe_verify(domain.verifier, task, cheat)
    assert v.ok and not v.passed and "median_of_even_lists" in v.details


@pytest.mark.slow
def test_every_builtin_oracle_passes_and_doing_nothing_fails():
    """All built-in tasks, oracle and do-nothing agent, through the one validation path (a pool of workspaces)."""
    from posttrain.tasks.domains import load_domain
    from posttrain.tasks.validate import validate_suite

    report = validate_suite(load_domain("terminal").suite())
    assert report.ok, [(r.task_id, r.details[:400]) for r in report.rows if not r.ok]
    assert report.total == len(report.rows) >= 20 and report.passed == report.total
    assert all(r.gold_score == 1.0 and r.null_status == "ok" and r.null_score < 1.0 for r in report.rows)


def test_every_builtin_task_loads_cleanly():
    tasks = load_terminal_suite("terminal")
    assert len(tasks) >= 20 and len({t.id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.solution and "test.sh" in t.tests and t.instruction.strip() and not t.allow_internet
        assert [n for n in t.notes if "Dockerfile is not built" not in n] == [], (t.id, t.notes)


@pytest.mark.slow
def test_cli_validate_prints_the_table_and_fails_on_a_bad_task(tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli import app

    harbor_task(tmp_path, "good")
    harbor_task(tmp_path, "wrong-oracle", solve="echo bye > out.txt\n")
    always = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n"
    harbor_task(tmp_path, "always-passes", test_sh=always)
    (harbor_task(tmp_path, "broken") / "task.toml").write_text("[agent\n")
    r = CliRunner().invoke(app, ["tasks", "validate", f"terminal:{tmp_path}"])
    assert r.exit_code == 1, r.output
    rows = {line.split()[1]: line for line in r.output.splitlines() if line.startswith("│")}
    assert "yes" in rows["good"] and "NO" in rows["wrong-oracle"] and "NO" in rows["always-passes"]
    assert "FAIL always-passes: the do-nothing response scored 1.000" in r.output
    assert "malformed TOML" in r.output  # the task that did not load is a failure too, and the others still ran
    # what the sandbox does not apply of each task is said, never skipped silently
    assert "NOTE good: not applied: environment/Dockerfile:4: RUN pip install nothing: not run" in r.output
    d = json.loads(CliRunner().invoke(app, ["tasks", "validate", f"terminal:{tmp_path}", "--json"]).output)
    assert d["ok"] is False and {x["task_id"] for x in d["rows"] if x["ok"]} == {"good"}


def test_the_tests_are_gone_once_judged_and_verdicts_name_their_checking_code(tmp_path, sandbox):
    t = load_terminal_task(harbor_task(tmp_path))
    with open_workspace(sandbox, t) as s:
        v = run(verify_workspace(s, t))
        assert s.exec("test -e /work/.harbor || echo gone").stdout == "gone\n"  # the agent could not read them on
    other = load_terminal_task(harbor_task(tmp_path, "other", test_sh=TEST_SH + "# changed\n"))
    with open_workspace(sandbox, other) as s:
        w = run(verify_workspace(s, other))
    assert v.verifier == w.verifier and v.verifier.startswith("terminal@")  # the same checking code
    assert v.info["tests_hash"] != w.info["tests_hash"]  # other tests


def test_a_test_script_killed_for_its_output_is_an_error_even_with_a_reward(tmp_path, sandbox):
    flood = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; head -c 3000000 /dev/zero | tr '\\0' x\n"
    t = load_terminal_task(harbor_task(tmp_path, test_sh=flood))
    with open_workspace(sandbox, t) as s:
        v = run(verify_workspace(s, t))
    assert v.status is VerdictStatus.ERROR and "output_limit" in v.details and not v.passed
