"""Static checks as tests, so the README's one test command runs them: ruff over src/, tests/ and benchmarks/, and
mypy over the typed core (`types.py`, `rl/`, `agent/`, `rewards/base.py`, `engine/base.py`, the eval records;
settings in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean():
    assert shutil.which("ruff") or _run(sys.executable, "-m", "ruff", "--version").returncode == 0, \
        "ruff is missing: pip install -e '.[dev]'"
    res = _run(sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


@pytest.mark.slow
def test_mypy_is_clean_on_the_typed_core():
    res = _run(sys.executable, "-m", "mypy")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
