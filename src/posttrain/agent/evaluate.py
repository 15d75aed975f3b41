"""Evaluating an agent on a suite: episodes through the same `AgentRollouter` training uses, graded records, pass@k.

Covers: `evaluate_agent(model, suite, ...)`, n episodes per task of a suite whose `agent` spec says how
they run (greedy by default; with a temperature, n > 1 gives pass@k over episodes), every episode made
a `SampleRecord` (`record_of`: the submitted answer or the last reply as the response, its status,
steps and tokens in `info`, wall time as latency; an env_error episode is an ERROR record, never a
0) and summarised by the harness's own `summarize`, so an agent suite reports pass@1, pass@k, cost
and latency like any other. `evaluate_agent_in_training` is the trainer's held-out evaluation of an
agent suite (one greedy episode per task, stored by `eval.training.record_evaluation`).
Does not cover: resolving a model name (`posttrain.resolve`), storing records (the callers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from posttrain.agent.episode import Episode, EpisodeStatus
from posttrain.agent.metrics import episode_metrics
from posttrain.agent.rollouter import AgentRollouter
from posttrain.agent.spec import AgentSpec
from posttrain.aio import run_sync
from posttrain.eval.records import SampleRecord
from posttrain.eval.results import EvalSummary
from posttrain.eval.summary import summarize
from posttrain.types import SamplingParams, Task, VerdictStatus

if TYPE_CHECKING:
    from posttrain.sandbox.sandboxes import Sandboxes
    from posttrain.sandbox.workspace import Workspaces


@dataclass
class AgentEval:
    episodes: list[list[Episode]]  # per task, in suite order
    records: list[SampleRecord]
    summary: EvalSummary
    metrics: dict[str, float]  # `episode_metrics` of every episode


def record_of(ep: Episode, sample: int = 0) -> SampleRecord:
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
        sample=sample, tokens_in=ep.tokens_in, tokens_out=ep.tokens_out, latency_s=ep.times.total_s,
        verify_s=ep.times.verification_s, finish=ep.status.value)


async def aevaluate_agent(model: Any, tasks: Sequence[Task], spec: AgentSpec, sandbox: Workspaces, *, n: int = 1,
                          ks: Sequence[int] = (1,), params: SamplingParams | None = None, seed: int = 0,
                          max_concurrency: int = 64, sandboxes: Sandboxes | None = None) -> AgentEval:
    """n episodes of each task in workspaces opened on `sandbox` (`sandboxes`: where their verifiers execute code,
    the run's `[sandbox]`; None: the caller's), `params` greedy with the spec's reply room by default, scored by the
    verifier alone: a training domain's process score (`AgentSpec.process_weight`) is shaping, not a result."""
    params = params or SamplingParams(temperature=0.0, max_tokens=spec.max_tokens)
    if spec.process_weight:
        spec = replace(spec, process_weight=0.0)
    rollouter = AgentRollouter(model, sandbox, spec, params, seed=seed, max_concurrency=max_concurrency,
                               sandboxes=sandboxes)
    episodes = [g.episodes for g in await rollouter.run(list(tasks), n)]
    records = [record_of(ep, j) for eps in episodes for j, ep in enumerate(eps)]
    summary = summarize(records, ks, task_order=[t.id for t in tasks])
    return AgentEval(episodes, records, summary, episode_metrics([ep for eps in episodes for ep in eps]))


def evaluate_agent(model: Any, tasks: Sequence[Task], spec: AgentSpec, sandbox: Workspaces, **kwargs: Any) -> AgentEval:
    """`aevaluate_agent` from synchronous code."""
    return run_sync(aevaluate_agent(model, tasks, spec, sandbox, **kwargs))


def evaluate_agent_in_training(engine: Any, suite: Any, name: str, store: Any, step: int,
                               max_tokens: int, sandboxes: Sandboxes) -> dict[str, float]:
    """`eval.training.evaluate_in_training` for an agent suite: one greedy episode per task on the run's
    `sandboxes` (the ones its training episodes use), the turn metrics stored beside pass@1 (`agent/...`)."""
    from posttrain.eval.training import record_evaluation

    result = evaluate_agent(engine, suite.tasks, suite.agent, sandboxes.workspaces, sandboxes=sandboxes,
                            params=SamplingParams(temperature=0.0, max_tokens=max_tokens))
    extra = {f"agent/{k}": v for k, v in result.metrics.items()}
    return record_evaluation(store, name, step, result.records, result.summary, extra)
