"""Fixtures for the code verifiers' tests."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def sandbox_runs():
    """The sizes (responses per execution) of every sandbox execution the code verifiers make, in order."""
    from posttrain.sandbox.sandboxes import current_sandboxes, use_sandboxes

    runs: list[int] = []
    real = current_sandboxes()

    class Counting:
        async def arun(self, *args, **kwargs):
            runs.append(len(json.loads(kwargs["stdin"])["items"]))
            return await real.executor.arun(*args, **kwargs)

    with use_sandboxes(real.with_executor(Counting())):
        yield runs
