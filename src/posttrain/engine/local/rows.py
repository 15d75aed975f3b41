"""Where `LocalEngine` keeps each request's and each sample's KV: the row allocator over its two slot caches.

Covers: the running rows (`kv`: one row per sample, holding what it adds to its prompt, or its whole
sequence when it does not share the prompt) and the prompt store (`pkv`: one row per admitted request,
`p_owner[i].prompt_row == i`); how many slots a request needs; growing both caches (and a draft model's
mirror) on admission; handing a finished prefill to its samples (cascade: they read the prompt store;
otherwise each row gets a copy and the prompt row is freed); compacting the running rows when samples
finish (the rows past the new end move into the holes, in one copy); the cascade view of a forward's
rows (`shared_prefix`) and a sample's KV as the prefix cache reads it (`kv_source`).
Does not cover: when requests are admitted or retired (engine/local/scheduler.py), the KV layout itself
(engine/local/kv.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posttrain.engine.local.kv import SharedPrefix, SlotCache, WindowSpec
from posttrain.engine.local.sequence import Request, Sequence
from posttrain.engine.local.spec_decode import DraftProposer
from posttrain.models.config import ModelConfig


class RowAllocator:
    """The running rows, the prompt store and who holds which row."""

    def __init__(self, config: ModelConfig, max_rows: int, chunk: int, dtype: torch.dtype, window: WindowSpec | None,
                 device: torch.device, spec_slots: int = 0, draft: DraftProposer | None = None) -> None:
        self.config, self.max_rows, self.chunk = config, max_rows, chunk
        self.dtype, self.window, self.device = dtype, window, device
        self.spec_slots = spec_slots  # slots a speculative step may write past a sequence's end (k + 1), or 0
        self.draft = draft  # its slot cache mirrors the running rows
        self.cascade = window is None  # samples share their prompt's KV instead of copying it
        self.kv: SlotCache | None = None  # running rows: what each sample adds to its prompt
        self.pkv: SlotCache | None = None  # prompt store: one row per admitted request
        self.p_owner: list[Request] = []  # p_owner[i].prompt_row == i

    def shares(self, req: Request) -> bool:
        """Its samples read the prompt from the prompt store (cascade); a lone sample copies it into its row,
        which keeps the decode step to plain attention."""
        return self.cascade and req.params.n > 1

    def slots_for(self, req: Request) -> int:
        return (0 if self.shares(req) else len(req.prompt)) + req.max_tokens + self.spec_slots + 2

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in (self.kv, self.pkv) if c is not None)

    def admit(self, req: Request, rows: int) -> None:
        """Room for `req` (with `rows` running rows wanted in all), and a prompt-store row for it."""
        slots = self.slots_for(req)
        cfg, chunk = self.config, self.chunk
        if self.kv is None:
            r0 = min(self.max_rows, max(rows, 8))
            self.kv = SlotCache(cfg, r0, slots, self.dtype, self.window, chunk, self.device)
            self.pkv = SlotCache(cfg, 8, len(req.prompt) + 2, self.dtype, self.window, chunk, self.device)
        if rows > self.kv.rows or slots > self.kv.slots:
            self.kv.grow(min(self.max_rows, max(rows, 2 * self.kv.rows if rows > self.kv.rows else 0)), slots)
        p_rows = len(self.p_owner) + 1
        if p_rows > self.pkv.rows or len(req.prompt) + 2 > self.pkv.slots:
            self.pkv.grow(2 * self.pkv.rows if p_rows > self.pkv.rows else 0, len(req.prompt) + 2)
        if self.draft is not None:  # whole sequences
            self.draft.ensure(self.kv.rows, len(req.prompt) + req.max_tokens + self.spec_slots + 2)
        req.prompt_row = len(self.p_owner)
        self.p_owner.append(req)

    def free_prompt_row(self, req: Request) -> None:
        hole, last = req.prompt_row, self.p_owner[-1]
        if last is not req:
            self.pkv.copy_rows(self.pkv, [last.prompt_row], [hole], last.n_cached)
            self.p_owner[hole] = last
            last.prompt_row = hole
        self.p_owner.pop()
        self.pkv.clear_row(len(self.p_owner))

    def prompt_source(self, req: Request) -> Callable[[int, int], list[Tensor]]:
        """Per layer keys then values [H_kv, hi - lo, D] of a prefilled prompt, for the prefix cache."""
        pr, pkv = req.prompt_row, self.pkv
        return lambda lo, hi: [c[pr, :, lo:hi] for c in pkv.k + pkv.v]

    def fork(self, req: Request, first_row: int) -> int:
        """Hand a finished prefill to running rows first_row.. (n of them) -> tokens kept outside each row."""
        if self.shares(req):
            return len(req.prompt)
        n = req.params.n
        self.pkv.copy_rows(self.kv, [req.prompt_row] * n, list(range(first_row, first_row + n)), len(req.prompt))
        self.free_prompt_row(req)
        return 0

    def compact(self, running: list[Sequence], finished: list[Sequence]) -> None:
        """Drop `finished` from `running` (running[i].row == i): the rows past the new end move into the holes."""
        done = {id(s) for s in finished}
        n_old, n_new = len(running), len(running) - len(finished)
        holes = sorted(s.row for s in finished if s.row < n_new)
        movers = [s for s in running[n_new:] if id(s) not in done]
        if movers:
            self.kv.copy_rows(self.kv, [m.row for m in movers], holes, max(m.n_cached for m in movers))
            for m, hole in zip(movers, holes):
                if self.draft is not None:
                    self.draft.move_row(m.row, hole, m.draft_cached)
                running[hole] = m
                m.row = hole
        del running[n_new:]
        for row in range(n_new, n_old):
            self.kv.clear_row(row)

    def shared_prefix(self, seqs: list[Sequence]) -> SharedPrefix | None:
        """Each running row's group in the prompt store, for cascade attention (None: no row reads one)."""
        if not self.cascade or not any(s.base for s in seqs):
            return None
        groups = len(self.p_owner)
        count = [0] * groups
        group, member = [], []
        for s in seqs:
            g = s.request.prompt_row if s.base else 0  # a row holding its own prompt: any group, all masked
            group.append(g)
            member.append(count[g])
            count[g] += 1
        dev = self.device
        width = max(s.base for s in seqs)
        lens = torch.tensor([s.base for s in seqs], device=dev)
        mask = torch.zeros((len(seqs), width), dtype=self.dtype, device=dev).masked_fill_(
            torch.arange(width, device=dev)[None] >= lens[:, None], float("-inf")
        )
        return SharedPrefix(
            self.pkv, groups, width, max(count), torch.tensor(group, device=dev), torch.tensor(member, device=dev), lens,
            mask[:, None, None],
        )

    def kv_source(self, s: Sequence) -> Callable[[int, int], list[Tensor]]:
        """Per layer keys then values [H_kv, n, D] of a sequence's cached tokens (prompt + row)."""
        pr, row = s.request.prompt_row, s.row

        def source(lo: int, hi: int) -> list[Tensor]:
            base = s.base
            rows = [c[row, :, max(lo - base, 0) : max(hi - base, 0)] for c in self.kv.k + self.kv.v]
            if lo >= base:
                return rows
            prompts = [c[pr, :, lo : min(hi, base)] for c in self.pkv.k + self.pkv.v]
            return [torch.cat((p, r), dim=1) for p, r in zip(prompts, rows)]

        return source
