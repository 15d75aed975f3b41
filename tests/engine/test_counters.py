"""`LocalEngine.metrics()` from typed counters: the public names other packages read, and the ratios."""

from types import SimpleNamespace

from posttrain.engine.local.counters import EngineCounters, derived_metrics

PUBLIC = {"prefill_tokens", "prompt_tokens_submitted", "generated_tokens", "steps", "decode_forwards", "decode_row_steps",
          "decode_tokens", "spec_proposed", "spec_accepted", "prefill_fraction", "tokens_per_forward"}


def test_metrics_keep_their_public_names_and_derive_the_ratios():
    c = EngineCounters(prefill_tokens=30, prompt_tokens_submitted=120, decode_tokens=90, decode_row_steps=60,
                       spec_proposed=40, spec_accepted=10)
    plain = derived_metrics(c, None, speculative=False)
    assert set(plain) == PUBLIC
    assert plain["prefill_fraction"] == 0.25 and plain["tokens_per_forward"] == 1.5
    prefix = SimpleNamespace(lookup_tokens=100, hit_tokens=75, hit_rate=0.75)
    full = derived_metrics(c, prefix, speculative=True)
    assert set(full) - PUBLIC == {"prefix_cache_lookup_tokens", "prefix_cache_hit_tokens", "prefix_hit_rate",
                                  "spec_acceptance_rate"}
    assert full["prefix_hit_rate"] == 0.75 and full["spec_acceptance_rate"] == 0.25


def test_an_empty_engine_divides_by_nothing():
    m = derived_metrics(EngineCounters(), None, speculative=True)
    assert m["prefill_fraction"] == 0.0 and m["spec_acceptance_rate"] == 0.0 and m["tokens_per_forward"] == 0.0
