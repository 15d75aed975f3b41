"""Block-hashed prefix cache: longest-prefix match, chain keys, LRU eviction."""

import torch

from posttrain.engine.local.kv import SlotCache
from posttrain.engine.local.prefix_cache import PrefixCache
from posttrain.models import ModelConfig

CFG = ModelConfig(
    vocab_size=50, hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1
)


def _row_source(cache, row):
    return lambda lo, hi: [c[row, :, lo:hi] for c in cache.k + cache.v]


def test_match_returns_the_longest_cached_block_chain_and_copies_its_kv():
    kv = SlotCache(CFG, 2, 32)
    for t in kv.k + kv.v:
        t[0].normal_()
    pc = PrefixCache(CFG, capacity_blocks=8, block=4)
    tokens = list(range(10))
    pc.insert(tokens, _row_source(kv, 0))  # two full blocks stored, the last 2 tokens not
    assert len(pc.match(tokens + [42], 11)) == 2
    assert len(pc.match([0, 1, 2, 3, 9, 9, 9, 9], 8)) == 1  # the second block differs
    assert pc.match([9, 1, 2, 3], 4) == []  # same tokens, different chain position: no hit
    slots = pc.match(tokens, 8)
    pc.read_into(slots, kv, 1)
    for t in kv.k + kv.v:
        torch.testing.assert_close(t[1, :, :8], t[0, :, :8])
    assert pc.hit_tokens == 4 + 8 + 8 and pc.lookup_tokens == 11 + 8 + 4 + 10


def test_lru_eviction_keeps_the_budget_and_clear_forgets_everything():
    kv = SlotCache(CFG, 1, 64)
    pc = PrefixCache(CFG, capacity_blocks=3, block=2)
    pc.insert([1, 2, 3, 4], _row_source(kv, 0))
    pc.insert([5, 6, 7, 8], _row_source(kv, 0))  # needs 2 blocks: evicts the oldest
    assert len(pc.match([5, 6, 7, 8], 4)) == 2
    assert len(pc.match([1, 2, 3, 4], 4)) == 0  # its first block was evicted
    pc.clear()
    assert pc.match([5, 6, 7, 8], 4) == []
