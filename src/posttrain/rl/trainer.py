"""The synchronous training loop: sample -> rollout -> verify -> advantages -> update -> publish weights.

Covers: one run over the `Components` that `rl/build.py` builds from a
config; filling each batch with informative groups (zero-variance groups
dropped; each round draws enough tasks for the running informative share to
fill the batch, `fill_draw`, and more rounds follow until it is full or the
refill budget is spent); the update; `engine.load_weights` after every update; metrics to
the run store and TensorBoard; held-out evaluation every K steps through
the evaluation harness (responses stored like any eval); checkpoints every
K steps; and exact resume from the newest checkpoint (`TrainerState`).
`[rollout] mode = "async"` hands sampling to `rl/async_loop.py` (producers,
the bounded buffer, staleness) and keeps everything else here.
An agent domain's groups carry their episodes (`Group.episodes`, sampled
here or by an async producer): their transcripts go to the run store's `episodes`
table (`posttrain agent show RUN STEP:IDX` replays what training saw) and
their per-turn figures (`agent/turns_per_episode`, `agent/format_error_rate`,
`agent/status/...`, `agent/tool/...`, `masked_groups`) join the step's metrics.
Under torchrun (`torchrun --nproc_per_node N posttrain train ...`) every rank
runs this loop: each rolls out its share of the tasks every rank drew alike,
the groups are gathered to every rank (so curricula, batches and updates stay
identical with no other message), the update is split over the ranks
(`rl.data_parallel`), and rank 0 alone writes the store, evaluates, keeps
best/ and checkpoints (with every rank's sampler state, for an exact resume);
each evaluation checks that the replicas still hold the same weights.
Does not cover: building components (`rl/build.py`), the asynchronous
loop itself, or running agent episodes (`posttrain.agent`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, cast

import torch

from posttrain.builtin import base_band_message
from posttrain.config import RunConfig
from posttrain.errors import UserError
from posttrain.eval.training import evaluate_in_training
from posttrain.monitor import Alert, MonitorAlert, Watch
from posttrain.provenance import code_version
from posttrain.rewards import verifier_id, verifier_latency_metrics
from posttrain.rl.advantages import group_relative_advantages, has_signal
from posttrain.rl.async_loop import AsyncLoop
from posttrain.rl.backends import Backends
from posttrain.rl.build import Components, build, data_parallel_from_env
from posttrain.rl.colocation import Colocation
from posttrain.rl.learner import pack_groups
from posttrain.rl.rollout import run_sync
from posttrain.rl.scheduling import record_scheduler
from posttrain.rl.selection import Best, HeldOutRegression, observe
from posttrain.sandbox.sandboxes import use_sandboxes
from posttrain.scheduler.curriculum import level_metrics
from posttrain.scheduler.pipeline import fill_batch, fill_rule
from posttrain.scheduler.task_scheduler import TaskScheduler
from posttrain.store.checkpoints import (
    TrainerState,
    checkpoint_dir,
    latest_checkpoint,
    load_trainer_state,
    prune_checkpoints,
    save_checkpoint,
)
from posttrain.store.run_store import RunStore, SampleRow
from posttrain.types import Group


class RunExistsError(UserError, RuntimeError):
    """A run directory already holds a run and neither resume nor overwrite was asked for."""


class NoCheckpointError(UserError, FileNotFoundError):
    """`--resume` on a run that has no checkpoint to resume from."""


class _NoStore:
    """The run store of a torchrun rank other than 0: rank 0 writes the run's one store; every write here is
    dropped and every read is empty."""

    def __getattr__(self, name: str) -> Callable[..., list]:
        return lambda *args, **kwargs: []


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
    """Owns one run. `Trainer(cfg).run()` trains; `Trainer(cfg, resume=True).run()` continues it."""

    def __init__(
        self,
        cfg: RunConfig,
        resume: bool = False,
        overwrite: bool = False,
        on_step: Callable[[StepResult], None] | None = None,
        on_eval: Callable[[int, dict[str, float]], None] | None = None,
        components: Components | None = None,
        backends: Backends | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = cfg.path
        self.on_step, self.on_eval = on_step, on_eval
        store_path = self.run_dir / "run.sqlite"
        self.dp = components.dp if components is not None else data_parallel_from_env(cfg.rl.device, backends)
        self.lead = self.dp.lead
        if store_path.exists() and not resume:
            if not overwrite:
                raise RunExistsError(f"run {self.run_dir} already exists: pass --resume to continue it or choose another name")
            if self.lead:
                shutil.rmtree(self.run_dir)
        if resume and latest_checkpoint(self.run_dir) is None:
            raise NoCheckpointError(
                f"{self.run_dir}: no checkpoint to resume from (checkpoint_every = {cfg.train.checkpoint_every})"
            )
        self.dp.barrier()  # every rank has looked before rank 0 deletes or creates anything
        if self.lead:
            self.run_dir.mkdir(parents=True, exist_ok=True)
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
        self.best: Best | None = None
        self.store: RunStore = p.store or (RunStore(store_path) if self.lead else cast(RunStore, _NoStore()))
        self.async_loop: AsyncLoop | None = None
        self._async_state: dict = {}
        self.watch = Watch(cfg.train.monitors, self.params.n)  # the run monitors (posttrain.monitor)
        self.stop_reason: str | None = None
        if resume:
            self._restore()
            self.watch.load(self.store.steps(), [(s, {"greedy_accuracy" if n == "held_out" else f"{n}/pass@1":
                                                     m.get("pass@1", m.get("greedy_accuracy", 0.0))})
                                                 for s, n, m in self.store.evals()], self.store.domain_metrics())
        else:
            self.store.set_info(
                config=cfg.model_dump(),
                code=code_version(),
                init_model=str(self.init_path),
                verifier=verifier_id(self.verifier),
                domains=[{"name": d.name, "verifier": verifier_id(d.verifier), "weight": d.weight} for d in self.domains],
                created=time.time(),
            )
            if self.dp.world > 1:
                self.store.set_info(data_parallel={"world": self.dp.world, "strategy": cfg.rl.data_parallel})
            if p.base is not None:  # the built-in base: whether it reached its band goes with the run
                self.store.set_info(base={"path": str(p.base.path), "accuracy": p.base.accuracy, "steps": p.base.steps,
                                          "in_band": p.base.in_band})
                if not p.base.in_band:
                    self.store.add_alert({"step": 0, "kind": "base_out_of_band", "message": base_band_message(cfg, p.base)})
        self.writer = self._trackers(resume) if (cfg.tensorboard or cfg.trackers) and self.lead else None
        if cfg.rollout.mode == "async":
            self.async_loop = AsyncLoop.for_components(cfg, self.model, self.tokenizer, self.domains, self.params,
                                                       self.step, cfg.train.steps, p.sandboxes, p.backends)
            if resume:  # the buffer is not in the checkpoint: what was pending is dropped, and counted
                self.async_loop.load_state_dict(self._async_state)
                self.store.set_info(resume_dropped_groups=self.async_loop.resume_dropped)

    # construction helpers
    def _trackers(self, resume: bool):
        """TensorBoard and the configured trackers (`posttrain.tracking`), written like a `SummaryWriter`."""
        from posttrain.tracking import build_trackers

        cfg = self.cfg
        return build_trackers(cfg.trackers, cfg.tensorboard, self.run_dir, cfg.name, cfg.tracker_project,
                              cfg.model_dump(), purge_step=self.step + 1 if self.step else None, resume=resume)

    def _restore(self) -> None:
        from posttrain.models.io import load_model

        found = latest_checkpoint(self.run_dir)
        assert found is not None  # checked in __init__
        step, path = found
        model, _ = load_model(path)
        if self.cfg.rl.lora is not None:  # checkpoints hold merged weights: they become the base, adapters restart at 0
            from posttrain.models.lora import load_merged

            load_merged(self.model, model.state_dict())
        else:
            self.model.load_state_dict(model.state_dict())
        state = load_trainer_state(path)
        self.learner.load_state_dict(state.learner)
        self.curriculum.load_state_dict(state.curriculum)
        engine_rng, torch_rng = state.engine_rng, state.torch_rng
        ranks = state.extra.get("ranks")  # a torchrun run: every rank's own sampler state
        if self.dp.world > 1 and ranks and len(ranks) == self.dp.world:
            engine_rng, torch_rng = ranks[self.dp.rank]["engine_rng"], ranks[self.dp.rank]["torch_rng"]
        elif self.dp.world > 1 and not self.lead:
            engine_rng = None  # another world size, or a one-process checkpoint: this rank samples afresh
        if self.dp.world > 1 and self.lead and not (ranks and len(ranks) == self.dp.world):
            warnings.warn(f"resuming step {step} on {self.dp.world} ranks from a checkpoint of "
                          f"{len(ranks) if ranks else 1}: the other ranks' sampling starts from fresh states",
                          stacklevel=2)
        if engine_rng is not None:
            self.engine.load_sampler_state(engine_rng)
        torch.set_rng_state(torch_rng)
        self.informative_rate = state.informative_rate
        self._async_state = state.extra.get("async", {})
        self.best = Best(**state.best) if state.best else None
        self.step = step
        self.engine.load_weights(self.learner.policy_state(), version=step)
        self.store.truncate_after(step)
        self.store.set_info(resumed_from=step, alerts=[a for a in self.store.alerts() if a["step"] <= step])

    # the loop
    def collect(self) -> tuple[list[Group], list[Group], int, int]:
        """Groups to train on (informative, at most prompts_per_step), all groups sampled, rounds used,
        and how many sampled groups had zero reward variance: the pipeline's refill rule
        (`scheduler/pipeline.py`), each round rolled out here."""
        got = fill_batch(fill_rule(self.cfg), self.curriculum, lambda k, _round: self._rollout(self.curriculum.sample(k)),
                         self.informative_rate, self.step, has_signal)
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
        t2 = time.perf_counter()
        trajs = [t for g in sampled for t in g.trajectories]
        ok = [t for t in trajs if t.trainable]
        metrics.update(
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
            rollout_s=t1 - t0,
            learn_s=t2 - t1,
            step_s=t2 - t0,
        )
        if self.dp.world > 1:
            metrics["data_parallel_world"] = float(self.dp.world)
        if self.async_loop is not None:
            metrics.update(self.async_loop.step_metrics())
            for f in self.async_loop.new_failures():  # a producer that died or failed: in the log and the store
                warnings.warn(f"rollout producer {f.producer} failed (request re-queued): {f.message}", stacklevel=2)
                self.store.add_alert({"step": self.step, "kind": "producer_failure", "producer": f.producer,
                                      "message": f.message})
        if self.cfg.sandbox.backend == "ray":
            metrics["sandbox_worker_failures"] = float(self._record_sandbox_failures())
        metrics.update(level_metrics(self.curriculum))
        if isinstance(self.curriculum, TaskScheduler):  # per-domain figures and failures: store, TensorBoard, progress
            record_scheduler(self.curriculum, self.store, self.writer, self.step, metrics,
                             {d.name: d.verifier for d in self.domains}, {g.task.id: g.task for g in sampled})
        self._record_episodes(metrics, sampled)
        self._record(metrics, sampled, kept)
        # the scheduler's per-domain state is rank 0's store only: other ranks must reach the same stop decision
        domains = {name: m for _, name, m in self.store.domain_metrics(self.step)} if self.dp.world == 1 else {}
        self._on_alerts(self.watch.observe_step(self.step, metrics, domains), stops=True)
        result = StepResult(self.step, metrics)
        if self.on_step:
            self.on_step(result)
        return result

    def _record_sandbox_failures(self) -> int:
        """Ray sandbox workers that died since the last step, the learner's own and the producers' (each was
        rebuilt and its executions re-submitted): warned, and kept in the store's alerts. How many."""
        found: list[tuple[str, str]] = []
        found += [("learner", line) for line in self.parts.sandboxes.new_failures()]
        if self.async_loop is not None:
            found += [(f"producer {f.producer}", f.message) for f in self.async_loop.new_sandbox_failures()]
        for origin, message in found:
            if origin != "learner":  # the learner's own pool has warned here already; a producer's, in its process
                warnings.warn(f"{origin}: {message}", RuntimeWarning, stacklevel=3)
            self.store.add_alert({"step": self.step, "kind": "sandbox_worker_failure", "origin": origin,
                                  "message": message})
        return len(found)

    def _record_episodes(self, metrics: dict[str, float], sampled: list[Group]) -> None:
        """The agent episodes of this step's groups (wherever they were sampled): per-turn metrics, and their
        transcripts in the store."""
        from posttrain.agent.metrics import episode_metrics
        from posttrain.agent.rollouter import AgentRollouter, masked_groups
        from posttrain.store.run_store import EpisodeRow

        if not isinstance(self.rollouter, AgentRollouter):  # also in async mode: the domain's own rollouter
            return
        groups = [g.episodes for g in sampled]
        flat = [ep for eps in groups for ep in eps]
        metrics.update({f"agent/{k}": v for k, v in episode_metrics(flat).items()}, masked_groups=masked_groups(sampled))
        if self.cfg.train.store_samples:
            n = max((len(eps) for eps in groups), default=1)
            self.store.log_episodes(self.step, [
                EpisodeRow(i * n + j, ep.task_id, ep.status.value, int(ep.passed), ep.reward, ep.steps, ep.tokens_in,
                           ep.tokens_out, ep.times.total_s, ep.cost_usd, ep.to_dict())
                for i, eps in enumerate(groups) for j, ep in enumerate(eps)])

    def _record(self, metrics: dict[str, float], sampled: list[Group], kept: list[Group]) -> None:
        kept_ids = {id(g) for g in kept}
        group_rows = [(i, g.task.id, g.rewards, id(g) in kept_ids) for i, g in enumerate(sampled)]
        sample_rows = []
        if self.cfg.train.store_samples:
            for i, g in enumerate(sampled):
                for j, t in enumerate(g.trajectories):
                    sample_rows.append(SampleRow.of(i, j, t))
        self.store.log_step(self.step, metrics, group_rows, sample_rows)
        if self.writer is not None:
            for k, v in metrics.items():
                self.writer.add_scalar(f"train/{k}", v, self.step)

    def evaluate(self) -> dict[str, float]:
        """Held-out greedy accuracy of every domain (and `train.eval_suites`) at the current step, stored.
        Under torchrun: every rank checks the replicas; rank 0 evaluates, the others get {}."""
        replicas = self._check_replicas() if self.dp.world > 1 else None
        if not self.lead:
            return {}
        metrics = self._evaluate_lead()
        if replicas is not None:
            metrics["replica_max_diff"] = replicas
        return metrics

    def _check_replicas(self) -> float | None:
        """DDP: whether every rank's replica still holds the same weights (a checksum over every parameter); a
        difference is warned and kept in the store's alerts. The largest difference from rank 0 (None: FSDP)."""
        if self.cfg.rl.data_parallel != "ddp":
            return None
        with torch.no_grad():
            checksum = sum(float(p.double().sum()) + float(p.double().abs().sum()) for p in self.model.parameters())
        same, spread = self.dp.all_equal(checksum)
        if not same and self.lead:
            message = f"the {self.dp.world} ranks' weights differ at step {self.step} (checksum spread {spread:.3g})"
            warnings.warn(message, RuntimeWarning, stacklevel=3)
            self.store.add_alert({"step": self.step, "kind": "replica_divergence", "message": message})
        return spread

    def _evaluate_lead(self) -> dict[str, float]:
        if not self.parts.held_out:
            warnings.warn(f"{self.domains[0].name}: no held-out tasks; evaluation skipped (raise held_out_fraction)",
                          stacklevel=2)
            return {}
        max_tokens = self.params.max_tokens
        metrics: dict[str, float] = {}
        accs = []
        for i, suite in enumerate(self.parts.held_out):
            name = "held_out" if i == 0 else f"held_out:{suite.name}"
            m = self._evaluate_suite(suite, name, max_tokens)
            accs.append(m["pass@1"])
            if i == 0:
                metrics.update(greedy_accuracy=m["pass@1"], n_tasks=m["n_tasks"], verifier_errors=m["n_errors"],
                               regressed_tasks=m["regressed_tasks"])
                metrics.update({k: v for k, v in m.items() if k.startswith("agent/")})  # an agent suite's turn figures
            else:
                metrics[f"{name}/pass@1"] = m["pass@1"]
                metrics[f"{name}/regressed_tasks"] = m["regressed_tasks"]
        if len(accs) > 1:
            metrics["greedy_accuracy"] = sum(accs) / len(accs)
        for name, suite in self.parts.eval_suites.items():
            suite_metrics = self._evaluate_suite(suite, name, max_tokens)
            metrics[f"{name}/pass@1"] = suite_metrics["pass@1"]
            metrics[f"{name}/regressed_tasks"] = suite_metrics["regressed_tasks"]
        self._track_best(metrics)
        # under torchrun only rank 0 evaluates: a held-out alert warns there but cannot stop the other ranks
        self._on_alerts(self.watch.observe_eval(self.step, metrics), stops=self.dp.world == 1)
        if self.writer is not None:
            for key, value in metrics.items():
                if key in ("greedy_accuracy", "best", "regressing") or key.endswith(("pass@1", "regressed_tasks")):
                    self.writer.add_scalar(f"eval/{key}", value, self.step)
        if self.on_eval:
            self.on_eval(self.step, metrics)
        return metrics

    def _evaluate_suite(self, suite, name: str, max_tokens: int) -> dict[str, float]:
        """One suite's in-training evaluation: greedy responses, or greedy episodes for an agent suite."""
        if suite.agent is not None:
            from posttrain.agent.evaluate import evaluate_agent_in_training

            return evaluate_agent_in_training(self.engine, suite, name, self.store, self.step, max_tokens,
                                              self.parts.sandboxes)
        with use_sandboxes(self.parts.sandboxes):  # code verifiers execute where the training rollouts' do
            return evaluate_in_training(self.engine, suite, name, self.store, self.step, max_tokens, self.parts.renderer)

    def _track_best(self, metrics: dict[str, float]) -> None:
        """Keep best/ (the best held-out metric so far, ties to the later step) and warn on a sustained drop."""
        cfg = self.cfg.train
        value = metrics.get(cfg.best_metric)
        if value is None:
            return
        self.best, improved, regressing = observe(self.best, self.step, value, cfg.warn_drop, cfg.warn_patience)
        best = self.best
        if improved:
            if cfg.keep_best:
                self._save_best()
            self.store.set_info(best={"step": best.step, "metric": cfg.best_metric, "value": best.value})
        metrics.update(best=best.value, best_step=best.step, regressing=float(regressing))
        if regressing:
            message = (f"held-out {cfg.best_metric} {value:.3f} has been more than {cfg.warn_drop:g} below its best "
                       f"{best.value:.3f} (step {best.step}) for {best.below} evaluations; best/ keeps the best model")
            self.store.add_alert({"step": self.step, "kind": "held_out_regression", "metric": cfg.best_metric,
                                  "value": value, "best": best.value, "best_step": best.step, "message": message})
            warnings.warn(message, HeldOutRegression, stacklevel=2)

    def _on_alerts(self, alerts: list[Alert], stops: bool) -> None:
        """Monitor alerts: warned, stored (the dashboard shows them), and with `train.on_alert = "stop"` the run's
        stop reason (the loop checkpoints and stops after this step)."""
        for alert in alerts:
            if self.lead:
                self.store.add_alert(alert.to_dict())
                warnings.warn(alert.message, MonitorAlert, stacklevel=3)
            if stops and self.cfg.train.on_alert == "stop" and self.stop_reason is None:
                self.stop_reason = f"{alert.kind}: {alert.message}"

    def _save_best(self) -> None:
        from posttrain.models.io import save_model

        out, tmp = self.run_dir / "best", self.run_dir / "best.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        save_model(self.whole_model, self.tokenizer, tmp)
        (tmp / "posttrain.json").write_text(json.dumps({"step": self.step, "metric": self.cfg.train.best_metric,
                                                        "value": self.best.value if self.best else None}))
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)

    def best_model_dir(self) -> Path | None:
        """<run>/best when held-out selection kept one."""
        out = self.run_dir / "best"
        return out if (out / "config.json").exists() else None

    def state(self) -> TrainerState:
        return TrainerState(
            step=self.step,
            learner=self.learner.state_dict(),
            curriculum=self.curriculum.state_dict(),
            engine_rng=self.engine.sampler_state(),
            torch_rng=torch.get_rng_state(),
            informative_rate=self.informative_rate,
            best=asdict(self.best) if self.best else None,
            extra={"async": self.async_loop.state_dict()} if self.async_loop is not None else {},
        )

    def checkpoint(self) -> Path:
        """Save the step's weights and trainer state (under torchrun: rank 0 saves, with every rank's sampler state)."""
        state = self.state()
        if self.dp.world > 1:
            ranks = self.dp.gather_to_lead({"engine_rng": state.engine_rng, "torch_rng": state.torch_rng})
            if not self.lead:
                return checkpoint_dir(self.run_dir, self.step)
            state.extra["ranks"] = ranks
        path = save_checkpoint(self.run_dir, self.step, self.model, self.tokenizer, state)
        self.store.log_checkpoint(self.step, str(path))
        for removed in prune_checkpoints(self.run_dir, self.cfg.train.keep_checkpoints):
            self.store.forget_checkpoint(removed)
        return path

    def run(self, stop_at: int | None = None) -> TrainResult:
        """Train until `train.steps` (or `stop_at`, to simulate an interruption in tests)."""
        cfg = self.cfg.train
        last = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
        start = time.perf_counter()
        final: dict[str, float] = {}
        self.store.set_info(status="running", pid=os.getpid(), started=time.time())  # `posttrain runs` reads these
        try:
            if cfg.eval_every and cfg.eval_at_start and self.step == 0 and last > 0:
                final = self.evaluate()
            while self.step < last and self.stop_reason is None:
                self.train_step()
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    final = self.evaluate()
                if self.stop_reason is not None or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
                    self.checkpoint()  # a stop by an alert checkpoints first: --resume goes on from here
            if self.stop_reason is not None:
                self.store.set_info(status="stopped_by_alert", stop_reason=self.stop_reason, last_step=self.step)
                return TrainResult(self.run_dir, self.step, time.perf_counter() - start, final, self.stop_reason)
            if self.step == cfg.steps and not (cfg.eval_every and self.step % cfg.eval_every == 0):
                final = self.evaluate()
            self.store.set_info(status="finished" if self.step == cfg.steps else "stopped", last_step=self.step)
        except BaseException as exc:
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self.store.set_info(status=status, error=f"{type(exc).__name__}: {exc}"[:500], last_step=self.step)
            raise
        finally:
            if self.writer is not None:
                self.writer.flush()
        return TrainResult(self.run_dir, self.step, time.perf_counter() - start, final)

    def close(self) -> None:
        if self.async_loop is not None:
            self.async_loop.close()
        self.parts.sandboxes.close()  # after the producers: their verifiers may still execute through it
        if self.writer is not None:
            self.writer.close()
        self.store.close()
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
