"""The harness's import path inside the sandbox: a runtime bound read-only under /tmp (a virtual environment
there) stays importable for the tests; nothing a solution can write is ever imported by the harness.

Each test runs the real harness program in a real sandbox, with a few lines before it that set the
interpreter's ``sys.path`` as a venv under /tmp would (the harness keeps or drops those entries itself).
The runtime is a copy of pytest and what it imports, under ``/tmp/<d>/venv/site``, where ``venv`` is
bound read-only into every task and ``/tmp/<d>`` is a plain directory of the task's writable /tmp.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

import pytest

from posttrain.rewards.code import PRELOAD, harness_program, parse_reports
from posttrain.sandbox import ExecStatus, Limits, Sandbox
from posttrain.sandbox.sandbox import default_ro_binds

REAL_SITE = os.path.dirname(os.path.dirname(pytest.__file__))
WRONG = "def sq(x):\n    return 0\n"
RIGHT = "def sq(x):\n    return x * x\n"
PYTEST = "import pytest\nfrom solution import sq\n\ndef test_sq():\n    assert sq(3) == pytest.approx(9)\n"
PLANTED_PYTEST = "approx = lambda *a, **k: 0\n"  # makes the wrong solution's sq(3) == approx(9) hold


def _pytest_closure() -> list[str]:
    """Top-level names that ``import pytest`` loads from pytest's own site-packages."""
    probe = ("import json, sys; before = set(sys.modules); import pytest; "
             "print(json.dumps({n.split('.')[0]: getattr(m, '__file__', None) "
             "for n, m in sys.modules.items() if n not in before}))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                       check=True).stdout)
    return sorted(n for n, f in loaded.items() if f and f.startswith(REAL_SITE + "/"))


@pytest.fixture(scope="module")
def runtime():
    """(sandbox, root, site): pytest copied to ``root/venv/site``, ``root/venv`` bound read-only into tasks."""
    root = tempfile.mkdtemp(prefix="pt-harness-", dir="/tmp")
    site = os.path.join(root, "venv", "site")
    os.makedirs(site)
    for name in _pytest_closure():
        src = os.path.join(REAL_SITE, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(site, name), ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src + ".py", site)
    sb = Sandbox(prefork=True, preload=PRELOAD, ro_binds=[*default_ro_binds(), os.path.join(root, "venv")])
    try:
        yield sb, root, site
    finally:
        sb.close()
        shutil.rmtree(root, ignore_errors=True)


def run_batch(sb: Sandbox, prelude: str, programs: list[str], tests: str) -> list[dict]:
    """Programs as one batch through the harness, after ``prelude`` (which sets ``sys.path``): for each,
    whether each test passed (a program that fails to load fails them all)."""
    nonce = secrets.token_hex(8)
    items = [{"id": str(i), "program": program, "tests": tests, "entry_point": "sq", "style": "pytest",
              "module": "solution", "split": False, "call_timeout_s": 3.0, "timeout_s": 10.0}
             for i, program in enumerate(programs)]
    res = sb.run(code=prelude + harness_program(), stdin=json.dumps({"nonce": nonce, "items": items}),
                 limits=Limits(wall_s=30, cpu_s=30, memory_mb=1024), env={"POSTTRAIN_CHILD_MB": "512"})
    reports = parse_reports(res.stdout, nonce)
    out = []
    for i in range(len(programs)):
        report = reports.get(str(i))
        assert report is not None and "harness_error" not in report, res
        out.append({t["name"]: t["passed"] for t in report["tests"]})
    return out


def run_harness(sb: Sandbox, prelude: str, program: str, tests: str) -> dict:
    return run_batch(sb, prelude, [program], tests)[0]


def venv_path(site: str) -> str:
    """``sys.path`` as in a venv under /tmp: pytest only from ``site``; fails loudly if pytest is already loaded."""
    return ("import sys\nassert 'pytest' not in sys.modules\n"
            f"sys.path[:] = [p for p in sys.path if p != {REAL_SITE!r}] + [{site!r}]\n")


@pytest.mark.slow
def test_pytest_style_tests_import_pytest_from_a_read_only_runtime_under_tmp(runtime):
    sb, _, site = runtime
    tests = PYTEST + "\ndef test_from_the_runtime():\n    assert pytest.__file__.startswith('/proc/self/fd/')\n"
    assert run_harness(sb, venv_path(site), RIGHT, tests) == {"test_sq": True, "test_from_the_runtime": True}
    assert run_harness(sb, venv_path(site), WRONG, tests) == {"test_sq": False, "test_from_the_runtime": True}


def _swap(root: str) -> str:
    """A solution that moves the runtime away by renaming its writable ancestor (the mount point itself
    cannot be renamed) and builds a look-alike at the old path with a planted pytest."""
    return WRONG + f"""
import os
os.rename({root!r}, {root + '-moved'!r})
os.makedirs({root + '/venv/site'!r})
open({root + '/venv/site/pytest.py'!r}, 'w').write({PLANTED_PYTEST!r})
"""


@pytest.mark.slow
def test_a_renamed_ancestor_cannot_swap_a_planted_pytest_into_the_runtime(runtime):
    sb, root, site = runtime
    tests = PYTEST + (f"\ndef test_the_swap_happened():\n    import os\n"
                      f"    assert os.path.isdir({root + '-moved/venv/site/_pytest'!r})\n"
                      f"    assert os.path.isfile({site + '/pytest.py'!r})\n")
    assert run_harness(sb, venv_path(site), _swap(root), tests) == {"test_sq": False, "test_the_swap_happened": True}
    # control: the same swap fools an interpreter that imports by path after the solution ran
    probe = _swap(root) + f"import sys\nsys.path.insert(0, {site!r})\nimport pytest\nprint(pytest.approx(9) == 0)\n"
    res = sb.run(code=probe, limits=Limits(wall_s=20, cpu_s=20, memory_mb=1024))
    assert (res.status, res.stdout.strip()) == (ExecStatus.OK, "True"), res


def test_a_look_alike_left_at_the_old_path_is_gone_before_the_next_response(runtime):
    sb, root, site = runtime
    good = RIGHT + f"import os\nassert not os.path.exists({site + '/pytest.py'!r})\n"
    assert run_batch(sb, venv_path(site), [_swap(root), good, good], PYTEST) == [{"test_sq": False}] + [{"test_sq": True}] * 2


def test_a_module_planted_in_a_writable_tmp_path_is_not_imported(runtime):
    sb, _, site = runtime
    plant = "/tmp/plant"
    prelude = f"import sys\nsys.path.insert(0, {plant!r})\n"  # a writable directory on the interpreter's path
    hack = WRONG + (f"import os\nos.makedirs({plant!r}, exist_ok=True)\n"
                    f"open({plant + '/pytest.py'!r}, 'w').write({PLANTED_PYTEST!r})\n")
    tests = PYTEST + f"\ndef test_the_plant_is_there():\n    import os\n    assert os.path.isfile({plant + '/pytest.py'!r})\n"
    assert run_harness(sb, prelude, hack, tests) == {"test_sq": False, "test_the_plant_is_there": True}
    # control: an interpreter with that path imports the planted module
    res = sb.run(code=prelude + hack + "import pytest\nprint(pytest.approx(9) == 0)\n",
                 limits=Limits(wall_s=20, cpu_s=20, memory_mb=1024))
    assert (res.status, res.stdout.strip()) == (ExecStatus.OK, "True"), res
