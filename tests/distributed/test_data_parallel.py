"""DDP and FSDP2 with 2 gloo processes under torchrun equal one process: gradients, weights, metrics."""

import pytest

from _harness.equivalence import run_equivalence


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.slow
def test_two_ranks_update_like_one_process(strategy):
    r = run_equivalence(strategy, nproc=2, steps=2)
    assert r["world"] == 2 and r["grad_names"] == 20  # every parameter compared
    assert r["max_grad_diff"] <= 1e-6
    assert r["max_weight_diff"] <= 1e-6  # after two AdamW steps at lr 1e-2
    assert r["metrics_diff"] <= 1e-5


def test_the_learner_refuses_without_a_process_group(tiny_model_dir):
    from posttrain.config import RLConfig
    from posttrain.distributed.learner import DataParallelLearner, DistributedSetupError
    from posttrain.models import load_model

    model, _ = load_model(tiny_model_dir)
    with pytest.raises(DistributedSetupError, match="init_from_env"):
        DataParallelLearner(model, RLConfig(), max_tokens=4)
