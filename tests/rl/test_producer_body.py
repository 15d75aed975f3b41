"""One producer body behind every back end, and `on_new_weights = "update"` on each: weights published after the
producer loaded its version are the ones it samples with, and every completion (the policy version the store
keeps per sample) says so; with `continue` the same publication is not adopted mid-request."""

from __future__ import annotations

import copy

import pytest
import torch

from posttrain.rl.async_loop import ProcessRunner, ThreadRunner, WeightBoard
from posttrain.rl.buffer import RolloutRequest
from posttrain.rl.producer import OfferedWeights, ProducerBody, ProducerParts, SharedWeights, own_parts
from posttrain.types import Task


def _with(cfg, **sections):
    return cfg.model_copy(update={k: getattr(cfg, k).model_copy(update=v) for k, v in sections.items()})


@pytest.fixture
def cfg(tiny_config):
    return _with(tiny_config, reward={"verifier": "numeric", "tolerance": 4.0}, eval={"every": 0},
                 rollout={"mode": "async"})


def _newer(model) -> dict[str, torch.Tensor]:
    return {k: v + 0.01 if v.is_floating_point() else v.clone() for k, v in model.state_dict().items()}


def _versions_after_a_publication(runner, board, newer) -> set[int]:
    """Load version 0, publish version 1 without the producer loading it, then sample one request."""
    assert runner.load(board) == 0
    board.publish(newer, 1)
    groups = runner.run(RolloutRequest(0, [Task("t", "1+2=", "3"), Task("u", "2+2=", "4")], 2, 1, 0))
    assert len(groups) == 2
    return {turn.completion.policy_version for g in groups for t in g.trajectories for turn in t.turns}


@pytest.mark.parametrize("policy, expected", [("update", {1}), ("continue", {0})])
def test_a_thread_producer_following_weights_samples_with_the_newer_version(cfg, policy, expected):
    c = _with(cfg, rollout={"mode": "async", "on_new_weights": policy})
    parts = own_parts(c, torch.get_num_threads())
    board = WeightBoard(parts.model.state_dict(), 0, shared=False)
    body = ProducerBody(c, ProducerParts(copy.deepcopy(parts.model), parts.tokenizer, parts.domains, parts.params,
                                         parts.sandboxes, owns_sandboxes=False), 0, board)
    newer = _newer(parts.model)
    assert _versions_after_a_publication(ThreadRunner(body), board, newer) == expected
    held = body.engine.model.state_dict()
    assert all(torch.equal(held[k], v) for k, v in newer.items()) == (policy == "update")  # the weights, not a label


def test_shared_and_offered_weights_load_the_newest_and_say_which():
    from posttrain.engine.mock import MockEngine

    board = WeightBoard({"w": torch.zeros(2)}, 0, shared=True)
    shared, engine = SharedWeights(board.tensors, board.lock, board.value), MockEngine(["x"])
    board.publish({"w": torch.ones(2)}, 3)
    assert shared.version == 3 and shared.load_into(engine) == 3 and torch.equal(engine.weights["w"], torch.ones(2))
    offered = OfferedWeights()
    offered.offer({"w": torch.full((2,), 2.0).numpy()}, 5)
    offered.offer({"w": torch.zeros(2).numpy()}, 4)  # older than what is held: ignored
    assert offered.version == 5 and offered.load_into(engine) == 5 and torch.equal(engine.weights["w"], torch.full((2,), 2.0))
    assert offered.load_into(engine) == 5  # nothing newer: the engine keeps what it holds


@pytest.mark.slow
@pytest.mark.parametrize("policy, expected", [("update", {1}), ("continue", {0})])
def test_a_producer_process_following_weights_samples_with_the_newer_version(cfg, policy, expected):
    c = _with(cfg, rollout={"mode": "async", "producer_kind": "process", "on_new_weights": policy})
    model = own_parts(c, torch.get_num_threads()).model
    board = WeightBoard(model.state_dict(), 0, shared=True)
    runner = ProcessRunner(c, 0, 0, 1, board)
    try:
        assert _versions_after_a_publication(runner, board, _newer(model)) == expected
    finally:
        runner.close()


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("policy, expected", [("update", {1}), ("continue", {0})])
def test_a_ray_producer_following_weights_samples_with_the_newer_version(cfg, ray_cluster, policy, expected):
    from posttrain.distributed.ray_backend import RayRunner

    c = _with(cfg, rollout={"mode": "async", "backend": "ray", "on_new_weights": policy})
    model = own_parts(c, torch.get_num_threads()).model
    board = WeightBoard(model.state_dict(), 0, shared=False)
    runner = RayRunner(c, 0, 0, board)
    try:
        assert _versions_after_a_publication(runner, board, _newer(model)) == expected
    finally:
        runner.close()
