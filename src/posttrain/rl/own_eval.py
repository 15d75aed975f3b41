"""A training run evaluated on its own terms: its domains, its verifiers, its splits, its evaluation settings.

Covers: `own_evaluation(cfg, split, verifier)`: the suites `posttrain eval --model RUN` runs when no other
suite is named (or when `--suite` names one of the run's own sources): each domain of the run, judged by the
verifier training rewarded with (unless `verifier` overrides it), on one split:
- `selection`: the held-out half evaluated during training (it selected best/): `RUN@STEP` on it gives that
  step's in-training figure exactly (same tasks, verifier, greedy sampling, max tokens, one engine call);
- `reporting` (the default): the held-out half training never looked at, the quickstart's reported figure;
- `held_out`: both halves; `train`: `eval.size` problems of the training split (memorisation); `all`: both.
`evaluate_own` runs them: the model resolved with the run's engine settings, each suite through `eval.run.run_eval`
(an agent domain's tasks as greedy episodes) into its own directory, sampled as the run's `[eval]` section says
(with the command line's flags over it: `eval/settings.py`), by default as in-training evaluation samples.
Does not cover: sampling and grading (`eval/`), resolving RUN@STEP (`resolve.py`), printing (the command line).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from posttrain.config import ConfigError, EvalConfig, EvalSplit, RunConfig, parse_literal
from posttrain.rewards import verifier_id
from posttrain.rl.build import build_domains, build_held_out, build_verifier, domain_entries, max_tokens_for
from posttrain.tasks.suites import Suite

SPLITS: tuple[str, ...] = get_args(EvalSplit)
DEFAULT_SPLIT: str = EvalConfig.model_fields["split"].default


@dataclass(frozen=True)
class OwnEvaluation:
    """The suites of a run's own evaluation and how they are sampled (what its in-training evaluation used)."""

    split: str
    suites: list[Suite]
    max_tokens: int  # the rollouts' completion cap, which in-training evaluation samples with
    verifier_source: str  # "run" (the verifier training rewarded with) or "--verifier"

    def verifiers(self) -> dict[str, str]:
        return {s.name: verifier_id(s.verifier) for s in self.suites}


def own_evaluation(cfg: RunConfig, split: str = DEFAULT_SPLIT, verifier: str | None = None,
                   source: str | None = None) -> OwnEvaluation:
    """The run's domains (only the one whose source is `source`, when given) on `split`; `verifier` (a kind, or
    a TOML inline table) replaces each domain's. Bad values are one-line `ConfigError`s."""
    if split not in SPLITS:
        raise ConfigError(f"eval: --split {split!r}: expected one of {', '.join(SPLITS)}")
    configs = domain_entries(cfg)  # one per built domain: globs, lists and levels expanded, as build_domains does
    domains = build_domains(cfg)
    if source is not None:
        picked = [d for dc, d in zip(configs, domains) if dc.source == source]
        if not picked:
            raise ConfigError(f"eval: {source} is not a training source of this run "
                              f"({', '.join(dc.label for dc in configs)})")
        domains = picked
    if verifier is not None:
        override = build_verifier(parse_literal(verifier), cfg.reward)
        domains = [d.with_verifier(override) for d in domains]
    max_tokens = max_tokens_for(cfg, build_domains(cfg))  # over every domain, as the rollouts' cap is
    if split in ("selection", "reporting"):
        selection, reporting = build_held_out(cfg.eval, domains, cfg.seed)
        suites = selection if split == "selection" else reporting
    else:
        suites = [s for s in (_split_suite(cfg, d, split) for d in domains) if s is not None]
    if not suites:
        raise ConfigError(f"eval: the run's {split} split holds no tasks")
    return OwnEvaluation(split, suites, max_tokens, "--verifier" if verifier is not None else "run")


def _split_suite(cfg: RunConfig, domain: Any, split: str) -> Suite | None:
    from posttrain.agent.spec import spec_of

    tasks = []
    if split in ("held_out", "all"):
        tasks += domain.held_out(cfg.eval.size, seed=cfg.seed)
    if split in ("train", "all"):
        tasks += domain.source.take(cfg.eval.size, "train", seed=cfg.seed)
    if not tasks:
        return None
    return Suite(domain.name, tasks, domain.verifier, agent=spec_of(domain),
                 description=f"{len(tasks)} {split} {domain.name} tasks")


@dataclass
class OwnResult:
    """One domain's evaluation, for the caller to print: a title, the summary, and what it used."""

    title: str
    summary: Any  # an `EvalSummary`
    extra: dict[str, Any]  # out, model, split, verifier, verifier_source, prompt_format, domain


def evaluate_own(model: str, cfg: RunConfig, settings: EvalConfig, verifier: str | None, source: str | None,
                 out: Callable[[str], Path], prices: dict[str, Any], verify_timeout: float | None, label: str | None,
                 say: Callable[[str], None] = lambda _line: None) -> list[OwnResult]:
    """Evaluate the run `model` (RUN or RUN@STEP; `cfg` its `RunConfig`) on its own domains as `settings` say (its
    `[eval]` section, flags over it: split, samples, temperature, ...); `out(split)`: the results directory (one
    subdirectory per domain when there are several); `say`: a line of progress for people."""
    from posttrain.eval.run import run_eval
    from posttrain.eval.settings import spec_of
    from posttrain.pricing import price_of
    from posttrain.resolve import resolve_model

    own = own_evaluation(cfg, settings.split, verifier, source)
    resolved = resolve_model(model, seed=settings.seed, engine_options=cfg.engine.model_dump())
    if resolved.info.get("note"):  # a run's best/ (or its newest checkpoint) was chosen: say which
        say(resolved.info["note"])
    root = out(own.split)
    results = []
    for suite in own.suites:
        # in-training evaluation samples a suite in one engine call: the same chunking by default, for the same figures
        spec = spec_of(settings, model, f"{model}#{own.split}:{suite.name}", own.max_tokens, len(suite.tasks),
                       verify_timeout_s=verify_timeout, label=label)
        used = {"split": own.split, "verifier": own.verifiers()[suite.name], "verifier_source": own.verifier_source,
                "prompt_format": resolved.info.get("prompt_format"), "domain": suite.name}
        say(f"{suite.name}: {len(suite.tasks)} tasks of the run's {own.split} split, graded by {used['verifier']} "
            f"({'the run' + chr(39) + 's own' if own.verifier_source == 'run' else '--verifier'})")
        extra = {"model_info": resolved.info, "prices": prices, **used}
        where = root / re.sub(r"[^A-Za-z0-9_.-]+", "_", suite.name) if len(own.suites) > 1 else root
        run = run_eval(resolved.engine, suite, spec, where, price_of({**spec.meta(), **extra}), extra_meta=extra,
                       renderer=resolved.renderer)
        say(f"results in {where}")
        results.append(OwnResult(f"{suite.name} ({own.split} split, verifier {used['verifier']}): {model}", run.summary,
                                 {"out": str(where), "model": model, **used}))
    return results
