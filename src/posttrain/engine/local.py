"""`LocalEngine`: batched generation on the native model, in-process.

Covers: left-padded batched prefill into a preallocated KV cache, group
prefix sharing (a prompt is prefilled once and its cache forked to its n
samples), batch compaction as sequences finish, stop tokens, per-request
seeds, behaviour logprobs, and `load_weights` with a policy version.
Does not cover (yet): continuous batching across requests, a cross-request
prefix cache, chunked prefill, speculative decoding, stop strings.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.engine.sampling import sample_tokens
from posttrain.models.llama import CausalLM, KVCache
from posttrain.models.tokenizer import Tokenizer
from posttrain.types import Completion, FinishReason, SamplingParams


class LocalEngine:
    """Generate with a `CausalLM` in this process.

    >>> engine = LocalEngine(model, tokenizer)
    >>> groups = engine.generate(["12+30="], SamplingParams(n=4, max_tokens=6))
    >>> [c.text for c in groups[0]]  # four samples of one prompt
    """

    def __init__(self, model: CausalLM, tokenizer: Tokenizer, seed: int = 0, max_batch_rows: int = 2048) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.generator = torch.Generator().manual_seed(seed)
        self.max_batch_rows = max_batch_rows
        self.policy_version = 0
        self.stats = {"prefill_tokens": 0, "prompt_tokens_submitted": 0, "generated_tokens": 0}

    def load_weights(self, state: dict[str, Tensor], version: int) -> None:
        self.model.load_state_dict(state, strict=False)
        self.policy_version = version

    def set_version(self, version: int) -> None:
        """The engine shares the learner's module in-process: only the version tag moves."""
        self.policy_version = version

    def encode(self, prompts: list[str]) -> list[list[int]]:
        return [self.tokenizer.encode(p) for p in prompts]

    @torch.inference_mode()
    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (grouped in prompt order)."""
        if not prompts:
            return []
        ids = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        if any(len(p) == 0 for p in ids):
            raise ValueError("empty prompt: every prompt needs at least one token")
        generator = torch.Generator().manual_seed(params.seed) if params.seed is not None else self.generator
        per_chunk = max(1, self.max_batch_rows // params.n)
        out: list[list[Completion]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(ids), per_chunk):
                out.extend(self._generate_chunk(ids[start : start + per_chunk], params, generator))
        finally:
            self.model.train(was_training)
        return out

    def _generate_chunk(self, ids: list[list[int]], params: SamplingParams, generator) -> list[list[Completion]]:
        n, pad = params.n, self.tokenizer.pad_id
        b, p_len = len(ids), max(len(p) for p in ids)
        prompt = torch.full((b, p_len), pad, dtype=torch.long)
        valid = torch.zeros((b, p_len), dtype=torch.bool)
        for i, p in enumerate(ids):  # left padding: every prompt ends at the same slot
            prompt[i, p_len - len(p) :] = torch.tensor(p)
            valid[i, p_len - len(p) :] = True
        cache = KVCache.allocate(self.model.config, b, p_len + params.max_tokens)
        logits = self.model(prompt, cache=cache, attention_mask=valid)[:, -1]  # [B, V]
        self.stats["prefill_tokens"] += int(valid.sum())
        self.stats["prompt_tokens_submitted"] += int(valid.sum()) * n
        if n > 1:
            cache = cache.repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
        rows = b * n
        stop_ids = set(params.stop_token_ids)
        if self.tokenizer.eos_id is not None:
            stop_ids.add(self.tokenizer.eos_id)
        stop = torch.tensor(sorted(stop_ids), dtype=torch.long)
        tokens_out: list[list[int]] = [[] for _ in range(rows)]
        logps_out: list[list[float]] = [[] for _ in range(rows)]
        finish = [FinishReason.LENGTH] * rows
        active = torch.arange(rows)  # original row index of each cache row
        positions = valid.sum(1).repeat_interleave(n)  # [rows] next position id per row
        for step in range(params.max_tokens):
            tok, logp = sample_tokens(logits, params.temperature, params.top_k, params.top_p, generator)
            done = torch.isin(tok, stop)
            for r, t, lp, d in zip(active.tolist(), tok.tolist(), logp.tolist(), done.tolist()):
                tokens_out[r].append(t)
                logps_out[r].append(lp)
                if d:
                    finish[r] = FinishReason.STOP
            self.stats["generated_tokens"] += len(active)
            keep = ~done
            if step == params.max_tokens - 1 or not bool(keep.any()):
                break
            if not bool(keep.all()):
                idx = keep.nonzero().squeeze(-1)
                active, tok, positions = active[idx], tok[idx], positions[idx]
                cache = cache.select(idx)
            logits = self.model(tok[:, None], position_ids=positions[:, None], cache=cache)[:, -1]
            positions = positions + 1
        version = self.policy_version
        completions = [
            Completion(
                token_ids=tokens_out[r],
                text=self.tokenizer.decode(tokens_out[r]),
                logprobs=logps_out[r],
                finish_reason=finish[r],
                policy_version=version,
            )
            for r in range(rows)
        ]
        return [completions[i * n : (i + 1) * n] for i in range(b)]
