"""A training run evaluated on its own terms: its domains, its verifiers, its splits, its evaluation settings.

Covers: `own_evaluation(cfg, split, verifier)`: the suites `posttrain eval --model RUN` runs when no other
suite is named (or when `--suite` names one of the run's own sources): each domain of the run, judged by the
verifier training rewarded with (unless `verifier` overrides it), on one split:
- `selection`: the held-out half evaluated during training (it selected best/): `RUN@STEP` on it gives that
  step's in-training figure exactly (same tasks, verifier, greedy sampling, max tokens, one engine call);
- `reporting` (the default): the held-out half training never looked at, the quickstart's reported figure;
- `held_out`: both halves; `train`: `train.eval_size` problems of the training split (memorisation); `all`: both.
Does not cover: sampling and grading (`eval/harness.py`), resolving RUN@STEP (`resolve.py`), the command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posttrain.config import ConfigError, RunConfig, parse_literal
from posttrain.rewards import verifier_id
from posttrain.rl.build import build_domains, build_held_out, build_verifier, domain_entries, max_tokens_for
from posttrain.tasks.suites import Suite

SPLITS = ("selection", "reporting", "held_out", "train", "all")
DEFAULT_SPLIT = "reporting"


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
        selection, reporting = build_held_out(cfg.train, domains, cfg.seed)
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
        tasks += domain.held_out(cfg.train.eval_size, seed=cfg.seed)
    if split in ("train", "all"):
        tasks += domain.source.take(cfg.train.eval_size, "train", seed=cfg.seed)
    if not tasks:
        return None
    return Suite(domain.name, tasks, domain.verifier, agent=spec_of(domain),
                 description=f"{len(tasks)} {split} {domain.name} tasks")
