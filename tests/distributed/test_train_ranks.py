"""`posttrain train` under torchrun: each rank rolls out its share, the run equals one process on the same batches,
rank 0 alone reports and stores, and a resume continues every rank exactly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from _harness.equivalence import rank_env, run_train_equivalence
from posttrain.config import ConfigError, load_config
from posttrain.distributed.data_parallel import DataParallel, device_for, interleave
from posttrain.rl.build import for_rank
from posttrain.store.checkpoints import checkpoint_dir


def _toml(tiny_model_dir, run_dir, name: str, steps: int, **extra: str) -> str:
    sections = {
        "model": {"path": f'"{tiny_model_dir}"'},
        "tasks": {"digits": "1"},
        "sampling": {"n": "4", "max_tokens": "4"},
        # a wide numeric tolerance: the random tiny model earns mixed rewards, so every step updates
        "reward": {"verifier": '"numeric"', "tolerance": "4.0"},
        "train": {"steps": str(steps), "prompts_per_step": "4", "checkpoint_every": "0"},
        "eval": {"size": "20", "every": "2"},
        "rl": {"lr": "0.0001"},
    }
    for key, value in extra.items():
        section, field = key.split("__")
        sections.setdefault(section, {})[field] = value
    lines = [f'name = "{name}"', f'run_dir = "{run_dir}"', "tensorboard = false"]
    for section, fields in sections.items():
        lines += [f"[{section}]", *(f"{k} = {v}" for k, v in fields.items())]
    return "\n".join(lines) + "\n"


def test_interleave_inverts_every_ranks_shard():
    for world in (1, 2, 3):
        for total in range(8):
            items = list(range(total))
            parts = [DataParallel(r, world, r).shard(items) for r in range(world)]
            assert interleave(parts, total) == items
    with pytest.raises(ValueError, match="results for 4 items"):
        interleave([[0, 2], [1]], 4)


def test_a_bare_cuda_device_becomes_the_ranks_own_gpu():
    assert device_for("cuda", 3) == "cuda:3"
    assert device_for("cuda:1", 3) == "cuda:1" and device_for("cpu", 3) == "cpu"


def test_what_cannot_run_over_ranks_is_a_one_line_config_error():
    rank = DataParallel(1, 2, 1)
    cfg = load_config(None, ["rl.device='cuda'", "engine.device='cuda'"])
    mapped = for_rank(cfg, rank)
    assert mapped.rl.device == "cuda:1" and mapped.engine.device == "cuda:1"
    with pytest.raises(ConfigError, match="async") as exc:
        for_rank(load_config(None, ["rollout.mode='async'"]), rank)
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="checkpoint_every"):
        for_rank(load_config(None, ["rl.data_parallel='fsdp'", "train.checkpoint_every=10"]), rank)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.slow
def test_two_ranks_train_like_one_process_on_the_same_batches(tiny_model_dir, tmp_path, strategy):
    config = tmp_path / "run.toml"
    config.write_text(_toml(tiny_model_dir, tmp_path / "runs", "eq", 3, rl__data_parallel=f'"{strategy}"'))
    r = run_train_equivalence(config, nproc=2)
    assert r["world"] == 2 and r["strategy"] == strategy and r["steps"] == 3 and r["updates"] == 3
    assert r["moved"] > 1e-5  # the updates moved the weights ...
    # ... exactly as one process updating on the gathered batches would (Adam's normalisation turns float noise
    # in near-zero gradients into differences of up to lr x 1e-2: 2.4e-7 measured at lr 1e-4)
    assert r["max_weight_diff"] <= 1e-6
    assert r["replica_max_diff"] == 0.0  # every rank ends with the same weights
    # every stored group was rolled out exactly once, by one of the ranks, and both ranks did their share
    ranks = r["rank_tasks"]
    assert sorted(ranks[0] + ranks[1]) == sorted(r["sampled_tasks"])
    assert len(ranks[0]) > 0 and len(ranks[1]) > 0 and abs(len(ranks[0]) - len(ranks[1])) <= 3 * 4


def _train(config, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "posttrain.cli",
           "train", str(config), *args]
    return subprocess.run(cmd, env=rank_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_posttrain_train_under_torchrun_reports_once_and_resumes_every_rank_exactly(tiny_model_dir, tmp_path):
    from posttrain.models.io import load_model
    from posttrain.store.run_store import RunStore

    runs = tmp_path / "runs"
    extra = {"train__checkpoint_every": "2", "rl__lr_schedule": '"constant"'}
    whole, part = tmp_path / "whole.toml", tmp_path / "part.toml"
    whole.write_text(_toml(tiny_model_dir, runs, "whole", 4, **extra))
    part.write_text(_toml(tiny_model_dir, runs, "part", 2, **extra))
    done = _train(whole)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(reports) == 1  # rank 0 alone reports
    report = json.loads(reports[0])
    assert report["replica_max_diff"] == 0.0
    with RunStore(runs / "whole" / "run.sqlite") as store:
        steps = store.steps()
        assert [s for s, _ in steps] == [1, 2, 3, 4]
        assert all(m["data_parallel_world"] == 2.0 and m["groups_kept"] > 0 for _, m in steps)
        assert store.info()["data_parallel"] == {"world": 2, "strategy": "ddp"}
    state = torch.load(checkpoint_dir(runs / "whole", 4) / "trainer_state.pt", weights_only=False)
    ranks = state["extra"]["ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["engine_rng"], ranks[1]["engine_rng"])

    first = _train(part)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = _train(part, "--resume", "--set", "train.steps=4")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, _ = load_model(runs / "whole" / "final")
    b, _ = load_model(runs / "part" / "final")
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name  # stopped at 2 and resumed on both ranks == 4 steps straight
