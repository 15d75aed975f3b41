"""The monitors inside a training run: a planted verifier failure is alerted (warned, stored in the `alerts`
table and the run info) and with `train.on_alert = "stop"` the run checkpoints, stops and says why."""

from __future__ import annotations

import pytest

from posttrain.monitor import MonitorAlert
from posttrain.rewards import SyncVerifier
from posttrain.rl.build import build
from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore
from posttrain.types import Verdict


class BreaksAtCall(SyncVerifier):
    """Scores like a lenient numeric check until call `after`, then raises on every call (a verifier gone bad)."""

    name = "breaks"

    def __init__(self, after: int) -> None:
        self.calls, self.after = 0, after

    def verify(self, task, response):
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError("verifier backend down")
        return Verdict(score=float(self.calls % 2), passed=bool(self.calls % 2))


def _trainer(cfg, on_alert: str, after: int, steps: int = 12) -> Trainer:
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"steps": steps, "on_alert": on_alert,
                                                                        "max_fill_rounds": 1}),
                                 "eval": cfg.eval.model_copy(update={"every": 0})})
    parts = build(cfg, store=False)
    parts.rollouter.verifier = BreaksAtCall(after)
    return Trainer(cfg, components=parts)


@pytest.mark.slow
def test_stop_on_alert_checkpoints_and_says_why(tiny_config):
    trainer = _trainer(tiny_config, "stop", after=4 * 4 * 3)  # three clean steps' worth of verdicts (4 groups of 4)
    with pytest.warns(MonitorAlert, match="verifier errors"):
        result = trainer.run()
    trainer.close()
    assert result.stopped_by is not None and result.stopped_by.startswith("verifier_errors")
    assert 3 < result.steps < 12
    with RunStore(tiny_config.path / "run.sqlite") as store:
        info = store.info()
        assert info["status"] == "stopped_by_alert" and "verifier errors" in info["stop_reason"]
        assert [s for s, _ in store.checkpoints()] == [result.steps]  # checkpointed first (checkpoint_every = 0)
        rows = store.db.execute("SELECT step, kind, message FROM alerts").fetchall()
        assert rows and rows[0][1] == "verifier_errors" and rows[0][0] == result.steps
        assert [a["kind"] for a in store.alerts()] == ["verifier_errors"]


@pytest.mark.slow
def test_warn_goes_on_and_a_clean_verifier_raises_no_verifier_alert(tiny_config):
    trainer = _trainer(tiny_config, "warn", after=4 * 4 * 2, steps=9)
    with pytest.warns(MonitorAlert):
        result = trainer.run()
    trainer.close()
    assert result.steps == 9 and result.stopped_by is None
    with RunStore(tiny_config.path / "run.sqlite") as store:
        assert store.info()["status"] == "finished"
        assert [k for (k,) in store.db.execute("SELECT kind FROM alerts")].count("verifier_errors") == 1  # once, not per step
    clean = _trainer(tiny_config.model_copy(update={"name": "clean"}), "stop", after=10**9, steps=9)
    result = clean.run()
    clean.close()
    with RunStore(clean.run_dir / "run.sqlite") as store:
        kinds = [k for (k,) in store.db.execute("SELECT kind FROM alerts")]
    assert "verifier_errors" not in kinds and (result.stopped_by is None) == (kinds == [])
