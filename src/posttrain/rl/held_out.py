"""The trainer's held-out evaluation: every domain's selection half and `eval.suites`, best/ and the replicas.

Covers: `HeldOutEvaluation(settings, ...)`, built from the run's `[eval]` section and the data-parallel mode;
`evaluate(step)` (each suite greedily through `eval.run.run_eval`, greedy episodes
for an agent suite, on the run's own `Sandboxes`; responses stored like any eval; the metrics the
trainer reports: `greedy_accuracy` (the mean over domains), per-suite pass@1 and regressed tasks, an agent
suite's turn figures), best/ kept on the configured metric with a warning on a sustained drop
(`rl/selection.py`, pure), and `check_replicas` (DDP: whether every rank still holds the same weights).
Does not cover: when to evaluate and what the monitors make of it (the trainer), the harness itself (`eval/`).
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posttrain.config import EvalConfig
from posttrain.eval.training import evaluate_in_training
from posttrain.rl.backends import DataParallel
from posttrain.rl.build import Components
from posttrain.rl.run_log import RunLog
from posttrain.rl.selection import Best, HeldOutRegression, observe


@dataclass
class HeldOutEvaluation:
    settings: EvalConfig  # the run's `[eval]`: what selects best/ and when the early warning speaks
    parts: Components
    log: RunLog
    dp: DataParallel
    run_dir: Path
    data_parallel: str = "ddp"  # `rl.data_parallel`: whether the ranks hold whole replicas to compare
    best: Best | None = None

    def evaluate(self, step: int) -> dict[str, float] | None:
        """Rank 0's evaluation at `step` (None, warned, when no domain has held-out tasks)."""
        if not self.parts.held_out:
            warnings.warn(f"{self.parts.domains[0].name}: no held-out tasks; evaluation skipped (raise "
                          "held_out_fraction)", stacklevel=3)
            return None
        max_tokens = self.parts.params.max_tokens
        metrics: dict[str, float] = {}
        accs = []
        for i, suite in enumerate(self.parts.held_out):
            name = "held_out" if i == 0 else f"held_out:{suite.name}"
            m = self._suite(suite, name, step, max_tokens)
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
            suite_metrics = self._suite(suite, name, step, max_tokens)
            metrics[f"{name}/pass@1"] = suite_metrics["pass@1"]
            metrics[f"{name}/regressed_tasks"] = suite_metrics["regressed_tasks"]
        self._track_best(step, metrics)
        return metrics

    def _suite(self, suite: Any, name: str, step: int, max_tokens: int) -> dict[str, float]:
        """One suite's in-training evaluation: greedy responses, or greedy episodes for an agent suite."""
        p = self.parts  # code verifiers and agent sessions run where the training rollouts' do
        return evaluate_in_training(p.engine, suite, name, self.log.store, step, max_tokens, p.renderer, p.sandboxes)

    def _track_best(self, step: int, metrics: dict[str, float]) -> None:
        """Keep best/ (the best held-out metric so far, ties to the later step) and warn on a sustained drop."""
        cfg = self.settings
        value = metrics.get(cfg.best_metric)
        if value is None:
            return
        self.best, improved, regressing = observe(self.best, step, value, cfg.warn_drop, cfg.warn_patience)
        best = self.best
        if improved:
            if cfg.keep_best:
                self._save_best(step)
            self.log.store.set_info(best={"step": best.step, "metric": cfg.best_metric, "value": best.value})
        metrics.update(best=best.value, best_step=best.step, regressing=float(regressing))
        if regressing:
            message = (f"held-out {cfg.best_metric} {value:.3f} has been more than {cfg.warn_drop:g} below its best "
                       f"{best.value:.3f} (step {best.step}) for {best.below} evaluations; best/ keeps the best model")
            self.log.alert(step, "held_out_regression", message, HeldOutRegression, stacklevel=4,
                           metric=cfg.best_metric, value=value, best=best.value, best_step=best.step)

    def _save_best(self, step: int) -> None:
        from posttrain.models.io import save_model

        out, tmp = self.run_dir / "best", self.run_dir / "best.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        save_model(self.parts.whole_model or self.parts.model, self.parts.tokenizer, tmp)
        (tmp / "posttrain.json").write_text(json.dumps({"step": step, "metric": self.settings.best_metric,
                                                        "value": self.best.value if self.best else None}))
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)

    def check_replicas(self, step: int) -> float | None:
        """DDP: whether every rank's replica still holds the same weights (a checksum over every parameter); a
        difference is warned and kept in the store's alerts. The largest difference from rank 0 (None: FSDP)."""
        if self.data_parallel != "ddp":
            return None
        with torch.no_grad():
            checksum = sum(float(p.double().sum()) + float(p.double().abs().sum()) for p in self.parts.model.parameters())
        same, spread = self.dp.all_equal(checksum)
        if not same and self.dp.lead:
            message = f"the {self.dp.world} ranks' weights differ at step {step} (checksum spread {spread:.3g})"
            self.log.alert(step, "replica_divergence", message, RuntimeWarning, stacklevel=4)
        return spread
