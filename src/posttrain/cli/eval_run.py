"""`posttrain eval --model RUN` without another suite: a training run evaluated on its own terms.

Covers: the command-line side of `rl/own_eval.py`: each of the run's domains on `--split` (default: reporting,
the held-out half training never selected on), graded by the verifier the run trained with unless `--verifier`
overrides it, sampled as the in-training evaluation samples (greedy, the rollouts' max tokens, the run's engine
settings, the run's prompt format, one engine call per suite unless `--batch` says otherwise; an agent domain's
tasks as greedy episodes, through the same `eval.run.run_eval`); one result
directory per domain under OUT; every summary says the split and the verifier it used.
Does not cover: evaluating a model on a named suite (`cli/eval.py`) or the harness itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from rich.markup import escape

from posttrain.cli.common import err


@dataclass
class OwnResult:
    """One domain's evaluation, for the caller to print: a title, the summary, and what it used."""

    title: str
    summary: Any  # an `EvalSummary`
    extra: dict[str, Any]  # out, model, split, verifier, verifier_source, prompt_format, domain


def eval_own(model: str, cfg: Any, split: Optional[str], verifier: Optional[str], source: Optional[str], samples: int,
             ks: tuple[int, ...], temperature: float, top_p: float, seed: int, max_tokens: Optional[int], repeat: int,
             batch: Optional[int], out: Callable[[str], Path], table: Any, verify_timeout: Optional[float],
             label: Optional[str]) -> list[OwnResult]:
    """Evaluate the run `model` (RUN or RUN@STEP; `cfg` its `RunConfig`) on its own domains; `out(split)`: the
    results directory (one subdirectory per domain when there are several)."""
    from posttrain.eval.harness import EvalSpec
    from posttrain.eval.run import run_eval
    from posttrain.pricing import price_of
    from posttrain.resolve import resolve_model
    from posttrain.rl.own_eval import DEFAULT_SPLIT, own_evaluation

    own = own_evaluation(cfg, split or DEFAULT_SPLIT, verifier, source)
    resolved = resolve_model(model, seed=seed, engine_options=cfg.engine.model_dump())
    if resolved.info.get("note"):  # a run's best/ (or its newest checkpoint) was chosen: say which
        err.print(escape(resolved.info["note"]), highlight=False, soft_wrap=True)
    root = out(own.split)
    results = []
    for suite in own.suites:
        # in-training evaluation samples a suite in one engine call: the same chunking by default, for the same figures
        spec = EvalSpec(model=model, suite=f"{model}#{own.split}:{suite.name}", n=samples, ks=ks, temperature=temperature,
                        top_p=top_p, max_tokens=max_tokens or own.max_tokens, seed=seed, repeat=repeat,
                        batch=batch or len(suite.tasks), verify_timeout_s=verify_timeout, label=label)
        used = {"split": own.split, "verifier": own.verifiers()[suite.name], "verifier_source": own.verifier_source,
                "prompt_format": resolved.info.get("prompt_format"), "domain": suite.name}
        err.print(f"{suite.name}: {len(suite.tasks)} tasks of the run's {own.split} split, graded by "
                  f"{used['verifier']} ({'the run' + chr(39) + 's own' if own.verifier_source == 'run' else '--verifier'})",
                  highlight=False)
        extra = {"model_info": resolved.info, "prices": table, **used}
        where = root / re.sub(r"[^A-Za-z0-9_.-]+", "_", suite.name) if len(own.suites) > 1 else root
        run = run_eval(resolved.engine, suite, spec, where, price_of({**spec.meta(), **extra}), extra_meta=extra,
                       renderer=resolved.renderer)
        err.print(f"results in {where}")
        results.append(OwnResult(f"{suite.name} ({own.split} split, verifier {used['verifier']}): {model}", run.summary,
                                 {"out": str(where), "model": model, **used}))
    return results
