"""`LocalEngine`'s counters, typed, and the ratios `LocalEngine.metrics()` derives from them.

Covers: `EngineCounters` (every field a count since the engine was built; the parts of the engine each
add to their own) and `derived_metrics` (prefill share, prefix hit rate, speculative acceptance, tokens
per forward). The metric names are public: benchmarks, tests and the agent package read them by name.
Does not cover: remote traffic (an engine's `usage`), the worker's batching stats (engine/local/worker.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from posttrain.engine.local.prefix_cache import PrefixCache


@dataclass(slots=True)
class EngineCounters:
    prefill_tokens: int = 0  # prompt tokens run through the model
    prompt_tokens_submitted: int = 0  # prompt tokens x n, what a no-sharing engine would prefill
    generated_tokens: int = 0
    steps: int = 0
    decode_forwards: int = 0  # target forwards over the running rows
    decode_row_steps: int = 0  # sum over those forwards of the rows they carried
    decode_tokens: int = 0  # tokens those forwards emitted (> row steps when speculation is accepted)
    spec_proposed: int = 0
    spec_accepted: int = 0


def derived_metrics(c: EngineCounters, prefix: PrefixCache | None, speculative: bool) -> dict[str, float]:
    """The counters plus derived ratios, under their public names."""
    s: dict[str, float] = asdict(c)
    s["prefill_fraction"] = c.prefill_tokens / max(c.prompt_tokens_submitted, 1)
    if prefix is not None:
        s["prefix_cache_lookup_tokens"] = prefix.lookup_tokens
        s["prefix_cache_hit_tokens"] = prefix.hit_tokens
        s["prefix_hit_rate"] = prefix.hit_rate
    if speculative:
        s["spec_acceptance_rate"] = c.spec_accepted / max(c.spec_proposed, 1)
    s["tokens_per_forward"] = c.decode_tokens / max(c.decode_row_steps, 1)
    return s
