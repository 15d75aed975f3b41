"""The run's record: its store, TensorBoard and the trackers, and alerts; and a typed null store for other ranks.

Covers: `RunLog` (what the trainer writes after each step and evaluation: the step's metrics, groups and samples,
an agent domain's episodes and their per-turn figures, `train/...` and `eval/...` scalars, alerts warned and
stored), `step_metrics` (the step's figures from its groups, a pure function), `open_run_log` (rank 0: the run's
`RunStore`, and its trackers from `open_writer`; any other torchrun rank: `NullRunStore`, every write dropped
and every read empty, and no trackers: rank 0 writes the run's one record), `describe_run` (a new run's
description), `record_infrastructure` (ranks', producers' and sandbox workers' figures and failures).
Does not cover: what is evaluated (`rl/held_out.py`), checkpoints (`rl/resume.py`), the scheduler's per-domain
tables (`rl/scheduling.py`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from posttrain.config import RunConfig
from posttrain.rewards import verifier_latency_metrics
from posttrain.rl.token_record import TokenPieces, step_tokens
from posttrain.rl.train_batch import TokenValues, TrainBatch
from posttrain.sandbox.sandboxes import Sandboxes
from posttrain.store.run_store import DomainRow, EpisodeRow, FailureRow, FailureTask, RunStore, SampleRow
from posttrain.store.tokens import StepTokens
from posttrain.types import Group

if TYPE_CHECKING:
    from posttrain.rl.async_loop import AsyncLoop
    from posttrain.rl.build import Components
    from posttrain.tracking.trackers import Trackers


class NullRunStore(RunStore):
    """The run store of a torchrun rank other than 0: rank 0 writes the run's one store; every write here is
    dropped and every read is empty. Only what the trainer calls on such a rank is here (anything else fails)."""

    def __init__(self) -> None:  # no database: nothing is opened
        pass

    def close(self) -> None:
        pass

    def set_info(self, **values: Any) -> None:
        pass

    def add_alert(self, alert: dict[str, Any]) -> None:
        pass

    def alerts(self) -> list[dict[str, Any]]:
        return []

    def info(self) -> dict[str, Any]:
        return {}

    def log_step(self, step: int, metrics: dict[str, float], groups: Iterable[tuple] = (),
                 samples: Iterable[SampleRow] = (), tokens: StepTokens | None = None) -> None:
        pass

    def log_episodes(self, step: int, rows: Iterable[EpisodeRow]) -> None:
        pass

    def log_domains(self, step: int, rows: Iterable[DomainRow]) -> None:
        pass

    def log_failures(self, rows: Iterable[tuple[int, FailureRow]], tasks: Iterable[FailureTask] = ()) -> None:
        pass

    def log_checkpoint(self, step: int, path: str) -> None:
        pass

    def forget_checkpoint(self, step: int) -> None:
        pass

    def truncate_after(self, step: int) -> None:
        pass

    def steps(self) -> list[tuple[int, dict[str, float]]]:
        return []

    def evals(self, name: str | None = None) -> list[tuple[int, str, dict[str, float]]]:
        return []

    def domain_metrics(self, step: int | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        return []


def step_metrics(sampled: list[Group], kept: list[Group], rounds: int, silent: int, times: tuple[float, float, float]
                 ) -> dict[str, float]:
    """One step's figures from the groups it sampled and kept; `times`: (start, rollouts done, update done)."""
    t0, t1, t2 = times
    trajs = [t for g in sampled for t in g.trajectories]
    ok = [t for t in trajs if t.trainable]
    return dict(
        reward=sum(t.verdict.score for t in ok if t.verdict) / max(len(ok), 1),
        pass_rate=sum(t.verdict.passed for t in ok if t.verdict) / max(len(ok), 1),
        groups_sampled=len(sampled),
        groups_kept=len(kept),
        zero_variance_frac=silent / len(sampled) if sampled else 0.0,
        fill_rounds=rounds,
        verifier_errors=sum(1 for t in trajs if t.verdict is None or not t.verdict.ok),
        env_errors=sum(1 for t in trajs if t.verdict is not None and t.verdict.ok and not t.trainable),
        **verifier_latency_metrics([t.verdict for t in trajs if t.verdict is not None]),
        completion_tokens=sum(t.sampled_tokens for t in trajs) / max(len(trajs), 1),
        sampled_tokens=sum(t.sampled_tokens for t in trajs),  # every group sampled, kept or dropped: what a step cost
        rollout_s=t1 - t0,
        learn_s=t2 - t1,
        step_s=t2 - t0,
    )


EVAL_SCALARS = ("greedy_accuracy", "best", "regressing")  # with every `...pass@1` and `...regressed_tasks`


@dataclass
class RunLog:
    """Where one rank records the run: `store` (a `NullRunStore` off rank 0) and `writer` (TensorBoard and the
    trackers, a `SummaryWriter`-like `Trackers`; None when off or off rank 0)."""

    store: RunStore
    writer: Trackers | None = None
    store_samples: bool = True  # `train.store_samples`: every sample's row (and every episode's transcript)
    pieces: TokenPieces | None = None  # token texts: with it, each stored sample's per-token record is stored too

    def record_step(self, step: int, metrics: dict[str, float], sampled: list[Group], kept: list[Group],
                    batch: TrainBatch | None = None, values: TokenValues | None = None) -> None:
        """The step's metrics, groups and samples; with `pieces`, each sample's per-token record (`batch`: the
        update's rows, `values`: the learner's figures in them; None when no update ran)."""
        kept_ids = {id(g) for g in kept}
        group_rows = [(i, g.task.id, g.rewards, id(g) in kept_ids) for i, g in enumerate(sampled)]
        sample_rows: list[SampleRow] = []
        tokens: StepTokens | None = None
        if self.store_samples:
            for i, g in enumerate(sampled):
                for j, t in enumerate(g.trajectories):
                    sample_rows.append(SampleRow.of(i, j, t))
            if self.pieces is not None:
                tokens = step_tokens(sampled, kept, batch, values, self.pieces)
        self.store.log_step(step, metrics, group_rows, sample_rows, tokens)
        if tokens is not None and self.pieces is not None:
            self.pieces.handed(tokens.pieces)
        if self.writer is not None:
            for k, v in metrics.items():
                self.writer.add_scalar(f"train/{k}", v, step)

    def record_episodes(self, step: int, metrics: dict[str, float], sampled: list[Group]) -> None:
        """The agent episodes of this step's groups (wherever they were sampled): per-turn metrics, and their
        transcripts in the store."""
        from posttrain.agent.metrics import episode_metrics
        from posttrain.agent.rollouter import masked_groups

        groups = [g.episodes for g in sampled]
        flat = [ep for eps in groups for ep in eps]
        metrics.update({f"agent/{k}": v for k, v in episode_metrics(flat).items()}, masked_groups=masked_groups(sampled))
        if self.store_samples:
            n = max((len(eps) for eps in groups), default=1)
            self.store.log_episodes(step, [
                EpisodeRow(i * n + j, ep.task_id, ep.status.value, int(ep.passed), ep.reward, ep.steps, ep.tokens_in,
                           ep.tokens_out, ep.times.total_s, ep.cost_usd, ep.to_dict())
                for i, eps in enumerate(groups) for j, ep in enumerate(eps)])

    def record_eval(self, step: int, metrics: dict[str, float]) -> None:
        if self.writer is not None:
            for key, value in metrics.items():
                if key in EVAL_SCALARS or key.endswith(("pass@1", "regressed_tasks")):
                    self.writer.add_scalar(f"eval/{key}", value, step)

    def alert(self, step: int, kind: str, message: str, warning: type[Warning] | None = UserWarning,
              stacklevel: int = 3, **fields: Any) -> None:
        """An alert in the store (the dashboard shows it), warned here too unless `warning` is None."""
        if warning is not None:
            warnings.warn(message, warning, stacklevel=stacklevel)
        self.store.add_alert({"step": step, "kind": kind, **fields, "message": message})

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.store.close()


def open_run_log(cfg: RunConfig, run_dir: Path, lead: bool, store: RunStore | None = None) -> RunLog:
    """Rank 0's record (the store at <run>/run.sqlite unless one is given; trackers come with `open_writer`), or
    another rank's null one."""
    if store is None:
        store = RunStore(run_dir / "run.sqlite") if lead else NullRunStore()
    return RunLog(store, None, cfg.train.store_samples)


def open_writer(cfg: RunConfig, run_dir: Path, step: int, resume: bool) -> Trackers | None:
    """TensorBoard and the configured trackers (`posttrain.tracking`), written like a `SummaryWriter`, opened after
    `step` so a resumed run's curves continue; None when none is configured."""
    if not (cfg.tensorboard or cfg.trackers):
        return None
    from posttrain.tracking import build_trackers

    return build_trackers(cfg.trackers, cfg.tensorboard, run_dir, cfg.name, cfg.tracker_project, cfg.model_dump(),
                          purge_step=step + 1 if step else None, resume=resume)


def describe_run(store: RunStore, cfg: RunConfig, parts: Components, world: int) -> None:
    """A new run's description in its store: config, code version, machine, initial model, verifiers, ranks, the base."""
    from posttrain.provenance import code_version, machine
    from posttrain.recipes.builtin import base_band_message
    from posttrain.rewards import verifier_id

    store.set_info(
        config=cfg.model_dump(),
        code=code_version(),
        machine=machine(),
        init_model=str(parts.init_path),
        verifier=verifier_id(parts.domains[0].verifier),
        domains=[{"name": d.name, "verifier": verifier_id(d.verifier), "weight": d.weight} for d in parts.domains],
        created=time.time(),
    )
    if world > 1:
        store.set_info(data_parallel={"world": world, "strategy": cfg.rl.data_parallel})
    if parts.base is not None:  # the built-in base: whether it reached its band goes with the run
        store.set_info(base={"path": str(parts.base.path), "accuracy": parts.base.accuracy, "steps": parts.base.steps,
                             "in_band": parts.base.in_band})
        if not parts.base.in_band:
            store.add_alert({"step": 0, "kind": "base_out_of_band", "message": base_band_message(cfg, parts.base)})


def record_infrastructure(log: RunLog, step: int, metrics: dict[str, float], world: int, async_loop: AsyncLoop | None,
                          sandboxes: Sandboxes | None) -> None:
    """Ranks, producers and Ray sandbox workers (`sandboxes`: the run's, when they are Ray's): their figures, and
    each failure warned and kept in the store's alerts (a producer's request was re-queued; a sandbox worker was
    rebuilt and its executions re-submitted)."""
    if world > 1:
        metrics["data_parallel_world"] = float(world)
    if async_loop is not None:
        metrics.update(async_loop.step_metrics())
        for f in async_loop.new_failures():  # a producer that died or failed: in the log and the store
            warnings.warn(f"rollout producer {f.producer} failed (request re-queued): {f.message}", stacklevel=4)
            log.alert(step, "producer_failure", f.message, None, producer=f.producer)
    if sandboxes is None:
        return
    found = [("learner", line) for line in sandboxes.new_failures()]
    if async_loop is not None:
        found += [(f"producer {f.producer}", f.message) for f in async_loop.new_sandbox_failures()]
    for origin, message in found:
        if origin != "learner":  # the learner's own pool has warned here already; a producer's, in its process
            warnings.warn(f"{origin}: {message}", RuntimeWarning, stacklevel=4)
        log.alert(step, "sandbox_worker_failure", message, None, origin=origin)
    metrics["sandbox_worker_failures"] = float(len(found))
