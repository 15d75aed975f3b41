"""`LocalEngine`'s sampler: raw logits of a batch of rows -> one token and its logprob per row.

Covers: each request's processing (temperature, top-k, top-p, min-p: engine/sampling.py) and generator
(a seeded request's own; the engine's otherwise), rows grouped by (params, generator) so a batch of one
request's samples is one call; the logprob is of the processed distribution (the behaviour policy's).
Does not cover: speculative acceptance (engine/local/speculator.py), what a token does to its sequence
(engine/local/emit.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.engine.local.sequence import Sequence
from posttrain.engine.local.spec_decode import group_rows
from posttrain.engine.sampling import choose, process_for
from posttrain.types import SamplingParams


class Sampler:
    """Draws with each request's params, from its generator or the engine's own (`generator`)."""

    def __init__(self, generator: torch.Generator, device: torch.device) -> None:
        self.generator, self.device = generator, device

    def sample(self, logits: Tensor, seqs: list[Sequence]) -> tuple[Tensor, Tensor]:
        """[b, V] raw logits -> (tokens [b], logprobs [b]) with each request's params and generator."""
        groups = group_rows(seqs, self.device)
        if len(groups) == 1:
            (params, gen), _ = next(iter(groups.items()))
            return self.sample_one(logits, params, gen)
        toks = torch.empty(logits.shape[0], dtype=torch.long, device=self.device)
        lps = torch.empty(logits.shape[0], dtype=torch.float32, device=self.device)
        for (params, gen), idx in groups.items():
            toks[idx], lps[idx] = self.sample_one(logits[idx], params, gen)
        return toks, lps

    def sample_one(self, logits: Tensor, params: SamplingParams, gen: torch.Generator | None) -> tuple[Tensor, Tensor]:
        processed = process_for(logits, params)
        logp = torch.log_softmax(processed, -1)
        tok = choose(processed, params.temperature == 0, gen or self.generator)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
