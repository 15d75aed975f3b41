"""The training loop end to end on a tiny random model: smoke, resume equivalence, failures as data."""

import pytest
import torch

from posttrain.rewards import SyncVerifier
from posttrain.rl.trainer import RunExistsError, Trainer
from posttrain.store import RunStore
from posttrain.types import Verdict, VerdictStatus


def _with(cfg, **sections):
    update = {}
    for name, values in sections.items():
        section = getattr(cfg, name)
        update[name] = section.model_copy(update=values) if hasattr(section, "model_copy") else values
    return cfg.model_copy(update=update)


@pytest.fixture
def cfg(tiny_config):
    # numeric verifier with a wide tolerance: a random model earns mixed rewards, so groups carry signal
    return _with(tiny_config, reward={"verifier": "numeric", "tolerance": 4.0})


@pytest.mark.slow
def test_five_step_smoke_run_records_everything(cfg):
    cfg = _with(cfg, tensorboard=True)
    trainer = Trainer(cfg)
    result = trainer.run()
    trainer.close()
    assert result.steps == 5
    assert "greedy_accuracy" in result.final_eval
    with RunStore(cfg.path / "run.sqlite") as store:
        steps = store.steps()
        assert [s for s, _ in steps] == [1, 2, 3, 4, 5]
        m = steps[-1][1]
        for key in ("reward", "pass_rate", "groups_kept", "zero_variance_frac", "rollout_s", "mismatch_mean"):
            assert key in m
        assert m["mismatch_max"] < 1e-4  # sampler and learner share one code path
        assert store.count("samples") == sum(int(x["groups_sampled"]) for _, x in steps) * cfg.sampling.n
        assert store.info()["code"]["source_sha"]
        assert store.evals("held_out")
    assert list((cfg.path / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_policy_actually_changes(cfg):
    trainer = Trainer(cfg)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.run()
    trainer.close()
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


@pytest.mark.slow
def test_resume_reaches_the_same_state_as_an_uninterrupted_run(cfg, tmp_path):
    base = _with(cfg, train={"steps": 6, "checkpoint_every": 3})
    full_cfg = base.model_copy(update={"name": "full"})
    full = Trainer(full_cfg)
    full.run()
    full.close()

    cut_cfg = base.model_copy(update={"name": "cut"})
    first = Trainer(cut_cfg)
    first.run(stop_at=4)  # one step past the checkpoint: resume must redo it, not duplicate it
    first.close()
    resumed = Trainer(cut_cfg, resume=True)
    assert resumed.step == 3
    resumed.run()
    resumed.close()

    for (k, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), k
    with RunStore(full_cfg.path / "run.sqlite") as s1, RunStore(cut_cfg.path / "run.sqlite") as s2:
        drop = ("rollout_s", "learn_s", "step_s", "verifier_latency_p50", "verifier_latency_p95", "verifier_latency_max")
        m1 = [(st, {k: v for k, v in m.items() if k not in drop}) for st, m in s1.steps()]
        m2 = [(st, {k: v for k, v in m.items() if k not in drop}) for st, m in s2.steps()]
        assert m1 == m2
        assert s1.count("samples") == s2.count("samples")
        assert s2.info()["resumed_from"] == 3


def test_existing_run_is_not_clobbered(cfg):
    Trainer(cfg).close()
    with pytest.raises(RunExistsError, match="--resume"):
        Trainer(cfg)
    Trainer(cfg, overwrite=True).close()


def test_resume_without_checkpoint_is_a_clear_error(cfg):
    Trainer(cfg).close()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(cfg, resume=True)


@pytest.mark.slow
def test_raising_verifier_is_counted_and_stored_not_fatal(cfg):
    class Flaky(SyncVerifier):
        name = "flaky"

        def __init__(self):
            self.calls = 0

        def verify(self, task, response):
            self.calls += 1
            if self.calls % 3 == 0:
                raise RuntimeError("verifier crashed")
            return Verdict(score=float(self.calls % 2), passed=bool(self.calls % 2))

    from posttrain.rl.build import build

    parts = build(cfg, store=False)
    parts.rollouter.verifier = Flaky()  # components are built apart from the loop: swap one in
    trainer = Trainer(cfg, components=parts)
    result = trainer.run()
    trainer.close()
    assert result.steps == 5
    with RunStore(cfg.path / "run.sqlite") as store:
        errors = sum(m["verifier_errors"] for _, m in store.steps())
        stored = store.count("samples", "status = ?", (VerdictStatus.ERROR.value,))
        assert errors > 0 and stored == errors
        detail = store.db.execute("SELECT details FROM samples WHERE status = 'error' LIMIT 1").fetchone()[0]
        assert "verifier crashed" in detail


def test_a_fill_round_draws_enough_for_the_batch_to_fill_at_once_most_of_the_time():
    import random

    from posttrain.rl.rollout import fill_draw

    assert fill_draw(16, 1.0) == 16  # every group informative: no spares
    assert fill_draw(16, 0.01) == 64  # capped at 4x the need
    sizes = [fill_draw(16, r) for r in (0.9, 0.8, 0.7, 0.6, 0.5)]
    assert sizes == sorted(sizes) and all(16 <= s <= 64 for s in sizes)
    rng = random.Random(0)
    for rate in (0.9, 0.78, 0.6, 0.4):
        k = fill_draw(16, rate)
        filled = sum(sum(rng.random() < rate for _ in range(k)) >= 16 for _ in range(2000)) / 2000
        assert filled >= 0.93, (rate, k, filled)  # mean + 2 std: about 97% of rounds fill the batch
