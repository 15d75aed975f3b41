"""Experiment trackers behind one interface: TensorBoard (the default), Weights & Biases, MLflow, trackio.

Covers: `Tracker` (`log(metrics, step)`, `close()`), one adapter per back end, and `Trackers`, which the trainer
writes to with `add_scalar(tag, value, step)` like a TensorBoard `SummaryWriter` and which hands each step's
scalars to every back end in one call. Every back end gets the same names (`train/<metric>`, `eval/<metric>`),
except that MLflow forbids some characters (`@`): there `mlflow_name` spells them out (`pass@1` -> `pass_at_1`).
The optional back ends are imported only when configured (`trackers = ["wandb", ...]`, extras `wandb`, `mlflow`,
`trackio`); W&B's mode and MLflow's tracking URI come from their usual environment variables (`WANDB_MODE=offline`,
`MLFLOW_TRACKING_URI`; default: a file store in `<run>/mlruns`), trackio writes to its local database.
Does not cover: which metrics are logged (the trainer) or the run store (always written).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from posttrain.extras import require


class Tracker(Protocol):
    """Where a run's scalars go besides the run store.

    >>> class Printer:
    ...     def log(self, metrics, step): print(step, dict(metrics))
    ...     def close(self): pass
    """

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardTracker:
    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run named after the posttrain run (files under `<run>/wandb`; `WANDB_MODE=offline` keeps them local)."""

    def __init__(self, run_dir: Path, name: str, project: str, config: dict[str, Any], resume: bool) -> None:
        wandb = require("wandb", "wandb", "trackers = [\"wandb\"]")
        self.run = wandb.init(project=project, name=name, dir=str(run_dir), config=config,
                              id=_run_id(run_dir), resume="allow" if resume else None, reinit="create_new")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


_MLFLOW_BAD = re.compile(r"[^\w\-. :/]")


def mlflow_name(name: str) -> str:
    """A metric name as MLflow accepts it: `@` becomes `_at_`, any other forbidden character `_`."""
    return _MLFLOW_BAD.sub("_", name.replace("@", "_at_"))


class MlflowTracker:
    """An MLflow run (tracking URI from `MLFLOW_TRACKING_URI`, else a file store in `<run>/mlruns`)."""

    def __init__(self, run_dir: Path, name: str, project: str, config: dict[str, Any]) -> None:
        require("mlflow", "mlflow", "trackers = [\"mlflow\"]")
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # the run's own file store, which MLflow 3 keeps only on request (its server stores need SQLAlchemy)
            uri = (run_dir / "mlruns").resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(project)
        experiment = found.experiment_id if found else self.client.create_experiment(project)
        self.run_id = self.client.create_run(experiment, run_name=name).info.run_id
        flat = {k: str(v)[:500] for k, v in _flatten(config).items()}
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in flat.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(mlflow_name(k), float(v), now, step) for k, v in metrics.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TrackioTracker:
    """A trackio run (its local database; `trackio show` opens it)."""

    def __init__(self, name: str, project: str, config: dict[str, Any]) -> None:
        self.trackio = require("trackio", "trackio", "trackers = [\"trackio\"]")
        self.run = self.trackio.init(project=project, name=name, config=config)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _run_id(run_dir: Path) -> str:
    """A stable id per run directory, so a resumed run continues the same W&B run."""
    import hashlib

    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]


class Trackers:
    """Every configured tracker, written like a TensorBoard `SummaryWriter`: `add_scalar(tag, value, step)`.

    Scalars are gathered per step and handed to each back end as one call when the step changes (or on flush).
    """

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self.trackers = list(trackers)
        self.step: int | None = None
        self.pending: dict[str, float] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        if self.step is not None and step != self.step:
            self._emit()
        self.step = step
        self.pending[tag] = float(value)

    def _emit(self) -> None:
        if self.pending and self.step is not None:
            for t in self.trackers:
                t.log(self.pending, self.step)
        self.pending = {}

    def flush(self) -> None:
        self._emit()
        for t in self.trackers:
            if isinstance(t, TensorBoardTracker):
                t.flush()

    def close(self) -> None:
        self._emit()
        for t in self.trackers:
            t.close()


def build_trackers(kinds: Sequence[str], tensorboard: bool, run_dir: Path, name: str, project: str,
                   config: dict[str, Any], purge_step: int | None = None, resume: bool = False) -> Trackers:
    """The configured trackers of one run (TensorBoard first when on)."""
    out: list[Tracker] = []
    if tensorboard:
        out.append(TensorBoardTracker(run_dir / "tensorboard", purge_step))
    for kind in kinds:
        if kind == "wandb":
            out.append(WandbTracker(run_dir, name, project, config, resume))
        elif kind == "mlflow":
            out.append(MlflowTracker(run_dir, name, project, config))
        elif kind == "trackio":
            out.append(TrackioTracker(name, project, config))
        else:
            raise ValueError(f"unknown tracker {kind!r}: use wandb, mlflow or trackio")
    return Trackers(out)
