"""Shared fixtures: one sandbox for the directory (start-up is the slow part), the demo tasks."""

from __future__ import annotations

import pytest

from posttrain.sandbox import Limits, Sandbox

FAST = Limits(wall_s=10, cpu_s=10, memory_mb=256, pids=64, output_bytes=1 << 20, disk_mb=32)


@pytest.fixture(scope="session")
def sandbox():
    sb = Sandbox(FAST)
    yield sb
    sb.close()
