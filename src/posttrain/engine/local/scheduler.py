"""`LocalEngine`'s scheduler: which requests wait, prefill and run, and what happens when they start and finish.

Covers: the three queues (`waiting`, `prefilling` in admission order, `running` with running[i].row == i);
admission, first come first served, while the batch has rows for all of a request's samples and the
step's prefill budget (`max_prefill_tokens` over chunks of at most `prefill_chunk`) has room, each
admitted prompt starting from the longest run of it the prefix cache holds; a finished prefill forking
into its n samples; retiring finished samples (their KV offered to the prefix cache first, their rows
compacted, their request finished with its last one).
Does not cover: preemption (admission reserves every row a request needs, so nothing is ever evicted
mid-flight), the forwards (engine/local/runner.py), where rows live (engine/local/rows.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from posttrain.engine.detokenize import IncrementalText
from posttrain.engine.local.prefix_cache import PrefixCache
from posttrain.engine.local.rows import RowAllocator
from posttrain.engine.local.sequence import Request, RequestStatus, Sequence


class Scheduler:
    """Admission, the prefill queue and the running batch over one `RowAllocator`."""

    def __init__(self, rows: RowAllocator, prefix: PrefixCache | None, max_batch_rows: int, prefill_chunk: int,
                 max_prefill_tokens: int, cache_completions: bool, decode: Callable[[list[int]], str]) -> None:
        self.rows, self.prefix = rows, prefix
        self.max_batch_rows, self.prefill_chunk, self.max_prefill_tokens = max_batch_rows, prefill_chunk, max_prefill_tokens
        self.cache_completions = cache_completions
        self.decode = decode  # token ids -> text, for samples whose text is watched as it grows
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []  # admission order
        self.running: list[Sequence] = []  # running[i].row == i
        self.reserved = 0  # running rows promised to requests still in prefill

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running)

    def admit(self) -> None:
        """Move waiting requests into prefill while rows and the step's prefill budget allow."""
        while self.waiting:
            req = self.waiting[0]
            n = req.params.n
            if len(self.running) + self.reserved + n > self.max_batch_rows:
                return
            chunk = min(len(req.prompt), self.prefill_chunk)
            widest = max([chunk] + [min(len(r.prompt) - r.n_cached, self.prefill_chunk) for r in self.prefilling])
            if self.prefilling and (len(self.prefilling) + 1) * widest > self.max_prefill_tokens:
                return
            self.waiting.popleft()
            self.rows.admit(req, len(self.running) + self.reserved + n)
            req.status = RequestStatus.PREFILL
            self.prefilling.append(req)
            self.reserved += n
            if self.prefix is not None:  # keep at least one prompt token to compute: its logits start sampling
                slots = self.prefix.match(req.prompt, len(req.prompt) - 1)
                self.prefix.read_into(slots, self.rows.pkv, req.prompt_row)
                req.n_cached = len(slots) * self.prefix.block
            else:
                req.n_cached = 0
            self.rows.pkv.clear_row(req.prompt_row)

    def prefilled(self, reqs: list[Request]) -> list[int]:
        """After a prefill chunk of `reqs`: the indices of those whose whole prompt is now cached (they leave
        the prefill queue)."""
        done = [i for i, r in enumerate(reqs) if r.n_cached == len(r.prompt)]
        if done:
            self.prefilling = [r for r in reqs if r.n_cached < len(r.prompt)]
        return done

    def start(self, req: Request) -> list[Sequence]:
        """Fork a finished prefill into its n running samples (the caller draws their first tokens)."""
        n, p_len = req.params.n, len(req.prompt)
        first = len(self.running)
        if self.prefix is not None:
            self.prefix.insert(req.prompt, self.rows.prompt_source(req))
        base = self.rows.fork(req, first)
        # text as it grows, for streaming and stop strings (a plain request decodes once, when it finishes)
        texts = req.stream or bool(req.params.stop)
        seqs = [
            Sequence(req, j, list(req.prompt), first + j, p_len, base, text=IncrementalText(self.decode) if texts else None)
            for j in range(n)
        ]
        req.samples, req.unfinished, req.status = seqs, n, RequestStatus.RUNNING
        self.running.extend(seqs)
        self.reserved -= n
        return seqs

    def retire(self, finished: list[Sequence]) -> None:
        """Free the rows of finished sequences; completions are cached in the prefix tree first, while their
        rows still hold them."""
        if not finished:
            return
        if self.prefix is not None and self.cache_completions:
            for s in finished:
                self.prefix.insert(s.all[: s.n_cached], self.rows.kv_source(s))
        self.rows.compact(self.running, finished)
        for s in finished:
            req = s.request
            req.unfinished -= 1
            if req.unfinished == 0:
                req.status = RequestStatus.FINISHED
                if self.rows.shares(req):
                    self.rows.free_prompt_row(req)
