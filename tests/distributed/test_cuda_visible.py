"""The CPU distributed runs on a machine where CUDA is visible: the process group is gloo (chosen from the run's
device, not the machine), no rank calls `torch.cuda.set_device`, and FSDP shards on a CPU mesh.

Every process of the torchrun launch (launcher and ranks) imports a `sitecustomize` that makes torch report a GPU
(`torch.cuda.is_available` and the accelerator say cuda) and turns `set_device` and an NCCL group into errors, so
the code that consulted the machine instead of the run fails here exactly as it would on a GPU host.
"""

from __future__ import annotations

import os

import pytest
from test_train_ranks import _toml

from _harness.equivalence import run_equivalence
from posttrain.distributed.data_parallel import backend_for

SITECUSTOMIZE = '''
import torch
import torch.distributed as dist

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch._C._get_accelerator = lambda: torch.device("cuda")


def _no_set_device(*args, **kwargs):
    raise RuntimeError("torch.cuda.set_device called in a CPU run")


torch.cuda.set_device = _no_set_device
_init = dist.init_process_group


def _init_cpu_only(backend=None, *args, **kwargs):
    if backend is None or "nccl" in str(backend):
        raise RuntimeError(f"process group backend {backend!r} in a CPU run: want gloo")
    return _init(backend, *args, **kwargs)


dist.init_process_group = _init_cpu_only
'''


@pytest.fixture
def cuda_visible(tmp_path, monkeypatch):
    """Child Python processes believe a GPU is present (see the module docstring)."""
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    return tmp_path


def test_the_backend_follows_the_runs_device():
    assert backend_for("cpu") == "gloo" and backend_for("cuda") == "nccl" and backend_for("cuda:1") == "nccl"


@pytest.mark.slow
def test_the_fake_gpu_catches_the_old_machine_based_choice(cuda_visible):
    """Planted failure: choosing the backend from `torch.cuda.is_available()` (the old code) under the fake GPU
    asks for NCCL and `set_device`, which the launch refuses."""
    import subprocess
    import sys

    from _harness.equivalence import rank_env

    old = ("import os, torch; os.environ.update(RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT='29533');"
           "backend = 'nccl' if torch.cuda.is_available() else 'gloo';"
           "torch.cuda.set_device(0) if backend == 'nccl' else None;"
           "torch.distributed.init_process_group(backend)")
    proc = subprocess.run([sys.executable, "-c", old], env=rank_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "set_device called in a CPU run" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_cpu_ranks_update_like_one_process_with_cuda_visible(cuda_visible, strategy):
    r = run_equivalence(strategy, nproc=2, steps=1)
    assert r["world"] == 2 and r["max_grad_diff"] <= 1e-6 and r["max_weight_diff"] <= 1e-6


@pytest.mark.slow
def test_posttrain_train_ranks_join_gloo_with_cuda_visible(cuda_visible, tiny_model_dir, tmp_path):
    """The training loop's own group (`from_env(rl.device)` through the trainer) under the fake GPU."""
    from _harness.equivalence import run_train_equivalence

    config = tmp_path / "run.toml"
    config.write_text(_toml(tiny_model_dir, tmp_path / "runs", "eq", 1))
    r = run_train_equivalence(config, nproc=2)
    assert r["world"] == 2 and r["updates"] == 1 and r["replica_max_diff"] == 0.0
