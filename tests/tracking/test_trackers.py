"""Trackers: one call per step with the same names for every back end; TensorBoard, W&B (offline), MLflow (file
store) and trackio (local database) each hold what training logged, read back through their own APIs."""

from __future__ import annotations

import json
import time

import pytest

from posttrain.engine.extras import MissingExtraError
from posttrain.tracking import Trackers, build_trackers, mlflow_name

METRICS = {1: {"train/reward": 0.25, "train/entropy": 0.5}, 2: {"train/reward": 0.5, "train/entropy": 0.4,
                                                                "eval/held_out:add/pass@1": 0.75}}


class Recorder:
    def __init__(self):
        self.calls, self.closed = [], False

    def log(self, metrics, step):
        self.calls.append((step, dict(metrics)))

    def close(self):
        self.closed = True


def feed(trackers: Trackers) -> None:
    for step, metrics in METRICS.items():
        for k, v in metrics.items():
            trackers.add_scalar(k, v, step)
    trackers.close()


def test_scalars_are_gathered_into_one_call_per_step():
    a, b = Recorder(), Recorder()
    feed(Trackers([a, b]))
    assert a.calls == b.calls == [(1, METRICS[1]), (2, METRICS[2])] and a.closed and b.closed


def test_mlflow_names_spell_out_what_mlflow_forbids():
    assert mlflow_name("eval/held_out:add/pass@1") == "eval/held_out:add/pass_at_1"
    assert mlflow_name("train/agent/status/ok") == "train/agent/status/ok"


def test_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    feed(build_trackers([], True, tmp_path, "r", "p", {}))
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == set(METRICS[2])
    assert [(e.step, e.value) for e in acc.Scalars("train/reward")] == [(1, 0.25), (2, 0.5)]


def wandb_history(path) -> list[dict[str, float]]:
    """The history rows of an offline W&B run file: its records in the LevelDB log format (32 KiB blocks, 7-byte
    record headers: crc, length, type full/first/middle/last) after a 7-byte file header, each a protobuf `Record`."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, records, partial = path.read_bytes(), 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            records.append(partial + chunk)
            partial = b""
        elif kind in (2, 3):
            partial += chunk
    rows = []
    for raw in records:
        r = pb.Record()
        r.ParseFromString(raw)
        if r.WhichOneof("record_type") == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
            rows.append({k: v for k, v in items.items() if not k.startswith("_")})
    return rows


@pytest.mark.slow
def test_wandb_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    feed(build_trackers(["wandb"], False, tmp_path, "r", "proj", {"rl": {"lr": 1e-5}}))
    (run_file,) = tmp_path.glob("wandb/offline-run-*/*.wandb")
    deadline = time.monotonic() + 20
    while len(rows := wandb_history(run_file)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # W&B's service process may still be writing the file when finish() returns on a loaded machine
    assert rows == [METRICS[1], METRICS[2]]  # the same names and values as every other back end


@pytest.mark.slow
def test_mlflow_file_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from mlflow.tracking import MlflowClient

    trackers = build_trackers(["mlflow"], False, tmp_path, "r", "proj", {"rl": {"lr": 1e-5}})
    run_id = trackers.trackers[0].run_id
    feed(trackers)
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train/reward")] == [(1, 0.25), (2, 0.5)]
    run = client.get_run(run_id)
    assert set(run.data.metrics) == {mlflow_name(k) for k in METRICS[2]} and run.data.params["rl.lr"] == "1e-05"
    assert run.info.status == "FINISHED"


@pytest.mark.slow
def test_trackio_local(tmp_path, monkeypatch):
    import sqlite3

    import trackio.sqlite_storage as storage

    monkeypatch.setattr(storage, "TRACKIO_DIR", tmp_path / "trackio", raising=False)
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    project = f"proj-{tmp_path.name}"
    feed(build_trackers(["trackio"], False, tmp_path, "r", project, {}))
    (db,) = [p for p in storage.SQLiteStorage.get_project_db_path(project).parent.glob(f"{project}.db")]
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT step, metrics FROM metrics WHERE run_name = 'r' ORDER BY step").fetchall()
    assert [(s, json.loads(m)) for s, m in rows] == [(1, METRICS[1]), (2, METRICS[2])]


def test_a_missing_extra_is_one_line(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb" or name.startswith("wandb."):
            raise ImportError("No module named 'wandb'", name="wandb")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    monkeypatch.delitem(__import__("sys").modules, "wandb", raising=False)
    with pytest.raises(MissingExtraError, match=r"pip install 'posttrain\[wandb\]'"):
        build_trackers(["wandb"], False, tmp_path, "r", "p", {})


@pytest.mark.slow
def test_training_feeds_every_tracker_the_same_names(tiny_config, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from posttrain.rl.trainer import Trainer

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = tiny_config.model_copy(update={"tensorboard": True, "trackers": ["mlflow"],
                                         "train": tiny_config.train.model_copy(update={"steps": 2}),
                                         "eval": tiny_config.eval.model_copy(update={"every": 0})})
    trainer = Trainer(cfg)
    trainer.run()
    trainer.close()
    acc = EventAccumulator(str(cfg.path / "tensorboard"))
    acc.Reload()
    tb = set(acc.Tags()["scalars"])
    client = MlflowClient(tracking_uri=(cfg.path / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("posttrain").experiment_id])
    assert {"train/reward", "train/pass_rate", "eval/greedy_accuracy"} <= tb
    assert set(run.data.metrics) == {mlflow_name(k) for k in tb}
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/reward")] == [1, 2]
