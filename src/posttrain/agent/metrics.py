"""Per-turn metrics of a batch of agent episodes: what training logs next to reward, and evaluation reports.

Covers: `episode_metrics(episodes)`, a flat dict of floats (the run store's step metrics,
TensorBoard, the live progress take it as it is): turns and sampled tokens per episode and per turn,
context tokens per turn, the format-error rate (malformed replies per acting turn) and the same by the turn's place in
its episode (`format_error_rate/turn_<k>`, turns 1, 2, 3-4, 5-8, ...: a format that breaks only late in episodes, as
a small model's does past the positions it practised, shows there), the share of
episodes by status (`status/solved`, `status/max_steps`, ...; every status is present, 0 when
absent) and the tool-call mix (`tool/<name>`: share of all calls; calls naming no tool the episode has are one
`tool/(unknown)`, so a model's garbled names never become metric names). Pure: no I/O.
Does not cover: producing episodes, or reward (the verdicts are the trainer's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from posttrain.agent.episode import Episode, EpisodeStatus

UNKNOWN = "(unknown)"  # the `tool/` key of calls to a tool the episode does not have


def turn_bucket(index: int) -> str:
    """The name of the place of an episode's acting turn `index` (0-based) in `format_error_rate/turn_<bucket>`:
    turns 1, 2, then powers of two (3-4, 5-8, 9-16, ...), so a 200-turn episode adds 9 keys, not 200."""
    k = index + 1
    if k <= 2:
        return str(k)
    hi = 1 << (k - 1).bit_length()
    return f"{hi // 2 + 1}-{hi}"


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Turn-level figures of `episodes` (empty dict for none)."""
    if not episodes:
        return {}
    n = len(episodes)
    acting = [t for ep in episodes for t in ep.turns if t.kind == "act"]
    turns = max(len(acting), 1)
    sampled = sum(len(t.completion.token_ids) for ep in episodes for t in ep.turns)
    out = {
        "turns_per_episode": len(acting) / n,
        "tokens_per_turn": sum(len(t.completion.token_ids) for t in acting) / turns,
        "sampled_tokens_per_episode": sampled / n,
        "context_tokens_per_turn": sum(t.context_tokens for t in acting) / turns,
        "format_error_rate": sum(1 for t in acting if t.format_error) / turns,
        "segments_per_episode": sum(1 + sum(1 for t in ep.turns[1:] if t.rewrote) for ep in episodes) / n,
        "episode_s": sum(ep.times.total_s for ep in episodes) / n,
    }
    at: Counter[str] = Counter()
    bad: Counter[str] = Counter()
    for ep in episodes:
        for i, t in enumerate(t for t in ep.turns if t.kind == "act"):
            bucket = turn_bucket(i)
            at[bucket] += 1
            bad[bucket] += bool(t.format_error)
    for bucket, count in at.items():
        out[f"format_error_rate/turn_{bucket}"] = bad[bucket] / count
    status = Counter(ep.status for ep in episodes)
    for s in EpisodeStatus:
        out[f"status/{s.value}"] = status.get(s, 0) / n
    calls: Counter[str] = Counter()
    for t in acting:
        unknown = {id(r.call) for r in t.results if r.unknown_tool}
        calls.update(UNKNOWN if id(c) in unknown else c.name for c in t.calls)
    total = sum(calls.values())
    for name, count in sorted(calls.items()):
        out[f"tool/{name}"] = count / total
    return out
