"""`posttrain eval`'s modes as functions: sample a model on a suite, grade a responses file, re-grade an eval.

Covers: `suite_of` (a domain's evaluation view as a `Suite`, its agent spec carried so `run_eval` runs its tasks as
episodes, its verifier's sandbox started early), `default_max_tokens` (the domain's own: what training samples
with, an agent suite's reply room), `sample` (`run_eval` on an engine the caller resolved, with its prices and
where it came from in the stored meta, a run's system prompt opening an agent's prefix as in training),
`grade_responses` (a JSONL of responses graded by the suite's verifier, no model) and `rescore_dir` (an eval
directory's responses re-graded in place, priced as it was).
Does not cover: resolving a model name or a `--verifier` override (the wiring, `cli/eval.py`, which also
prints), a training run on its own terms (`rl/own_eval.py`), the harness itself (`run.py`, `harness.py`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posttrain.eval.harness import EvalSpec, rescore, task_rows
from posttrain.eval.records import EvalDir, EvalRun
from posttrain.eval.run import run_eval
from posttrain.eval.summary import summarize
from posttrain.pricing import price_for, price_of, prices_from_table
from posttrain.rewards.base import Prewarmable, verifier_id
from posttrain.tasks.suites import Suite


def suite_of(domain: Any) -> Suite:
    """`domain`'s evaluation view, with the `AgentSpec` its tasks run with (None: single-turn), its verifier's
    sandbox starting while the caller loads the rest."""
    from posttrain.agent.spec import spec_of

    suite = dataclasses.replace(domain.suite(), agent=spec_of(domain))
    if isinstance(suite.verifier, Prewarmable):
        suite.verifier.prewarm()
    return suite


def default_max_tokens(domain: Any, suite: Suite) -> int:
    """The completion cap when none is given: an agent suite's room for one reply, else the one training samples
    with (an arithmetic answer needs 8 tokens, not 256)."""
    return suite.agent.max_tokens if suite.agent is not None else domain.sampling.max_tokens


def sample(engine: Any, suite: Suite, spec: EvalSpec, out: Path, model_info: dict[str, Any],
           prices: dict[str, dict[str, float]], renderer: Any = None,
           on_progress: Callable[[int, int], None] | None = None) -> EvalRun:
    """`posttrain eval --model M --suite S`: `run_eval` into `out` (resumed when it holds the same settings), priced
    by the `prices` table for the model (`model_info`: what the resolver said of it, kept in the meta)."""
    extra = {"model_info": model_info, "prices": prices}
    if suite.agent is not None and renderer is not None:  # a run's system prompt opens its agent prefix, as in training
        from posttrain.agent.spec import with_system_prompt

        suite = dataclasses.replace(suite, agent=with_system_prompt(suite.agent, renderer.system_prompt))
    return run_eval(engine, suite, spec, out, price_of({**spec.meta(), **extra}), on_progress, extra, renderer)


def grade_responses(suite: Suite, responses: Path, ks: tuple[int, ...], suite_spec: str, options: dict[str, Any],
                    prices: dict[str, dict[str, float]], out: Path | None = None, label: str | None = None,
                    timeout: float | None = None) -> EvalRun:
    """`posttrain eval --suite S --responses FILE`: every response in FILE graded by the suite's verifier, summarised
    (priced as `label` in `prices`), and stored in `out` when given."""
    from posttrain.eval.responses import read_responses, score_responses

    records = score_responses(suite, read_responses(responses), timeout)
    summary = summarize(records, ks, price_for(label or "", prices_from_table(prices)), [t.id for t in suite.tasks])
    meta = {"model": label or str(responses), "label": label, "suite": suite_spec, "suite_options": options,
            "suite_name": suite.name, "responses": str(responses), "verifier": verifier_id(suite.verifier),
            "ks": list(ks), "prices": prices, "created": time.time()}
    if out is not None:
        store = EvalDir(out)
        store.start(meta, task_rows(suite.tasks))
        store.rewrite(records)
        store.write_summary(summary)
    return EvalRun(meta, records, task_rows(suite.tasks), out, summary)


def rescore_dir(path: Path, suite: Suite | None = None, timeout: float | None = None) -> tuple[EvalRun, int]:
    """`posttrain eval --rescore DIR`: its responses re-graded in place by `suite`'s verifier (None: its own suite's
    current one), priced as the eval was; returns the run and how many verdicts changed."""
    return rescore(path, suite, price_of(EvalDir(path).meta()), timeout)
