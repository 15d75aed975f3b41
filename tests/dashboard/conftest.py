"""The dashboard app serving two runs (one with the scheduler's tables, one without) on a free port."""

from __future__ import annotations

import pytest
from dashboard_runs import make_run


@pytest.fixture
def served_runs(tmp_path):
    from posttrain.dashboard.app import create_dashboard_app
    from posttrain.engine.serve.server import ServerThread

    runs = tmp_path / "runs"
    stores = [make_run(runs / "a", 20, "a"), make_run(runs / "b", 12, "b", domains=False)]
    with ServerThread(create_dashboard_app([runs], poll_ms=200)) as server:
        yield server, stores
    for s in stores:
        s.close()
