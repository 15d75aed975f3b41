"""The one evaluation entry point: `run_eval` runs any suite, single-turn or agent, into one `EvalRun`.

Covers: `run_eval(engine, suite, spec, ...)`. A suite with an `agent` spec (`Suite.agent`) runs as agent episodes
(`episodes.py`: n per task through the training rollouter, greedy unless `spec.temperature`, each repeat with the
same seed); any other suite through the harness (`harness.py`: chunked engine calls, per-chunk seeds). Both give
graded `SampleRecord`s summarised by `summarize`, are stored alike in `out` (meta, tasks, samples, summary; an
agent suite's transcripts in `episodes.jsonl`) and resume alike (finished samples are kept). Code verifiers and
agent sessions run on `sandboxes` (None: the caller's, `current_sandboxes`).
Every evaluation goes through here: `posttrain eval` (`modes.py`), a training run's held-out evaluation
(`training.py`), a run on its own terms (`rl/own_eval.py`), the quickstart and the base model's checks.
Does not cover: resolving a model name (`posttrain.resolve`), what a suite's tasks are (`tasks/`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posttrain.agent.metrics import episode_metrics
from posttrain.eval.episodes import evaluate_agent
from posttrain.eval.harness import EvalSpec, evaluate, open_eval_dir, task_rows
from posttrain.eval.metrics import Price
from posttrain.eval.records import EvalRun, SampleRecord
from posttrain.eval.summary import summarize
from posttrain.models.prompting import PromptRenderer
from posttrain.rewards.base import verifier_id
from posttrain.sandbox.sandboxes import current_sandboxes, use_sandboxes
from posttrain.types import SamplingParams

if TYPE_CHECKING:
    from posttrain.agent.episode import Episode
    from posttrain.engine.base import Engine
    from posttrain.sandbox.sandboxes import Sandboxes

EPISODES = "episodes.jsonl"


def run_eval(engine: Engine, suite: Any, spec: EvalSpec, out: str | Path | None = None, price: Price | None = None,
             on_progress: Callable[[int, int], None] | None = None, extra_meta: dict[str, Any] | None = None,
             renderer: PromptRenderer | None = None, sandboxes: Sandboxes | None = None,
             max_concurrency: int = 64) -> EvalRun:
    """Evaluate `engine` on `suite` as `spec` says; the path follows the suite: episodes for an agent suite, one
    response per sample otherwise. `renderer` prompts a single-turn suite (an agent suite's prompts are its
    `AgentSpec`'s, a run's system prompt already in it); `max_concurrency` bounds an agent suite's open episodes.
    `run.summary` holds the figures (and `out/summary.json`)."""
    if suite.agent is None:
        with use_sandboxes(sandboxes):  # code verifiers execute where the caller's run executes them
            return evaluate(engine, suite, spec, out, price, on_progress, extra_meta, renderer)
    return _run_episodes(engine, suite, spec, out, price, on_progress, extra_meta, sandboxes, max_concurrency)


def _run_episodes(engine: Engine, suite: Any, spec: EvalSpec, out: str | Path | None, price: Price | None,
                  on_progress: Callable[[int, int], None] | None, extra_meta: dict[str, Any] | None,
                  sandboxes: Sandboxes | None, max_concurrency: int) -> EvalRun:
    """`spec.n` episodes of every task not already recorded in `out`, per repeat (the rollouter seeds each task's
    group from `spec.seed` and its id, so a repeat asks the same again)."""
    tasks = list(suite.tasks)
    meta = {**spec.meta(), "mode": "episodes", "suite_name": suite.name, "n_suite_tasks": len(tasks),
            "verifier": verifier_id(suite.verifier) if suite.verifier is not None else None,
            "max_steps": suite.agent.max_steps, "engine": type(engine).__name__, "created": time.time(),
            **(extra_meta or {})}
    store, done = open_eval_dir(out, meta, tasks)
    workspaces = (sandboxes or current_sandboxes()).workspaces
    params = SamplingParams(temperature=spec.temperature, top_p=spec.top_p, max_tokens=spec.max_tokens)
    ran: dict[str, list[Episode]] = {t.id: [] for t in tasks}
    for repeat in range(spec.repeat):
        todo = [t for t in tasks if any((t.id, repeat, j) not in done for j in range(spec.n))]
        if todo:
            part = evaluate_agent(engine, todo, suite.agent, workspaces, n=spec.n, ks=spec.ks, params=params,
                                  seed=spec.seed, max_concurrency=max_concurrency, sandboxes=sandboxes, repeat=repeat)
            new = [r for r in part.records if r.key not in done]
            done.update((r.key, r) for r in new)
            for task, eps in zip(todo, part.episodes or []):
                ran[task.id] += eps
            if store is not None:
                store.append(new)
                _append_episodes(store.path / EPISODES, [ep for eps in part.episodes or [] for ep in eps])
        if on_progress:
            on_progress(repeat + 1, spec.repeat)
    records: list[SampleRecord] = [r for r in done.values() if r.repeat < spec.repeat and r.sample < spec.n]
    summary = summarize(records, spec.ks, price, [t.id for t in tasks])
    if store is not None:
        store.write_summary(summary)
    episodes = [ran[t.id] for t in tasks]
    return EvalRun(meta, records, task_rows(tasks), store.path if store else None, summary, episodes,
                   episode_metrics([ep for eps in episodes for ep in eps]))


def _append_episodes(path: Path, episodes: list[Episode]) -> None:
    with path.open("a", encoding="utf-8") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict()) + "\n")
