"""Fixtures for the code verifiers' tests."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def sandbox_runs(monkeypatch):
    """The sizes (responses per execution) of every sandbox execution the code verifiers make, in order."""
    import posttrain.rewards.code as code

    runs: list[int] = []
    real = code.shared_sandbox()

    class Counting:
        async def arun(self, *args, **kwargs):
            runs.append(len(json.loads(kwargs["stdin"])["items"]))
            return await real.arun(*args, **kwargs)

    monkeypatch.setattr(code, "shared_sandbox", lambda prefork=True: Counting())
    return runs
