"""`Learner.update` bit for bit: a digest of the weights and metrics after two updates, per configuration.

The digests were taken from the learner before its update became micro-steps with a reducer passed in
(issue 39); a refactor of the update that changes any float (an accumulation reordered, a reduction moved)
changes a digest. The run is pinned to one torch thread, so the digests do not depend on the core count.
If a deliberate change of the update's numbers lands, the digests are retaken in the same commit, saying why.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from posttrain.config import RLConfig
from posttrain.models import CausalLM, ModelConfig
from posttrain.rl.learner import Learner
from posttrain.rl.reducer import IdentityReducer
from posttrain.rl.train_batch import TrainBatch


def _model() -> CausalLM:
    cfg = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(0))
    return m


def _batch(step: int, rows: int = 8, width: int = 12, prompt: int = 5) -> TrainBatch:
    """Two groups of four rows; each group's rows share a 5-token prompt; lengths vary, targets after the prompt."""
    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(1, 48, (rows, width), generator=g)
    groups = torch.arange(rows) // 4
    for gi in range(2):
        ids[groups == gi, :prompt] = ids[gi * 4, :prompt]
    lengths = torch.randint(prompt + 2, width + 1, (rows,), generator=g)
    mask = torch.zeros(rows, width - 1)
    for r, n in enumerate(lengths.tolist()):
        ids[r, n:] = 0
        mask[r, prompt - 1 : n - 1] = 1.0
    old = -torch.rand(rows, width - 1, generator=g) * 3 * mask
    adv = torch.randn(rows, generator=g)
    return TrainBatch(ids, mask, old, adv, lengths, groups=groups)


CONFIGS = {
    "default": (dict(lr=1e-2), False),
    "padded_rows": (dict(lr=1e-2, share_prefix=False), False),
    "packed": (dict(lr=1e-2, packing=True, share_prefix=False), False),
    "everything": (dict(lr=1e-2, kl_beta=0.1, epochs=2, minibatches=2, micro_batches=2, warmup_steps=1,
                        loss_agg="seq_mean_token_sum_norm"), True),
}

DIGESTS = {
    "default": "d2ce7d078f9ab748",
    "padded_rows": "f8914b0327ad1d26",
    "packed": "57b67701c8a3bc4b",
    "everything": "cbb44696ac479a55",
}


def update_digest(name: str) -> str:
    kwargs, importance_sampling = CONFIGS[name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _model()
        learner = Learner(model, RLConfig(**kwargs), max_tokens=11, importance_sampling=importance_sampling,
                          total_updates=8)
        metrics = [learner.update(_batch(step)) for step in range(2)]
    finally:
        torch.set_num_threads(threads)
    h = hashlib.sha256()
    for pname, p in sorted(model.named_parameters()):
        h.update(pname.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    for m in metrics:
        h.update(repr(sorted((k, float(v).hex()) for k, v in m.items())).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_update_is_bit_for_bit_the_one_before_the_refactor(name):
    assert update_digest(name) == DIGESTS[name]


def test_the_digest_sees_one_changed_float():
    """The check can fail: the same update with a learning rate one ulp away gives another digest."""
    kwargs, is_ = CONFIGS["default"]
    CONFIGS["nudged"] = (dict(kwargs, lr=float.fromhex((1e-2).hex()) * (1 + 2**-52)), is_)
    try:
        assert update_digest("nudged") != update_digest("default")
    finally:
        del CONFIGS["nudged"]


class _CountingReducer:
    """One process counting what the update asks of it; its sums are doubled, as two identical ranks' would be."""

    world = 1

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.sums = 0
        self.max, self.whole = IdentityReducer().max, IdentityReducer().whole

    def local_rows(self, rows):
        self.rows.append(rows.numel())
        return rows

    def sum(self, values):
        self.sums += 1
        return [2 * v for v in values]


def test_the_update_goes_through_the_reducer_it_is_given():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the digests: a tiny model, where a second thread only waits on a loaded machine
    try:
        _updates_through_a_counting_reducer()
    finally:
        torch.set_num_threads(threads)


def _updates_through_a_counting_reducer() -> None:
    cfg = RLConfig(lr=1e-2, minibatches=2, micro_batches=2, share_prefix=False)
    plain = Learner(_model(), cfg, max_tokens=11).update(_batch(0))
    reducer = _CountingReducer()
    doubled = Learner(_model(), cfg, max_tokens=11, reducer=reducer).update(_batch(0))
    assert reducer.rows == [2, 2, 2, 2]  # two minibatches of two micro-batches of two rows
    assert reducer.sums == 2 + 1  # one per optimizer step, one for the mismatch
    assert doubled["pg_loss"] == 2 * plain["pg_loss"] and doubled["mismatch_mean"] == plain["mismatch_mean"]
