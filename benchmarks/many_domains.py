"""Which generator x level pairs are real, distinct domains: the rule behind `examples/many_domains.toml`.

The candidates are what `[[domains]]` can name without a download, single-turn (an agent domain trains alone):
reasoning-gym's generators at levels 0-15 (the expansion already keeps only levels that configure a generator
differently, `tasks/expand.py: distinct_levels`) and at their default configuration, the arithmetic families at
1-18 digits, the code families at 1-6 digits. A candidate is kept when, in this order:
  R2 it builds and gives a held-out and a training task within 5 s (what `benchmarks/scheduler_real.py` asks),
     and the 20 entries R3 compares within 30 s (some generators search for minutes on a few entries);
  R3 its prompts at 20 fixed entries share at most half with every candidate of the same generator kept before it
     (levels in order, the default configuration last): a level whose changed ranges leave most entries as they
     were, or a default equal to one of the levels, is a second name for the same tasks, not a domain;
  R4 one of its two gold answers fits the domain's own completion cap by the built-in model's tokenizer (the
     preflight refuses a domain whose cap holds none: every reward would be 0).
Prints what each rule left out and the counts per source; the last line is one JSON object whose `exclude` and
`defaults` are what the example's `[[domains]]` entries list.

    python benchmarks/many_domains.py [--limit-s 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import signal
import sys
import time
from typing import Any

INDICES = range(0, 1_000_000, 50_000)  # the 20 entries whose prompts R3 compares
RG_LEVELS = list(range(16))
ARITH_LEVELS = list(range(1, 19))
CODE_LEVELS = list(range(1, 7))


class _Slow(Exception):
    pass


def _on_alarm(*_: object) -> None:
    raise _Slow()


def candidates() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(name, generator, spec, options) in the order R3 compares them: each generator's levels, then its default."""
    from posttrain.config import DomainConfig
    from posttrain.tasks.expand import expand_entry
    from posttrain.tasks.reasoning_gym import rg_datasets

    out = []
    leveled = set(rg_datasets(leveled=True))
    for dataset in rg_datasets():
        spec = f"rg:{dataset}"
        if dataset in leveled:
            out += [(d.label, spec, spec, dict(d.options)) for d in expand_entry(DomainConfig(source=spec, levels=RG_LEVELS))]
        out.append((spec, spec, spec, {}))
    for pattern, levels in (("arith:*", ARITH_LEVELS), ("code:*", CODE_LEVELS)):
        out += [(d.label, str(d.source), str(d.source), dict(d.options))
                for d in expand_entry(DomainConfig(source=pattern, levels=levels))]
    return out


def check(spec: str, options: dict[str, Any], limit_s: float, tokenizer: Any) -> tuple[str, list[str]]:
    """(why it is left out by R2 or R4, or ""; its prompts at `INDICES` for R3)."""
    from posttrain.tasks.domains import load_domain
    from posttrain.tasks.reasoning_gym import RGSource

    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        domain = load_domain(spec, **options)
        tasks = list(domain.held_out(1)) + list(domain.source.take(1, "train"))
    except _Slow:
        return f"R2: over {limit_s:g} s", []
    except Exception as exc:  # noqa: BLE001 - any failure to build leaves the candidate out
        return f"R2: {type(exc).__name__}", []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if len(tasks) < 2:
        return "R2: no held-out or no training task (too few distinct questions)", []
    cap = domain.sampling.max_tokens
    golds = [str(t.meta.get("solution") or t.answer) for t in tasks if t.meta.get("solution") or t.answer]
    if golds and min(len(tokenizer.encode(g, add_bos=False)) for g in golds) > cap:
        return f"R4: no gold answer in its cap of {cap} tokens", []
    prompts: list[str] = []
    source = domain.source
    signal.setitimer(signal.ITIMER_REAL, 6 * limit_s)
    try:
        for i in INDICES:  # a reasoning-gym entry by index (levels compared entry by entry), else a seeded draw
            prompts.append(source.task(i).prompt if isinstance(source, RGSource)
                           else source.sample(random.Random(i), "train").prompt)
    except Exception as exc:  # noqa: BLE001 - out of time (raised in the generator, maybe wrapped) or broken
        return f"R2: entry {INDICES[len(prompts)]}: {type(exc).__name__} (6x {limit_s:g} s for 20 entries)", []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return "", prompts


def survey(limit_s: float = 5.0) -> dict[str, Any]:
    from posttrain.models import char_tokenizer
    from posttrain.rewards import reasoning_gym

    tokenizer = char_tokenizer()  # the built-in model's
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    kept: dict[str, dict[str, list[str]]] = {}  # generator -> kept name -> prompts
    left: dict[str, str] = {}
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    try:
        last = None
        for name, generator, spec, options in candidates():
            if generator != last and last is not None and last.startswith("rg:"):
                reasoning_gym.clear_cache()  # one generator's datasets at a time (some hold large state)
                gc.collect()
            last = generator
            why, prompts = check(spec, options, limit_s, tokenizer)
            if not why:
                for other, theirs in kept.get(generator, {}).items():
                    n = min(len(theirs), len(prompts))
                    share = sum(a == b for a, b in zip(theirs, prompts)) / n if n else 0.0
                    if share > 0.5:
                        why = f"R3: {share:.0%} of its prompts are {other}'s"
                        break
            if why:
                left[name] = why
                print(f"left out {name}: {why}", file=sys.stderr, flush=True)
                continue
            kept.setdefault(generator, {})[name] = prompts
            family = name.split(":", 1)[0]
            counts[family] = counts.get(family, 0) + 1
    finally:
        signal.signal(signal.SIGALRM, previous)
    names = [n for per in kept.values() for n in per]
    rules: dict[str, int] = {}
    for why in left.values():
        rules[why[:2]] = rules.get(why[:2], 0) + 1
    return {"kept": len(names), "per_source": counts, "left_out": rules, "seconds": round(time.perf_counter() - t0, 1),
            "rg_defaults_kept": sum(1 for n in names if n.startswith("rg:") and "@" not in n),
            "exclude": sorted(n for n in left if "@" in n and n.startswith("rg:")),
            "defaults": sorted(n for n in names if n.startswith("rg:") and "@" not in n),
            "left_other": sorted(n for n in left if not n.startswith("rg:"))}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-s", type=float, default=5.0, help="R2's time limit for a build and two tasks")
    a = ap.parse_args()
    print(json.dumps(survey(a.limit_s)))
