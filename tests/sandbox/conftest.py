"""Shared fixtures: one sandbox for the whole directory (start-up is the slow part)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _sandbox_testlib import FAST

from posttrain.sandbox import Sandbox


@pytest.fixture(scope="session")
def sandbox():
    sb = Sandbox(FAST)
    yield sb
    sb.close()


@pytest.fixture
def host_sleeper():
    """A host process the sandbox must not be able to touch."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()
