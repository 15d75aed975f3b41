"""The engine's KV store: preallocated rows of slots, one row per sequence, each at its own length.

Covers: per-row write offsets (so sequences of different lengths decode in one
forward: the basis of continuous batching), ragged chunks (padding queries
write to a scratch slot that nothing ever attends to), row copies (forking a
prefill to n samples, compacting the batch, prefix-cache reads and writes),
growth, and an optional sliding window with attention sinks: positions past
the sinks live in a ring of `window + chunk` slots, so memory stays bounded
for any input length while a chunk never overwrites a key a query of the same
chunk still needs.
Cascade attention (a group's samples read their shared prompt's KV from another cache) runs
in C for decode steps (`pt_cascade_attend` of engine/local/native_decode.py), split across
torch's intra-op thread count, and in PyTorch matmuls otherwise.
Devices: every tensor lives on the cache's `device`; the C kernel serves CPU caches only (`native`).
Does not cover: paging or block tables (a row is contiguous, so the running
batch reads the cache as a view, never a gather), scheduling (engine/local/scheduler.py).

Protocol with `CausalLM.forward`: the engine calls `bind(...)` to say which
rows and offsets the next forward addresses, then passes the cache as
`cache=`; the model calls `prepare`, `update` per layer, and `advance`.
"""

from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor

from posttrain.engine.local.native_decode import load_kernel
from posttrain.models.config import ModelConfig

# native cascade attention splits a step's rows across torch's intra-op thread count, at least this many rows a part
_ROWS_PER_THREAD = 16
_POOL: tuple[ThreadPoolExecutor, int] | None = None  # (pool, its worker count)
_POOL_LOCK = threading.Lock()


def native_attention_pays(threads: int, hidden: int) -> bool:
    """Whether decode steps' cascade attention goes to C (`pt_cascade_attend`) rather than PyTorch's matmuls:
    on one thread C wins; on two, PyTorch's matmuls use both cores, and C split over a thread pool wins only
    for wide models, where attention calls are long enough to outweigh sharing the cores with OpenMP's
    spinning workers (benchmarks/cascade_attention.py; the measurements are in benchmarks/RESULTS.md)."""
    return threads <= 1 or hidden >= 256


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist, yet the executor believes they do (and would queue
    work forever): the child starts its own on first use."""
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def _attend_pool(workers: int) -> ThreadPoolExecutor:
    """The threads that run parts of `pt_cascade_attend` beside the caller (C only: no OpenMP team is ever
    started on them, so idle they cost nothing, unlike a thread that ran torch ops)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[1] < workers:
            _POOL = (ThreadPoolExecutor(max_workers=workers, thread_name_prefix="posttrain-attend"), workers)
        return _POOL[0]


@dataclass(slots=True)
class SharedPrefix:
    """Where the rows of a cascade forward find their group's prompt KV.

    Group g's prompt sits in row g of `cache`, slots [0, length[g]); row i of
    the forward belongs to group `group[i]` as its `member[i]`-th sample.
    """

    cache: "SlotCache"
    groups: int  # G: prompt rows [0, G) of `cache`
    width: int  # P: the longest prompt
    per_group: int  # n: the most samples of one group in this forward
    group: Tensor  # [b]
    member: Tensor  # [b]
    row_offset: Tensor  # [b] prompt length of each row's group: its positions start there
    mask: Tensor  # [b, 1, 1, P] additive: 0 on the group's prompt slots, -inf past its length


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """Sliding-window attention with attention sinks (StreamingLLM): keep the first
    `sinks` tokens and the last `window` tokens of every sequence."""

    window: int
    sinks: int = 4

    def __post_init__(self) -> None:
        if self.window < 1 or self.sinks < 0:
            raise ValueError(f"sliding window needs window >= 1 and sinks >= 0, got {self.window}, {self.sinks}")


class SlotCache:
    """`rows` x `slots` keys and values per layer; the last slot of every row is scratch."""

    def __init__(
        self,
        config: ModelConfig,
        rows: int,
        slots: int,
        dtype: torch.dtype = torch.float32,
        window: WindowSpec | None = None,
        chunk: int = 1,
        device: torch.device | str = "cpu",
    ) -> None:
        self.dtype, self.window = dtype, window
        self.device = dev = torch.device(device)
        # the C cascade kernel reads host memory: a CPU cache uses it (where it pays), any other device never
        self.native = dev.type == "cpu"
        if window is not None:  # the ring holds window + one chunk: writes never clobber keys still in view
            self.ring = window.window + chunk
            slots = window.sinks + self.ring + 1
        shape = (rows, config.num_key_value_heads, slots, config.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=dev) for _ in range(config.num_hidden_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=dev) for _ in range(config.num_hidden_layers)]
        self.slot_pos = torch.full((rows, slots), -1, dtype=torch.long, device=dev) if window is not None else None
        self._bound: tuple | None = None
        self.shared: SharedPrefix | None = None
        self._native_rows: tuple | None = None  # one decode step's per-row arguments of pt_cascade_attend

    # -- geometry -------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return self.k[0].shape[0]

    @property
    def slots(self) -> int:
        return self.k[0].shape[2]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def grow(self, rows: int, slots: int) -> None:
        """Reallocate to at least rows x slots, keeping what is stored (window mode keeps its slot count)."""
        rows = max(rows, self.rows)
        slots = self.slots if self.window is not None else max(slots, self.slots)
        if rows == self.rows and slots == self.slots:
            return
        for store in (self.k, self.v):
            for i, old in enumerate(store):
                new = torch.zeros((rows, old.shape[1], slots, old.shape[3]), dtype=old.dtype, device=self.device)
                new[: old.shape[0], :, : old.shape[2] - 1] = old[:, :, :-1]
                store[i] = new
        if self.slot_pos is not None:
            sp = torch.full((rows, slots), -1, dtype=torch.long, device=self.device)
            sp[: self.slot_pos.shape[0]] = self.slot_pos
            self.slot_pos = sp

    def slot_of(self, pos: Tensor) -> Tensor:
        if self.window is None:
            return pos
        s = self.window.sinks
        return torch.where(pos < s, pos, s + (pos - s) % self.ring)

    # -- one forward ----------------------------------------------------------------------
    def bind(
        self,
        rows: slice | Tensor,
        start: list[int],
        n_valid: list[int] | None,
        t: int,
        shared: "SharedPrefix | None" = None,
    ) -> "SlotCache":
        """The next forward feeds `t` tokens to `rows`; row i's first token goes to slot
        `start[i]` and only its first `n_valid[i]` tokens are real (all when None).

        With `shared`, row i also attends to the prompt KV of its group, kept
        once in another cache (cascade attention), and its positions start
        after that prompt.
        """
        self._bound = (rows, start, n_valid, t)
        self.shared = shared
        self._native_rows = None
        return self

    def prepare(self, input_ids: Tensor, position_ids: Tensor | None, attention_mask: Tensor | None):
        rows, start, n_valid, t = self._bound
        b = len(start)
        dev = self.device
        start_t = torch.tensor(start, dtype=torch.long, device=dev)
        offs = torch.arange(t, device=dev)
        slot_pos = start_t[:, None] + offs  # [b, t] slot of each token in its row
        pos = slot_pos if self.shared is None else slot_pos + self.shared.row_offset[:, None]
        valid = None if n_valid is None else offs[None, :] < torch.tensor(n_valid, device=dev)[:, None]  # [b, t]
        ends = [s + (t if n_valid is None else n) for s, n in zip(start, n_valid or [t] * b)]
        scratch = self.slots - 1
        if self.window is None:
            if max(ends) > scratch:
                raise ValueError(f"KV cache row overflow: {max(ends)} tokens > {scratch} slots")
            used = max(ends)
            slot = slot_pos if valid is None else torch.where(valid, slot_pos, scratch)
            contiguous = valid is None and min(start) == max(start)
            vis = torch.arange(used, device=dev)[None, None, :] <= slot_pos[:, :, None]  # [b, t, S]
        else:
            used = min(max(ends), scratch)
            slot = self.slot_of(pos)
            if valid is not None:
                slot = torch.where(valid, slot, scratch)
            contiguous = False
        row_idx = self._row_index(rows, b)[:, None].expand(b, t)
        if self.window is not None:
            keep = valid if valid is not None else torch.ones_like(pos, dtype=torch.bool)
            self.slot_pos[row_idx[keep], slot[keep]] = pos[keep]
            sp = self.slot_pos[row_idx[:, 0], :used][:, None, :]  # [b, 1, S]
            q = pos[:, :, None]
            w = self.window
            vis = (sp >= 0) & (sp <= q) & ((sp < w.sinks) | (sp > q - w.window))
        mask = torch.zeros(vis.shape, dtype=self.dtype, device=dev).masked_fill_(~vis, float("-inf"))[:, None]  # [b, 1, t, S]
        self._write = (rows, start[0], t) if contiguous else (row_idx, slot)
        self._used = used
        self._mask = mask
        return pos, mask

    def _row_index(self, rows: slice | Tensor, b: int) -> Tensor:
        if isinstance(rows, slice):
            return torch.arange(rows.start, rows.start + b, device=self.device)
        return rows

    def _store(self, layer: int, k: Tensor, v: Tensor) -> None:
        kc, vc = self.k[layer], self.v[layer]
        if len(self._write) == 3:  # every row writes the same slot range: plain slice assignment
            r, s0, t = self._write
            kc[r, :, s0 : s0 + t] = k
            vc[r, :, s0 : s0 + t] = v
        else:
            row_idx, slot = self._write
            kc[row_idx, :, slot] = k.transpose(1, 2)
            vc[row_idx, :, slot] = v.transpose(1, 2)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        rows = self._bound[0]
        kc, vc = self.k[layer], self.v[layer]
        self._store(layer, k, v)
        u = self._used
        if isinstance(rows, slice):
            return kc[rows, :, :u], vc[rows, :, :u]
        return kc.index_select(0, rows)[:, :, :u], vc.index_select(0, rows)[:, :, :u]

    def advance(self, t: int) -> None:
        self._bound = None  # lengths are the engine's bookkeeping

    @property
    def cascade(self) -> bool:
        return self.shared is not None

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Cascade attention: q [b, Hq, t, D] over (its group's shared prompt) + (its own row) -> [b, Hq, t, D].

        The prompt's keys are read once per group, not once per sample: the
        scores of a group's queries against them come from one matmul, and one
        softmax runs over prompt and row scores together, so the result is
        plain attention over the concatenated sequence. One new token per row (a decode step) runs in C when
        the kernel is built (`pt_cascade_attend`: each row's scores over its group's prompt and its own slots,
        no gather of the rows' keys, no scatter into group-shaped buffers); the same maths, to float rounding.
        """
        if (self.native and q.shape[2] == 1 and self.window is None and q.dtype == self.dtype == torch.float32
                and native_attention_pays(torch.get_num_threads(), q.shape[1] * q.shape[3])):
            kernel = load_kernel()
            if kernel is not None:
                self._store(layer, k, v)
                return self._attend_native(kernel, layer, q)
        ks, vs = self.update(layer, k, v)  # [b, Hkv, S, D]
        sh = self.shared
        b, hq, t, d = q.shape
        hkv = ks.shape[1]
        m = (hq // hkv) * t  # query rows per kv head
        qr = q.reshape(b, hkv, m, d) * d**-0.5
        kp, vp = sh.cache.k[layer][: sh.groups, :, : sh.width], sh.cache.v[layer][: sh.groups, :, : sh.width]
        qg = q.new_zeros((sh.groups, hkv, sh.per_group, m, d))
        qg[sh.group, :, sh.member] = qr
        sp = torch.matmul(qg.view(sh.groups, hkv, sh.per_group * m, d), kp.transpose(-1, -2))  # [G, Hkv, n*m, P]
        sp = sp.view(sh.groups, hkv, sh.per_group, m, sh.width)[sh.group, :, sh.member]  # [b, Hkv, m, P]
        sr = torch.matmul(qr, ks.transpose(-1, -2))  # [b, Hkv, m, S]
        mask = self._mask if t == 1 else self._mask.repeat(1, 1, m // t, 1)
        scores = torch.cat((sp + sh.mask, sr + mask), dim=-1)
        probs = torch.softmax(scores, dim=-1)
        pp, pr = probs.split((sh.width, ks.shape[2]), dim=-1)
        out = torch.matmul(pr, vs)  # [b, Hkv, m, D]
        pg = probs.new_zeros((sh.groups, hkv, sh.per_group, m, sh.width))
        pg[sh.group, :, sh.member] = pp
        op = torch.matmul(pg.view(sh.groups, hkv, sh.per_group * m, sh.width), vp)
        out = out + op.view(sh.groups, hkv, sh.per_group, m, d)[sh.group, :, sh.member]
        return out.view(b, hq, t, d)

    def _attend_native(self, kernel, layer: int, q: Tensor) -> Tensor:
        """`attend` for one token per row through `pt_cascade_attend`: q [b, Hq, 1, D] -> [b, Hq, 1, D]."""
        sh = self.shared
        b, hq, _, d = q.shape
        if self._native_rows is None:  # the same for every layer of this step
            rows = self._row_index(self._bound[0], b).to(torch.int64).contiguous()
            # slots 0..start, this one included
            own = (torch.tensor(self._bound[1], dtype=torch.int64, device=q.device) + 1).contiguous()
            self._native_rows = (rows, own, sh.group.to(torch.int64).contiguous(),
                                 sh.row_offset.to(torch.int64).contiguous())
        rows, own, group, plen = self._native_rows
        q3 = q.reshape(b, hq, d).contiguous()
        out = torch.empty_like(q3)
        kp, vp, kr, vr = sh.cache.k[layer], sh.cache.v[layer], self.k[layer], self.v[layer]
        args = (hq, kr.shape[1], d, q3.data_ptr(), ctypes.c_float(d**-0.5),
                kp.data_ptr(), vp.data_ptr(), kp.stride(0), kp.stride(1), group.data_ptr(), plen.data_ptr(),
                kr.data_ptr(), vr.data_ptr(), kr.stride(0), kr.stride(1), rows.data_ptr(), own.data_ptr(),
                out.data_ptr())  # fmt: skip
        parts = min(torch.get_num_threads(), b // _ROWS_PER_THREAD) if b >= 2 * _ROWS_PER_THREAD else 1
        bounds = [b * i // parts for i in range(parts + 1)]
        # ctypes lets go of the GIL: the other parts run on pool threads while this one runs here
        pending = [_attend_pool(parts - 1).submit(kernel.pt_cascade_attend, bounds[i], bounds[i + 1], *args)
                   for i in range(1, parts)]
        rcs = [kernel.pt_cascade_attend(bounds[0], bounds[1], *args)] + [f.result() for f in pending]
        if any(rc != 0 for rc in rcs):
            raise MemoryError("native cascade attention could not allocate its scratch buffer")
        return out.view(b, hq, 1, d)

    # -- row copies -----------------------------------------------------------------------
    def copy_rows(self, dst: "SlotCache", src_rows: list[int], dst_rows: list[int], n_slots: int) -> None:
        """dst[dst_rows, :n_slots] <- self[src_rows, :n_slots] (all slots in window mode)."""
        if not src_rows:
            return
        n = self.slots - 1 if self.window is not None else n_slots
        if len(src_rows) == 1 and len(dst_rows) == 1:
            s, d = src_rows[0], dst_rows[0]
            for a, b in zip(self.k + self.v, dst.k + dst.v):
                b[d, :, :n] = a[s, :, :n]
        else:
            si, di = torch.tensor(src_rows, device=self.device), torch.tensor(dst_rows, device=self.device)
            for a, b in zip(self.k + self.v, dst.k + dst.v):
                b[di, :, :n] = a[si, :, :n]
        if self.slot_pos is not None:
            dst.slot_pos[torch.tensor(dst_rows, device=self.device)] = self.slot_pos[torch.tensor(src_rows, device=self.device)]

    def clear_row(self, row: int) -> None:
        if self.slot_pos is not None:
            self.slot_pos[row] = -1
