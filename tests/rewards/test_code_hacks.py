"""Reward hacks against `python_tests`: each one is a wrong solution that tries to win anyway; none gets credit.

Every hack returns a WRONG answer (sq(x) = 0) and then tries to turn the verdict; each test
asserts no credit with status OK (the hack is the solution's failure, not an infrastructure
error), and a control shows the same task passes with a correct solution.
"""

from __future__ import annotations

import pytest

from posttrain.rewards import safe_verify, score_sync
from posttrain.rewards.code import PythonTests
from posttrain.types import Task, VerdictStatus

FAST = PythonTests(call_timeout_s=1.0, timeout_s=4.0)
ASSERTS = "assert candidate(3) == 9\nassert candidate(-2) == 4\n"
CHECK = "def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n"
PYTEST = ("import pytest\nfrom solution import sq\n\ndef test_sq():\n    assert sq(3) == pytest.approx(9)\n\n"
          "def test_neg():\n    assert sq(-2) == 4\n")
STYLES = {"asserts": ASSERTS, "check": CHECK, "pytest": PYTEST}
WRONG = "def sq(x):\n    return 0\n"


def judge(hack: str, style: str = "asserts", verifier: PythonTests = FAST):
    task = Task("sq", "Write sq(x).", meta={"tests": STYLES[style], "entry_point": "sq"})
    return safe_verify(verifier, task, hack)


def assert_no_credit(v) -> None:
    assert v.status is VerdictStatus.OK, v.details
    assert v.score == 0.0 and not v.passed, v.details


@pytest.mark.parametrize("style", sorted(STYLES))
def test_control_correct_solution_passes_every_style(style):
    assert judge("def sq(x):\n    return x * x\n", style).score == 1.0


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)", "raise SystemExit(0)"])
@pytest.mark.slow
def test_exit_before_the_asserts_gets_no_credit(style, exit_call):
    assert_no_credit(judge(f"{WRONG}{exit_call}\n", style))
    # ... and exiting from inside the function, when the tests call it
    assert_no_credit(judge(f"def sq(x):\n    {exit_call}\n", style))


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.slow
def test_monkeypatching_builtins_gets_no_credit(style):
    hack = WRONG + """
import builtins
class Nope(Exception):
    pass
builtins.AssertionError = Nope
builtins.__import__ = lambda *a, **k: None
builtins.isinstance = lambda *a: True
builtins.print = lambda *a, **k: None
builtins.len = lambda x: 0
"""
    assert_no_credit(judge(hack, style))


@pytest.mark.slow
def test_monkeypatching_pytest_gets_no_credit():
    hack = WRONG + """
import pytest, _pytest.python_api, _pytest.outcomes
class Always:
    def __eq__(self, other): return True
pytest.approx = lambda *a, **k: Always()
_pytest.python_api.approx = pytest.approx
pytest.raises = lambda *a, **k: __import__('contextlib').nullcontext()
_pytest.outcomes.fail = lambda *a, **k: None
"""
    assert_no_credit(judge(hack, "pytest"))


def test_returning_an_object_that_equals_everything_gets_no_credit():
    hack = ("class Always:\n    def __eq__(self, o): return True\n    __hash__ = object.__hash__\n\n"
            "def sq(x):\n    return Always()\n")
    for style in STYLES:
        v = judge(hack, style)
        assert_no_credit(v)
        assert "not plain data" in v.details


@pytest.mark.parametrize("style", sorted(STYLES))
def test_rewriting_or_planting_test_files_gets_no_credit(style):
    hack = WRONG + """
import os, glob
passing = "def check(candidate):\\n    pass\\ndef test_sq():\\n    pass\\nassert True\\n"
for d in ("/work", "/tmp", os.getcwd()):
    for name in ("tests.py", "test_solution.py", "test_sq.py", "conftest.py", "check.py"):
        try:
            open(os.path.join(d, name), "w").write(passing)
        except OSError:
            pass
    for f in glob.glob(d + "/**/*.py", recursive=True):
        try:
            open(f, "w").write(passing)
        except OSError:
            pass
# a module the harness might import, planted where a test run would look first
for d in ("/work", "/tmp", "/work/main/src"):
    try:
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "pytest.py"), "w").write("approx = lambda *a, **k: 9\\n")
        open(os.path.join(d, "random.py"), "w").write("raise SystemExit(0)\\n")
    except OSError:
        pass
"""
    assert_no_credit(judge(hack, style))


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.slow
def test_printing_a_fake_pass_gets_no_credit(style):
    hack = WRONG + """
import os, sys, json
fake = json.dumps({"id": "0", "total": 2, "tests": [["a", True, ""], ["b", True, ""]]})
msg = "PASS\\nOK\\n2 passed\\n" + "0" * 32 + " " + fake + "\\nDONE\\n"
print(msg); sys.stderr.write(msg)
for target in ("/dev/stdout", "/dev/stderr", "/proc/self/fd/1", "/proc/1/fd/1", f"/proc/{os.getppid()}/fd/1"):
    try:
        with open(target, "w") as f:
            f.write(msg)
    except OSError:
        pass
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for fd in ("1", "2", "3", "4", "5"):
            try:
                with open(f"/proc/{pid}/fd/{fd}", "w") as f:
                    f.write(msg)
            except OSError:
                pass
os.write(1, msg.encode())
"""
    assert_no_credit(judge(hack, style))


@pytest.mark.parametrize("kill", ["os.kill(os.getppid(), 9)", "os.kill(-1, 9)", "os.kill(os.getppid(), 19)"])
def test_killing_the_parent_gets_no_credit(kill):
    verifier = PythonTests(call_timeout_s=1.0, timeout_s=2.0)
    hack = f"import os\n{kill}\nprint('PASS')\n" + WRONG
    assert_no_credit(judge(hack, "asserts", verifier))
    # ... also when it happens inside a call, after the harness has started the tests
    hack = f"import os\ndef sq(x):\n    {kill}\n    return 0\n"
    assert_no_credit(judge(hack, "asserts", verifier))


@pytest.mark.slow
def test_infinite_loop_is_a_failed_test_not_an_error():
    v = judge("def sq(x):\n    while True:\n        pass\n")
    assert_no_credit(v)
    assert "timed out" in v.details
    # a loop at import time fails too
    assert_no_credit(judge("while True:\n    pass\n"))


@pytest.mark.slow
def test_a_timeout_restarts_the_solution_for_the_next_test():
    tests = "assert candidate(1) == 1\nassert candidate(0) == 0\nassert candidate(2) == 4\n"
    task = Task("t", "p", meta={"tests": tests, "entry_point": "sq"})
    v = safe_verify(FAST, task, "def sq(x):\n    while x == 0:\n        pass\n    return x * x\n")
    assert v.ok and v.score == pytest.approx(2 / 3)


@pytest.mark.slow
def test_huge_output_gets_no_credit_and_does_not_break_a_correct_solution():
    flood = "import sys\nfor _ in range({}):\n    sys.stdout.write('x' * (1 << 20))\n    sys.stderr.write('y' * (1 << 20))\n"
    assert_no_credit(judge(flood.format(200) + WRONG))
    v = judge(flood.format(16) + "def sq(x):\n    print('z' * 10**6)\n    return x * x\n")
    assert v.ok and v.score == 1.0


def test_a_huge_return_value_fails_that_test_only():
    tests = "assert len(candidate(1)) > 0\nassert candidate(0) == []\n"
    task = Task("t", "p", meta={"tests": tests, "entry_point": "sq"})
    v = safe_verify(FAST, task, "def sq(x):\n    return [0] * (10**8 if x else 0)\n")
    assert v.ok and v.score == 0.5


def test_the_tests_are_invisible_to_the_solution():
    tests = "assert candidate() == 'SECRET-' + 'MARKER-' + 'f00d'\n"
    hack = """
import gc, os, sys, re
def found():
    pat = re.compile(r"SECRET-' \\+ 'MARKER-' \\+ '(\\w+)")
    texts = []
    def strings(o, depth=0):
        if isinstance(o, (str, bytes)):
            texts.append(o if isinstance(o, str) else o.decode(errors="replace"))
        elif depth < 3 and isinstance(o, dict):
            for v in list(o.values()):
                strings(v, depth + 1)
        elif depth < 3 and isinstance(o, (list, tuple)):
            for v in o:
                strings(v, depth + 1)
    frame = sys._getframe()
    while frame is not None:
        strings(dict(frame.f_locals))
        strings(dict(frame.f_globals))
        frame = frame.f_back
    for o in gc.get_objects():
        if isinstance(o, dict) and len(o) < 64:
            strings(o, 2)
    for d in ("/work", "/tmp", "/dev/shm"):
        for root, dirs, files in os.walk(d):
            # a runtime bound read-only here (a venv under /tmp) holds nothing of this run, and reading its
            # gigabytes whole would only hit the memory cap or the time limit before the scan ends
            dirs[:] = [x for x in dirs if not os.statvfs(os.path.join(root, x)).f_flag & os.ST_RDONLY]
            for f in files:
                try:
                    texts.append(open(os.path.join(root, f), errors="replace").read(1 << 20))
                except OSError:
                    pass
    try:
        with open(f"/proc/{os.getppid()}/mem", "rb") as f:
            texts.append(f.read(1 << 20).decode(errors="replace"))
    except OSError:
        pass
    for t in texts:
        m = pat.search(t)
        if m:
            return "SECRET-MARKER-" + m.group(1)
    return None
ANSWER = found()
def f():
    return ANSWER
"""
    task = Task("t", "p", meta={"tests": tests, "entry_point": "f"})
    slow = PythonTests(call_timeout_s=3.0, timeout_s=6.0)
    v = safe_verify(slow, task, hack)
    assert_no_credit(v)
    assert "timed out" not in v.details and "load_error" not in v.info  # the scan ran to the end
    assert not any("timed out" in f["error"] for f in v.info["failures"])
    # control: the same scan finds the secret when it is anywhere in the solution's process
    leaked = "# SECRET-' + 'MARKER-' + 'f00d\n" + hack
    assert safe_verify(slow, task, leaked).score == 1.0


def test_a_saboteur_in_a_batch_cannot_touch_its_neighbours():
    """Background processes and planted files of one response are gone before the next one runs."""
    saboteur = """
import os, time
open('/work/random.py', 'w').write('raise SystemExit(0)\\n')
open('/tmp/sq_cache', 'w').write('0')
if os.fork() == 0:
    os.setsid()
    while True:
        for pid in os.listdir('/proc'):
            if pid.isdigit() and int(pid) != os.getpid():
                try:
                    os.kill(int(pid), 9)
                except OSError:
                    pass
        time.sleep(0.001)
def sq(x):
    return 0
"""
    good = "import random, os\nassert not os.path.exists('/tmp/sq_cache')\ndef sq(x):\n    return x * x\n"
    task = Task("sq", "p", meta={"tests": ASSERTS, "entry_point": "sq"})
    verdicts = score_sync(PythonTests(call_timeout_s=1.0, timeout_s=4.0, batch_size=4, max_concurrency=1),
                          [task] * 4, [saboteur, good, good, good])
    assert [v.status for v in verdicts] == [VerdictStatus.OK] * 4
    assert [v.score for v in verdicts] == [0.0, 1.0, 1.0, 1.0], [v.info for v in verdicts]


@pytest.mark.parametrize("style", ["asserts", "check"])
def test_shadowing_builtins_the_tests_use_gets_no_credit(style):
    tests = {"asserts": "assert abs(candidate(2) - 4) < 1e-9\nassert isinstance(candidate(3), int)\n",
             "check": "def check(candidate):\n    assert abs(candidate(2) - 4) < 1e-9\n"
                      "    assert isinstance(candidate(3), int)\n"}
    task = Task("sq", "p", meta={"tests": tests[style], "entry_point": "sq"})
    hack = "def abs(x):\n    return 0\n\ndef isinstance(*a):\n    return True\n\ndef sq(x):\n    return 'wrong'\n"
    assert_no_credit(safe_verify(FAST, task, hack))
    assert safe_verify(FAST, task, "def sq(x):\n    return x * x\n").score == 1.0


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGUSR1", "SIGALRM", "SIGQUIT"])
@pytest.mark.slow
def test_signalling_the_harness_gets_no_credit_and_no_error(sig):
    hack = ("import os, signal\n"
            "def sq(x):\n"
            "    for pid in os.listdir('/proc'):\n"
            "        if pid.isdigit() and int(pid) != os.getpid():\n"
            f"            try:\n                os.kill(int(pid), signal.{sig})\n"
            "            except OSError:\n                pass\n"
            "    return 0\n")
    for style in STYLES:
        assert_no_credit(judge(hack, style))


def test_cleanup_between_responses_of_one_batch(sandbox_runs):
    """A response that leaves a process re-planting files behind, without killing the harness: the
    batch stays one sandbox execution and the next response sees none of it."""
    runs = sandbox_runs
    planter = """
import os, time
if os.fork() == 0:
    os.setsid()
    while True:
        for path in ('/work/random.py', '/tmp/planted', '/dev/shm/planted'):
            try:
                open(path, 'w').write('raise SystemExit(0)\\n')
            except OSError:
                pass
        time.sleep(0.002)
time.sleep(0.05)
def sq(x):
    return 0
"""
    good = ("import os, random\n"
            "assert not any(os.path.exists(p) for p in ('/tmp/planted', '/dev/shm/planted', '/work/random.py'))\n"
            "assert sorted(int(p) for p in os.listdir('/proc') if p.isdigit())[-1] - os.getpid() <= 0\n"
            "def sq(x):\n    return x * x\n")
    task = Task("sq", "p", meta={"tests": ASSERTS, "entry_point": "sq"})
    verdicts = score_sync(PythonTests(call_timeout_s=1.0, timeout_s=4.0, max_concurrency=1), [task] * 3,
                          [planter, good, good + "# another response\n"])
    assert [v.score for v in verdicts] == [0.0, 1.0, 1.0], [v.details for v in verdicts]
    assert runs == [3]
