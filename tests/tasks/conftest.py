"""Fixtures shared by the task tests: one sandbox per test module (Harbor and published-convention tasks)."""

import pytest

from posttrain.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox()
    yield sb
    sb.close()
