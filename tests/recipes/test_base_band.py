"""The built-in base model stops inside its band even when accuracy jumps over it between two checks.

Covers: `builtin.pretrain_base` with a scripted band check (accuracy as a function of the step): an
overshoot (below the band at one check, above it at the next) goes back to the last check below the band
and replays the same batches checking every step, so the model saved is the first step inside the band
and is bit-identical to a straight run stopped at that step; a second overshoot is accepted (no loop).
Does not cover: real pre-training accuracy (the check is scripted) or the band warning (tests/test_cli.py).
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from posttrain.config import BaseModelConfig
from posttrain.eval.accuracy import AccuracyResult
from posttrain.recipes import builtin

TINY = {"hidden_size": 16, "num_layers": 1, "intermediate_size": 32, "num_heads": 2, "batch_size": 4,
        "max_steps": 40, "target_low": 0.4, "target_high": 0.6}


def _scripted(monkeypatch, curve, calls):
    """The band check returns curve(step), the training step read from AdamW's own step count (which a
    restored optimizer state rewinds)."""
    def check(engine, tasks, verifier, max_tokens, **kw):
        step = calls["step"]
        acc = curve(step)
        calls["seen"].append((step, acc))
        return AccuracyResult(accuracy=acc, n_tasks=len(tasks), n_samples=len(tasks), n_errors=0)

    real_step = torch.optim.AdamW.step

    def counting_step(self, *a, **kw):
        out = real_step(self, *a, **kw)
        calls["step"] = int(next(iter(self.state.values()))["step"])
        calls["taken"] += 1
        return out

    monkeypatch.setattr(builtin, "evaluate_accuracy", check)
    monkeypatch.setattr(torch.optim.AdamW, "step", counting_step)


def _weights(path):
    return load_file(str(path / "model.safetensors"))


@pytest.mark.slow
def test_overshoot_replays_from_the_last_check_below_the_band(tmp_path, monkeypatch):
    # accuracy as a function of optimizer steps taken: below the band up to 13, inside at 14, above from 16
    curve = lambda s: 0.1 if s < 14 else (0.5 if s < 16 else 0.9)  # noqa: E731
    calls = {"step": 0, "taken": 0, "seen": []}
    _scripted(monkeypatch, curve, calls)
    acc, steps = builtin.pretrain_base(BaseModelConfig(**TINY, eval_every=10), tmp_path / "replayed")
    # checks at 10 (below) and 20 (over the band): back to 10, then every step from 11 until 14 is inside
    assert [s for s, _ in calls["seen"]] == [10, 20, 11, 12, 13, 14]
    assert (acc, steps) == (0.5, 14)
    assert calls["taken"] == 24  # 20, then 4 replayed

    calls2 = {"step": 0, "taken": 0, "seen": []}
    _scripted(monkeypatch, curve, calls2)
    acc2, steps2 = builtin.pretrain_base(BaseModelConfig(**TINY, eval_every=14), tmp_path / "straight")
    assert (acc2, steps2) == (0.5, 14)
    replayed, straight = _weights(tmp_path / "replayed"), _weights(tmp_path / "straight")
    assert replayed.keys() == straight.keys()
    assert all(torch.equal(replayed[k], straight[k]) for k in replayed)  # the same batches, the same model


@pytest.mark.slow
def test_a_second_overshoot_is_accepted(tmp_path, monkeypatch):
    calls = {"step": 0, "taken": 0, "seen": []}
    _scripted(monkeypatch, lambda s: 0.1 if s < 15 else 0.9, calls)  # no step is ever inside the band
    acc, steps = builtin.pretrain_base(BaseModelConfig(**TINY, eval_every=10), tmp_path / "m")
    assert (acc, steps) == (0.9, 15)  # out of band, said by ensure_base's warning; never an endless loop
