"""The training loop: sample -> rollout -> verify -> advantages -> update -> publish weights, every step.

Covers: one run over the `Components` of `rl/build.py`: each batch filled with informative groups by the one
refill rule (`scheduler/pipeline.py`), rolled out here (`[rollout] mode = "sync"`) or by `rl/async_loop.py`'s
producers; the update; `engine.load_weights` after it; the step's record (`rl/run_log.py`: store, TensorBoard,
an agent domain's episodes, alerts); the monitors; held-out evaluation every K steps (`rl/held_out.py`);
checkpoints every K steps and the exact resume (`rl/resume.py`). Under torchrun every rank runs this loop: each
rolls out its share of the tasks all ranks drew alike, the groups are gathered back to every rank in order, the
update is split over the ranks, and rank 0 alone records, evaluates and checkpoints. Rank policy is the
`rl.backends.DataParallel` the trainer is given (`OneProcess` in one process); off rank 0 the record is null.
Does not cover: building components, the asynchronous loop, agent episodes, what an evaluation measures.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from posttrain.config import RunConfig
from posttrain.errors import UserError
from posttrain.monitor import Alert, MonitorAlert, Watch, stored_scores
from posttrain.rl import resume as checkpoints
from posttrain.rl.advantages import group_relative_advantages, has_signal
from posttrain.rl.async_loop import AsyncLoop
from posttrain.rl.backends import Backends
from posttrain.rl.build import Components, build, data_parallel_from_env
from posttrain.rl.colocation import Colocation
from posttrain.rl.held_out import HeldOutEvaluation
from posttrain.rl.rollout import run_sync
from posttrain.rl.run_log import describe_run, open_run_log, open_writer, record_infrastructure, step_metrics
from posttrain.rl.scheduling import record_scheduler
from posttrain.rl.selection import Best
from posttrain.rl.token_record import TokenPieces
from posttrain.rl.train_batch import pack_groups
from posttrain.scheduler.curriculum import level_metrics
from posttrain.scheduler.pipeline import InlineRollouts, fill_batch, fill_rule
from posttrain.scheduler.task_scheduler import TaskScheduler
from posttrain.store.checkpoints import latest_checkpoint
from posttrain.store.run_store import RunStore
from posttrain.types import Group


class RunExistsError(UserError, RuntimeError):
    """A run directory already holds a run and neither resume nor overwrite was asked for."""


class NoCheckpointError(UserError, FileNotFoundError):
    """`--resume` on a run that has no checkpoint to resume from."""


@dataclass
class StepResult:
    step: int
    metrics: dict[str, float]


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    seconds: float
    final_eval: dict[str, float] = field(default_factory=dict)
    stopped_by: str | None = None  # the monitor alert that stopped the run (`train.on_alert = "stop"`), if one did


class Trainer:
    """Owns one run. `Trainer(cfg).run()` trains; `Trainer(cfg, resume=True).run()` continues it. `backends`: the
    optional back ends a config may name (`posttrain.wiring.default_backends()`; the CLI passes them)."""

    def __init__(self, cfg: RunConfig, resume: bool = False, overwrite: bool = False,
                 on_step: Callable[[StepResult], None] | None = None,
                 on_eval: Callable[[int, dict[str, float]], None] | None = None,
                 components: Components | None = None, backends: Backends | None = None) -> None:
        self.cfg = cfg
        self.run_dir = cfg.path
        self.on_step, self.on_eval = on_step, on_eval
        self.dp = components.dp if components is not None else data_parallel_from_env(cfg.rl.device, backends)
        self.lead = self.dp.lead
        self._claim_run_dir(resume, overwrite)
        self.parts = components or build(cfg, store=False, dp=self.dp, backends=backends)
        p = self.parts
        # the policy with every weight in place (FSDP shards the learner's module; the engine holds a whole copy)
        self.whole_model = p.whole_model or p.model
        self.model, self.tokenizer, self.engine = p.model, p.tokenizer, p.engine
        self.learner, self.rollouter, self.curriculum = p.learner, p.rollouter, p.curriculum
        self.colocation = Colocation.for_run(cfg, self.engine)  # vLLM sleeping around updates on a shared GPU
        self.domains, self.params = p.domains, p.params
        self.verifier = p.domains[0].verifier
        self.held_out = p.held_out[0].tasks if p.held_out else []  # the selection half: evaluated during training
        self.reporting = p.reporting[0].tasks if p.reporting else []  # the reporting half: kept for the final figures
        self.init_path = p.init_path
        self.step = 0
        self.informative_rate = 1.0  # running share of groups with reward variance: sizes refills
        self.log = open_run_log(cfg, self.run_dir, self.lead, p.store)
        self.store: RunStore = self.log.store
        if self.lead and self.log.store_samples:  # each stored sample's tokens, from values the update computes
            self.log.pieces, self.learner.record_tokens = TokenPieces(self.tokenizer), True
        self.evaluation = HeldOutEvaluation(cfg.eval, p, self.log, self.dp, self.run_dir, cfg.rl.data_parallel)
        self.async_loop: AsyncLoop | None = None
        self.watch = Watch(cfg.train.monitors, self.params.n)  # the run monitors (posttrain.monitor)
        self.stop_reason: str | None = None
        async_state: dict = {}
        if resume:
            restored = checkpoints.restore(self.run_dir, cfg, p, self.dp, self.store)
            self.step, self.informative_rate, self.best = restored.step, restored.informative_rate, restored.best
            async_state = restored.async_state
            self.watch.load(self.store.steps(), stored_scores(self.store.evals()), self.store.domain_metrics())
        else:
            describe_run(self.store, cfg, p, self.dp.world)
        self.log.writer = self.writer = open_writer(cfg, self.run_dir, self.step, resume) if self.lead else None
        if cfg.rollout.mode == "async":
            self.async_loop = AsyncLoop.for_components(cfg, self.model, self.tokenizer, self.domains, self.params,
                                                       self.step, cfg.train.steps, p.sandboxes, p.backends)
            if resume:  # the buffer is not in the checkpoint: what was pending is dropped, and counted
                self.async_loop.load_state_dict(async_state)
                self.store.set_info(resume_dropped_groups=self.async_loop.resume_dropped)

    def _claim_run_dir(self, resume: bool, overwrite: bool) -> None:
        """Refuse a run that exists unless resumed or overwritten, and a resume without a checkpoint; then rank 0
        deletes (overwrite) and creates the run directory, once every rank has looked."""
        if (self.run_dir / "run.sqlite").exists() and not resume:
            if not overwrite:
                raise RunExistsError(f"run {self.run_dir} already exists: pass --resume to continue it or choose another name")
            if self.lead:
                shutil.rmtree(self.run_dir)
        if resume and latest_checkpoint(self.run_dir) is None:
            raise NoCheckpointError(
                f"{self.run_dir}: no checkpoint to resume from (checkpoint_every = {self.cfg.train.checkpoint_every})"
            )
        self.dp.barrier()  # every rank has looked before rank 0 deletes or creates anything
        if self.lead:
            self.run_dir.mkdir(parents=True, exist_ok=True)

    @property
    def best(self) -> Best | None:
        """The best held-out evaluation so far (what best/ holds)."""
        return self.evaluation.best

    @best.setter
    def best(self, value: Best | None) -> None:
        self.evaluation.best = value

    # the loop
    def collect(self) -> tuple[list[Group], list[Group], int, int]:
        """Groups to train on (informative, at most prompts_per_step), all groups sampled, rounds used,
        and how many sampled groups had zero reward variance: the pipeline's refill rule
        (`scheduler/pipeline.py`), each round rolled out here."""
        got = fill_batch(fill_rule(self.cfg), self.curriculum, InlineRollouts(self._rollout), self.informative_rate,
                         self.step, has_signal)
        self.informative_rate = got.informative_rate
        return got.kept, got.sampled, got.rounds, got.silent

    def _rollout(self, tasks: list) -> list[Group]:
        """One group per task; under torchrun this rank rolls out its share and every rank gets all groups back,
        in the tasks' order."""
        if self.dp.world == 1:
            return run_sync(self.rollouter, tasks, self.params.n)
        mine = self.dp.shard(tasks)
        return self.dp.gather(run_sync(self.rollouter, mine, self.params.n) if mine else [], len(tasks))

    def train_step(self) -> StepResult:
        t0 = time.perf_counter()
        self.step += 1
        if self.async_loop is None:
            kept, sampled, rounds, silent = self.collect()
        else:
            got = self.async_loop.collect(self.step, self.curriculum, self.params.n, self.informative_rate)
            kept, sampled, rounds, silent, self.informative_rate = got.kept, got.sampled, got.rounds, got.silent, \
                got.informative_rate
        t1 = time.perf_counter()
        metrics: dict[str, float] = {}
        batch = None
        if kept:
            rewards = torch.tensor([g.rewards for g in kept])
            valid = torch.tensor([g.valid for g in kept])
            adv = group_relative_advantages(rewards, valid, self.cfg.rl.advantage, self.cfg.rl.std_floor)
            batch = pack_groups(kept, adv, valid, self.tokenizer.pad_id)
            with self.colocation.updating():  # vLLM on the learner's GPU sleeps (rl/colocation.py) ...
                metrics.update(self.learner.update(batch))
        self.engine.load_weights(self.learner.policy_state(), version=self.step)  # ... and wakes with these
        if self.async_loop is not None:
            self.async_loop.publish(self.model.state_dict(), self.step)
        metrics.update(step_metrics(sampled, kept, rounds, silent, (t0, t1, time.perf_counter())))
        record_infrastructure(self.log, self.step, metrics, self.dp.world, self.async_loop,
                              self.parts.sandboxes if self.cfg.sandbox.backend == "ray" else None)
        metrics.update(level_metrics(self.curriculum))
        if isinstance(self.curriculum, TaskScheduler):  # per-domain figures and failures: store, TensorBoard, progress
            record_scheduler(self.curriculum, self.store, self.writer, self.step, metrics,
                             {d.name: d.verifier for d in self.domains}, {g.task.id: g.task for g in sampled})
        from posttrain.agent.rollouter import AgentRollouter
        if isinstance(self.rollouter, AgentRollouter):  # also in async mode: the domain's own rollouter
            self.log.record_episodes(self.step, metrics, sampled)
        self.log.record_step(self.step, metrics, sampled, kept, batch, self.learner.token_values if batch is not None else None)
        # the scheduler's per-domain state is rank 0's store only: other ranks must reach the same stop decision
        domains = {name: m for _, name, m in self.store.domain_metrics(self.step)} if self.dp.world == 1 else {}
        self._on_alerts(self.watch.observe_step(self.step, metrics, domains), stops=True)
        result = StepResult(self.step, metrics)
        if self.on_step:
            self.on_step(result)
        return result

    def evaluate(self) -> dict[str, float]:
        """Held-out greedy accuracy of every domain (and `eval.suites`) at the current step, stored.
        Under torchrun: every rank checks the replicas; rank 0 evaluates, the others get {}."""
        replicas = self.evaluation.check_replicas(self.step) if self.dp.world > 1 else None
        if not self.lead:
            return {}
        metrics = self.evaluation.evaluate(self.step)
        if metrics is None:  # no held-out tasks (warned)
            metrics = {}
        else:
            # under torchrun only rank 0 evaluates: a held-out alert warns there but cannot stop the other ranks
            self._on_alerts(self.watch.observe_eval(self.step, metrics), stops=self.dp.world == 1)
            self.log.record_eval(self.step, metrics)
            if self.on_eval:
                self.on_eval(self.step, metrics)
        if replicas is not None:
            metrics["replica_max_diff"] = replicas
        return metrics

    def _on_alerts(self, alerts: list[Alert], stops: bool) -> None:
        """Monitor alerts: warned, stored (the dashboard shows them), and with `train.on_alert = "stop"` the run's
        stop reason (the loop checkpoints and stops after this step)."""
        for alert in alerts:
            if self.lead:
                self.store.add_alert(alert.to_dict())
                warnings.warn(alert.message, MonitorAlert, stacklevel=3)
            if stops and self.cfg.train.on_alert == "stop" and self.stop_reason is None:
                self.stop_reason = f"{alert.kind}: {alert.message}"

    def best_model_dir(self) -> Path | None:
        """<run>/best when held-out selection kept one."""
        out = self.run_dir / "best"
        return out if (out / "config.json").exists() else None

    def checkpoint(self) -> Path:
        """Save the step's weights and trainer state (under torchrun: rank 0 saves, with every rank's sampler state)."""
        state = checkpoints.state_of(self.step, self.parts, self.informative_rate, self.best, self.async_loop)
        return checkpoints.save(self.run_dir, self.cfg, self.parts, self.dp, self.store, state)

    def run(self, stop_at: int | None = None) -> TrainResult:
        """Train until `train.steps` (or `stop_at`, to simulate an interruption in tests)."""
        cfg, every = self.cfg.train, self.cfg.eval.every
        last = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
        start = time.perf_counter()
        final: dict[str, float] = {}
        self.store.set_info(status="running", pid=os.getpid(), started=time.time())  # `posttrain runs` reads these
        try:
            if every and self.cfg.eval.at_start and self.step == 0 and last > 0:
                final = self.evaluate()
            while self.step < last and self.stop_reason is None:
                self.train_step()
                if every and self.step % every == 0:
                    final = self.evaluate()
                if self.stop_reason is not None or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
                    self.checkpoint()  # a stop by an alert checkpoints first: --resume goes on from here
            if self.stop_reason is not None:
                self.store.set_info(status="stopped_by_alert", stop_reason=self.stop_reason, last_step=self.step)
                return TrainResult(self.run_dir, self.step, time.perf_counter() - start, final, self.stop_reason)
            if self.step == cfg.steps and not (every and self.step % every == 0):
                final = self.evaluate()
            self.store.set_info(status="finished" if self.step == cfg.steps else "stopped", last_step=self.step)
        except BaseException as exc:
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self.store.set_info(status=status, error=f"{type(exc).__name__}: {exc}"[:500], last_step=self.step)
            raise
        finally:
            self.log.flush()
        return TrainResult(self.run_dir, self.step, time.perf_counter() - start, final)

    def close(self) -> None:
        if self.async_loop is not None:
            self.async_loop.close()
        self.parts.sandboxes.close()  # after the producers: their verifiers may still execute through it
        self.log.close()
        if self.dp.world > 1:  # every rank is past its last collective
            self.dp.barrier()
            self.dp.close()

    def final_model_dir(self) -> Path:
        """Save the current weights as an HF checkpoint at <run>/final and return it."""
        from posttrain.models.io import save_model

        out = self.run_dir / "final"
        if self.lead:
            save_model(self.whole_model, self.tokenizer, out)
            (out / "posttrain.json").write_text(json.dumps({"step": self.step}))
        return out
