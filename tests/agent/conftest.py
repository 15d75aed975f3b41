"""Shared fixtures: one sandbox for the directory (start-up is the slow part), a tiny local engine per module."""

from __future__ import annotations

import pytest

from posttrain.sandbox import Limits, Sandbox

FAST = Limits(wall_s=10, cpu_s=10, memory_mb=256, pids=64, output_bytes=1 << 20, disk_mb=32)


@pytest.fixture(scope="session")
def sandbox():
    sb = Sandbox(FAST)
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def engine():
    """The local engine over a tiny random model with room for agent episodes."""
    import torch

    from posttrain.engine.local.engine import LocalEngine
    from posttrain.models import char_tokenizer
    from tiny_models import agent_model

    torch.set_num_threads(1)  # restored after the module by tests/conftest.py's _torch_threads_restored
    e = LocalEngine(agent_model(positions=4096), char_tokenizer(), seed=0)
    yield e
    e.close()
