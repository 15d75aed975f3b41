"""An agent suite's leg of `run_eval`: episodes through the `AgentRollouter` training uses, as graded records.

Covers: `aevaluate_agent` / `evaluate_agent` (n episodes per task of a suite whose `agent` spec says how they
run: greedy by default; with a temperature, n > 1 gives pass@k over episodes), every episode made a
`SampleRecord` by `record_of` (the submitted answer or the last reply as the response, its status, steps and
tokens in `info`, wall time as latency; an env_error episode is an ERROR record, never a 0), summarised by the
harness's own `summarize` into an `EvalRun` that also carries the episodes and their `episode_metrics`; and
`check_env_errors`, the rule a figure built on episodes keeps: over a share of environment errors, the sandboxes
failed, not the model, and there is no figure to report.
Does not cover: choosing this leg (`eval/run.py`: callers go through `run_eval`), storing records (`run_eval`),
resolving a model name (`posttrain.resolve`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from posttrain.agent.episode import Episode, EpisodeStatus
from posttrain.agent.metrics import episode_metrics
from posttrain.agent.rollouter import AgentRollouter
from posttrain.agent.spec import AgentSpec
from posttrain.aio import run_sync
from posttrain.eval.records import EvalRun, SampleRecord
from posttrain.eval.summary import summarize
from posttrain.types import SamplingParams, Task, VerdictStatus

if TYPE_CHECKING:
    from posttrain.sandbox.sandboxes import Sandboxes
    from posttrain.sandbox.workspace import Workspaces


def record_of(ep: Episode, sample: int = 0, repeat: int = 0) -> SampleRecord:
    """One episode as an evaluation record."""
    v = ep.verdict
    if ep.status is EpisodeStatus.ENV_ERROR or v is None:
        status = VerdictStatus.ERROR.value
    else:
        status = v.status.value
    last = ep.turns[-1].completion.text if ep.turns else ""
    details = f"{ep.status.value} after {ep.steps} steps" + (f": {ep.error}" if ep.error else "")
    if v is not None and v.details:
        details += "\n" + v.details
    return SampleRecord(
        task_id=ep.task_id, response=ep.submitted if ep.submitted is not None else last,
        score=ep.reward or 0.0, passed=ep.passed, status=status, verifier=v.verifier if v is not None else "",
        details=details[:4000], info={"episode_status": ep.status.value, "steps": ep.steps,
                                      "format_errors": ep.format_errors, **(v.info if v is not None else {})},
        sample=sample, repeat=repeat, tokens_in=ep.tokens_in, tokens_out=ep.tokens_out, latency_s=ep.times.total_s,
        verify_s=ep.times.verification_s, finish=ep.status.value)


async def aevaluate_agent(model: Any, tasks: Sequence[Task], spec: AgentSpec, sandbox: Workspaces, *, n: int = 1,
                          ks: Sequence[int] = (1,), params: SamplingParams | None = None, seed: int = 0,
                          max_concurrency: int = 64, sandboxes: Sandboxes | None = None, repeat: int = 0) -> EvalRun:
    """n episodes of each task in workspaces opened on `sandbox` (`sandboxes`: where their verifiers execute code,
    the run's `[sandbox]`; None: the caller's), `params` greedy with the spec's reply room by default, scored by the
    verifier alone: a training domain's process score (`AgentSpec.process_weight`) is shaping, not a result.
    `repeat`: the records' repeat index. The run's `meta` is empty: `run_eval` fills it."""
    params = params or SamplingParams(temperature=0.0, max_tokens=spec.max_tokens)
    if spec.process_weight:
        spec = replace(spec, process_weight=0.0)
    rollouter = AgentRollouter(model, sandbox, spec, params, seed=seed, max_concurrency=max_concurrency,
                               sandboxes=sandboxes)
    episodes = [g.episodes for g in await rollouter.run(list(tasks), n)]
    records = [record_of(ep, j, repeat) for eps in episodes for j, ep in enumerate(eps)]
    summary = summarize(records, ks, task_order=[t.id for t in tasks])
    return EvalRun({}, records, summary=summary, episodes=episodes,
                   episode_metrics=episode_metrics([ep for eps in episodes for ep in eps]))


class EnvironmentBroken(RuntimeError):
    """Too many episodes ended in an environment error for their success rate to be about the model."""


def check_env_errors(episodes: Iterable[Episode], limit: float = 0.1, what: str = "episodes") -> int:
    """The number of `episodes` that ended in an environment error; more than `limit` of them raises
    `EnvironmentBroken` (a closed or failing sandbox pool scores every episode 0: a benchmark that reported such
    a rate would report the pool, as two did before this check)."""
    eps = list(episodes)
    broken = sum(ep.status is EpisodeStatus.ENV_ERROR for ep in eps)
    if broken > limit * max(1, len(eps)):
        raise EnvironmentBroken(f"{broken} of {len(eps)} {what} ended in an environment error (limit {limit:.0%})")
    return broken


def evaluate_agent(model: Any, tasks: Sequence[Task], spec: AgentSpec, sandbox: Workspaces, **kwargs: Any) -> EvalRun:
    """`aevaluate_agent` from synchronous code."""
    return run_sync(aevaluate_agent(model, tasks, spec, sandbox, **kwargs))
