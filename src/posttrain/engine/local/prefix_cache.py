"""Cross-request prefix cache: full blocks of tokens, hashed along their chain, holding their KV.

Covers: lookup of the longest cached run of full blocks at the start of a
prompt (a block's key is its parent block plus its own tokens, so a hit means
the whole prefix matches, as in a radix tree cut at block boundaries), copying
hit blocks into a cache row, storing a row's full blocks after a prefill or
when a sequence finishes (so an agent's next turn, which resends the last
turn's output, hits too), LRU eviction within a fixed block budget, hit-rate
counters, and `clear` (the engine calls it when the weights change).
Does not cover: sharing blocks in place (hits are copied into the row: rows are
contiguous), partial-block hits, sliding-window rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import Tensor

from posttrain.engine.local.kv import SlotCache
from posttrain.models.config import ModelConfig


class PrefixCache:
    def __init__(self, config: ModelConfig, capacity_blocks: int, block: int = 16, dtype=torch.float32,
                 device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        if capacity_blocks < 1 or block < 1:
            raise ValueError(f"prefix cache needs capacity_blocks >= 1 and block >= 1, got {capacity_blocks}, {block}")
        self.block = block
        shape = (capacity_blocks, config.num_key_value_heads, block, config.head_dim)
        # uninitialised on purpose: a block is read only after it was written, and untouched pages of a
        # large pool cost no memory (zeroing the default 32k-token pool took ~80 ms per engine)
        self.k = [torch.empty(shape, dtype=dtype, device=self.device) for _ in range(config.num_hidden_layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=self.device) for _ in range(config.num_hidden_layers)]
        self._index: OrderedDict[tuple, tuple[int, int]] = OrderedDict()  # (parent id, tokens) -> (node id, slot); LRU order
        self._free = list(range(capacity_blocks - 1, -1, -1))
        self._next_id = 1  # node ids are never reused: an evicted block's children become unreachable, not wrong
        self.lookup_tokens = 0
        self.hit_tokens = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def clear(self) -> None:
        self._index.clear()
        self._free = list(range(self.k[0].shape[0] - 1, -1, -1))

    def match(self, tokens: list[int], max_tokens: int) -> list[int]:
        """Pool slots of the longest cached run of full blocks within tokens[:max_tokens]; counts the lookup."""
        slots, parent = [], 0
        for i in range(max_tokens // self.block):
            key = (parent, tuple(tokens[i * self.block : (i + 1) * self.block]))
            hit = self._index.get(key)
            if hit is None:
                break
            self._index.move_to_end(key)
            slots.append(hit[1])
            parent = hit[0]
        self.lookup_tokens += len(tokens)
        self.hit_tokens += len(slots) * self.block
        return slots

    def read_into(self, slots: list[int], cache: SlotCache, row: int) -> None:
        if not slots:
            return
        idx, n = torch.tensor(slots, device=self.device), len(slots) * self.block
        for pool, dst in zip(self.k + self.v, cache.k + cache.v):
            blocks = pool.index_select(0, idx)  # [m, H, blk, D]
            dst[row, :, :n] = blocks.permute(1, 0, 2, 3).reshape(dst.shape[1], n, dst.shape[3])

    def insert(self, tokens: list[int], source: Callable[[int, int], list[Tensor]]) -> None:
        """Store the full blocks of `tokens`; `source(lo, hi)` gives the KV of tokens[lo:hi], called
        only when a block is new: per layer the keys, then per layer the values, each [H_kv, hi - lo, D]."""
        n_blocks = len(tokens) // self.block
        new: list[tuple[int, tuple, int]] = []  # (block index, key, slot)
        fresh: set[tuple] = set()
        parent = 0
        for i in range(n_blocks):
            key = (parent, tuple(tokens[i * self.block : (i + 1) * self.block]))
            hit = self._index.get(key)
            if hit is not None:
                self._index.move_to_end(key)
                parent = hit[0]
                continue
            if not self._free:
                if next(iter(self._index)) in fresh:  # the budget is smaller than this prefix: keep its head
                    break
                _, (_, freed) = self._index.popitem(last=False)
                self._free.append(freed)
            slot = self._free.pop()
            node = self._next_id
            self._next_id += 1
            self._index[key] = (node, slot)
            new.append((i, key, slot))
            fresh.add(key)
            parent = node
        if not new:
            return
        blocks = torch.tensor([i for i, _, _ in new], device=self.device)
        slots = torch.tensor([s for _, _, s in new], device=self.device)
        first, last = new[0][0], new[-1][0] + 1  # new blocks form a run: misses only grow once one misses
        lo, hi = first * self.block, last * self.block
        for src, pool in zip(source(lo, hi), self.k + self.v):
            h, d = src.shape[0], src.shape[2]
            run = src.reshape(h, last - first, self.block, d).permute(1, 0, 2, 3)
            pool[slots] = run.index_select(0, blocks - first)
