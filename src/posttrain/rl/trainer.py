"""The synchronous training loop: sample -> rollout -> verify -> advantages -> update -> curriculum.

Covers: building every component from a `RunConfig`; filling each batch with
informative groups (zero-variance groups dropped, more tasks sampled until
the batch is full or the refill budget is spent); the update; metrics to the
run store and TensorBoard; held-out evaluation every K steps; checkpoints
every K steps; and exact resume from the newest checkpoint.
Does not cover: the asynchronous (bounded-staleness) mode or agent rollouts.
"""

from __future__ import annotations

from posttrain.errors import UserError
import json
import math
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from posttrain.config import RunConfig
from posttrain.engine.local import LocalEngine
from posttrain.eval.accuracy import evaluate_accuracy
from posttrain.models.io import load_model
from posttrain.provenance import code_version
from posttrain.rewards import build_verifier, verifier_id, verifier_latency_metrics
from posttrain.rl.advantages import group_relative_advantages, has_signal
from posttrain.rl.checkpoint import latest_checkpoint, load_trainer_state, prune_checkpoints, save_checkpoint
from posttrain.rl.learner import Learner, pack_groups
from posttrain.rl.rollout import rollout
from posttrain.scheduler.curriculum import PassRateCurriculum
from posttrain.store.run_store import RunStore
from posttrain.tasks import tasks_from_config
from posttrain.types import Group, SamplingParams


class RunExistsError(UserError, RuntimeError):
    """A run directory already holds a run and neither resume nor overwrite was asked for."""


class NoCheckpointError(UserError, FileNotFoundError):
    """`--resume` asked for a run that has no checkpoint to continue from."""


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


class Trainer:
    """Owns one run. `Trainer(cfg).run()` trains; `Trainer(cfg, resume=True).run()` continues it."""

    def __init__(
        self,
        cfg: RunConfig,
        resume: bool = False,
        overwrite: bool = False,
        on_step: Callable[[StepResult], None] | None = None,
        on_eval: Callable[[int, dict[str, float]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = cfg.path
        self.on_step, self.on_eval = on_step, on_eval
        store_path = self.run_dir / "run.sqlite"
        if store_path.exists() and not resume:
            if not overwrite:
                raise RunExistsError(f"run {self.run_dir} already exists: pass --resume to continue it or choose another name")
            shutil.rmtree(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)

        self.init_path = self._resolve_model_path()
        model, self.tokenizer = load_model(self.init_path)
        self.model = model
        self.source = tasks_from_config(cfg.tasks)
        r = cfg.reward
        self.verifier = build_verifier(r.verifier, r.extract, r.tolerance, r.max_response_chars, r.over_length_score)
        self.engine = LocalEngine(model, self.tokenizer, seed=cfg.seed)
        self.learner = Learner(model, cfg.rl, cfg.sampling.max_tokens, cfg.sampling.temperature)
        self.curriculum = PassRateCurriculum(self.source, seed=cfg.seed)
        self.held_out = self.source.take(cfg.train.eval_size, "held_out", seed=cfg.seed)
        self.params = SamplingParams(
            n=cfg.sampling.n,
            temperature=cfg.sampling.temperature,
            top_p=cfg.sampling.top_p,
            top_k=cfg.sampling.top_k,
            max_tokens=cfg.sampling.max_tokens,
        )
        self.step = 0
        self.informative_rate = 1.0  # running share of groups with reward variance: sizes refills
        self.store = RunStore(self.run_dir / "run.sqlite")
        if resume:
            self._restore()
        else:
            self.store.set_info(
                config=cfg.model_dump(),
                code=code_version(),
                init_model=str(self.init_path),
                verifier=verifier_id(self.verifier),
                created=time.time(),
            )
        self.writer = self._tensorboard() if cfg.tensorboard else None

    # construction helpers
    def _resolve_model_path(self) -> Path:
        if self.cfg.model.path:
            return Path(self.cfg.model.path)
        from posttrain.builtin import ensure_base

        return ensure_base(self.cfg.model.base).path

    def _tensorboard(self):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.step + 1 if self.step else None)

    def _restore(self) -> None:
        found = latest_checkpoint(self.run_dir)
        if found is None:
            every = self.cfg.train.checkpoint_every
            raise NoCheckpointError(f"{self.run_dir}: no checkpoint to resume from (checkpoint_every = {every})")
        step, path = found
        model, _ = load_model(path)
        self.model.load_state_dict(model.state_dict())
        state = load_trainer_state(path)
        self.learner.load_state_dict(state["learner"])
        self.curriculum.load_state_dict(state["curriculum"])
        self.engine.generator.set_state(state["engine_rng"])
        torch.set_rng_state(state["torch_rng"])
        self.informative_rate = state["informative_rate"]
        self.step = step
        self.engine.set_version(step)
        self.store.truncate_after(step)
        self.store.set_info(resumed_from=step)

    # the loop
    def collect(self) -> tuple[list[Group], list[Group], int, int]:
        """Groups to train on (informative, at most prompts_per_step), all groups sampled, rounds used,
        and how many sampled groups had zero reward variance."""
        cfg = self.cfg.train
        kept: list[Group] = []
        sampled: list[Group] = []
        rounds = silent = 0
        while len(kept) < cfg.prompts_per_step and rounds < cfg.max_fill_rounds:
            need = cfg.prompts_per_step - len(kept)
            k = need if rounds == 0 else min(4 * need, math.ceil(need / max(self.informative_rate, 0.25)))
            groups = rollout(self.engine, self.curriculum.sample(k), self.params, self.verifier, self.cfg.reward.timeout_s)
            self.curriculum.update(groups)
            rewards = torch.tensor([g.rewards for g in groups])
            valid = torch.tensor([g.valid for g in groups])
            signal = has_signal(rewards, valid).tolist()
            silent += signal.count(False)
            self.informative_rate = 0.9 * self.informative_rate + 0.1 * (sum(signal) / len(signal))
            for g, s in zip(groups, signal):
                if (s or not cfg.drop_zero_variance) and len(kept) < cfg.prompts_per_step:
                    kept.append(g)
            sampled.extend(groups)
            rounds += 1
            if not cfg.drop_zero_variance:
                break
        return kept, sampled, rounds, silent

    def train_step(self) -> StepResult:
        t0 = time.perf_counter()
        self.step += 1
        kept, sampled, rounds, silent = self.collect()
        t1 = time.perf_counter()
        metrics: dict[str, float] = {}
        if kept:
            rewards = torch.tensor([g.rewards for g in kept])
            valid = torch.tensor([g.valid for g in kept])
            adv = group_relative_advantages(rewards, valid, self.cfg.rl.advantage)
            batch = pack_groups(kept, adv, valid, self.tokenizer.pad_id)
            metrics.update(self.learner.update(batch))
        self.engine.set_version(self.step)
        t2 = time.perf_counter()
        trajs = [t for g in sampled for t in g.trajectories]
        ok = [t for t in trajs if t.verdict.ok]
        metrics.update(
            reward=sum(t.verdict.score for t in ok) / max(len(ok), 1),
            pass_rate=sum(t.verdict.passed for t in ok) / max(len(ok), 1),
            groups_sampled=len(sampled),
            groups_kept=len(kept),
            zero_variance_frac=silent / len(sampled) if sampled else 0.0,
            fill_rounds=rounds,
            verifier_errors=len(trajs) - len(ok),
            **verifier_latency_metrics([t.verdict for t in trajs]),
            completion_tokens=sum(len(t.completion.token_ids) for t in trajs) / max(len(trajs), 1),
            rollout_s=t1 - t0,
            learn_s=t2 - t1,
            step_s=t2 - t0,
        )
        self._record(metrics, sampled, kept)
        result = StepResult(self.step, metrics)
        if self.on_step:
            self.on_step(result)
        return result

    def _record(self, metrics: dict[str, float], sampled: list[Group], kept: list[Group]) -> None:
        kept_ids = {id(g) for g in kept}
        group_rows = [(i, g.task.id, g.rewards, id(g) in kept_ids) for i, g in enumerate(sampled)]
        sample_rows = []
        if self.cfg.train.store_samples:
            for i, g in enumerate(sampled):
                for j, t in enumerate(g.trajectories):
                    v, c = t.verdict, t.completion
                    sample_rows.append(
                        (i, j, g.task.id, c.text, len(c.token_ids), c.finish_reason.value, v.score, int(v.passed),
                         v.status.value, v.verifier, v.details, c.policy_version, v.latency_s)
                    )
        self.store.log_step(self.step, metrics, group_rows, sample_rows)
        if self.writer is not None:
            for k, v in metrics.items():
                self.writer.add_scalar(f"train/{k}", v, self.step)

    def evaluate(self) -> dict[str, float]:
        """Held-out greedy accuracy (and per-task results) at the current step, stored."""
        if not self.held_out:
            warnings.warn(f"{self.source.name}: no held-out tasks; evaluation skipped (raise tasks.held_out_fraction)")
            return {}
        from posttrain.eval.training import eval_during_training, new_failures

        res = evaluate_accuracy(self.engine, self.held_out, self.verifier, self.cfg.sampling.max_tokens)
        metrics = {"greedy_accuracy": res.accuracy, "n_tasks": res.n_tasks, "verifier_errors": res.n_errors,
                   "regressed_tasks": len(new_failures(self.store, "held_out", res.per_task, self.step))}
        self.store.log_eval(self.step, "held_out", metrics, res.per_task)
        for name, suite in self._eval_suites().items():
            suite_metrics = eval_during_training(self.engine, suite, name, self.store, self.step, self.cfg.sampling.max_tokens)
            metrics[f"{name}/pass@1"] = suite_metrics["pass@1"]
            metrics[f"{name}/regressed_tasks"] = suite_metrics["regressed_tasks"]
        if self.writer is not None:
            for key, value in metrics.items():
                if key == "greedy_accuracy" or key.endswith(("pass@1", "regressed_tasks")):
                    self.writer.add_scalar(f"eval/{key}", value, self.step)
        if self.on_eval:
            self.on_eval(self.step, metrics)
        return metrics

    def _eval_suites(self) -> dict:
        """The configured held-out suites, loaded once (eval name `suite:<spec>` -> Suite)."""
        if not hasattr(self, "_suites"):
            from posttrain.tasks.suites import load_suite

            opts = {"limit": self.cfg.train.eval_suite_limit} if self.cfg.train.eval_suite_limit else {}
            self._suites = {f"suite:{spec}": load_suite(spec, **opts) for spec in self.cfg.train.eval_suites}
        return self._suites

    def checkpoint(self) -> Path:
        state = {
            "step": self.step,
            "learner": self.learner.state_dict(),
            "curriculum": self.curriculum.state_dict(),
            "engine_rng": self.engine.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "informative_rate": self.informative_rate,
        }
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
        try:
            while self.step < last:
                self.train_step()
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    final = self.evaluate()
                if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                    self.checkpoint()
            if self.step == cfg.steps and not (cfg.eval_every and self.step % cfg.eval_every == 0):
                final = self.evaluate()
            self.store.set_info(status="finished" if self.step == cfg.steps else "stopped", last_step=self.step)
        finally:
            if self.writer is not None:
                self.writer.flush()
        return TrainResult(self.run_dir, self.step, time.perf_counter() - start, final)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.store.close()

    def final_model_dir(self) -> Path:
        """Save the current weights as an HF checkpoint at <run>/final and return it."""
        from posttrain.models.io import save_model

        out = self.run_dir / "final"
        save_model(self.model, self.tokenizer, out)
        (out / "posttrain.json").write_text(json.dumps({"step": self.step}))
        return out
