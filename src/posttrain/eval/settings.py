"""`posttrain eval`'s sampling settings: a run's `[eval]` section with the command line's flags over it.

Covers: `with_flags(section, **flags)` (the section, `EvalConfig()` for a model that is not a training run, each
flag that was given replacing its field) and `spec_of(settings, model, suite, max_tokens, batch, **explicit)` (the
`EvalSpec` they describe; `max_tokens` and `batch` are the caller's defaults for the fields the settings leave
unset: the rollouts' cap and one engine call per suite on a run's own domains, the suite's own cap and 32 tasks per
call on any other suite).
Does not cover: finding a run's section (`posttrain.resolve.run_config`, called by the command line), checking
the combined values (`EvalSpec` does, as for any caller), in-training evaluation (always greedy, one sample per
task: `training.py`, whose when and where the same section sets).
"""

from __future__ import annotations

from typing import Any

from posttrain.config import EvalConfig
from posttrain.eval.harness import EvalSpec


def with_flags(section: EvalConfig | None, **flags: Any) -> EvalConfig:
    """`section` (None: the defaults) with every flag that is not None in its place; `ks` as a sorted list."""
    given = {k: v for k, v in flags.items() if v is not None}
    if "ks" in given:
        given["ks"] = sorted(set(given["ks"]))
    unknown = set(given) - set(EvalConfig.model_fields)
    assert not unknown, f"not [eval] fields: {unknown}"  # a caller's typo, not a user's
    return (section or EvalConfig()).model_copy(update=given)


def spec_of(settings: EvalConfig, model: str, suite: str, max_tokens: int, batch: int, **explicit: Any) -> EvalSpec:
    """The `EvalSpec` of `settings` for `model` on `suite`; `max_tokens` and `batch` apply where the settings leave
    theirs unset; `explicit`: the spec's other fields (suite options, verification timeout, label)."""
    return EvalSpec(model=model, suite=suite, n=settings.samples, ks=tuple(settings.ks), temperature=settings.temperature,
                    top_p=settings.top_p, max_tokens=settings.max_tokens or max_tokens, seed=settings.seed,
                    repeat=settings.repeat, batch=settings.batch or batch, **explicit)
