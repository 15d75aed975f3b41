"""Shared fixtures: tiny random models saved in HF format, built locally (never downloaded); how the suite runs in
two pytest-xdist workers (a temporary directory of each worker's own, the Ray tests on one worker)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tiny_models import make_tiny_model  # noqa: F401 - re-exported for tests that import it from here


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def tiny_config(tiny_model_dir, tmp_path):
    """A RunConfig that trains the tiny random model for a handful of fast steps."""
    from posttrain.config import load_config

    return load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"run_dir='{tmp_path / 'runs'}'",
            "name='smoke'",
            "tasks.digits=1",
            "sampling.n=4",
            "sampling.max_tokens=4",
            "train.steps=5",
            "train.prompts_per_step=4",
            "eval.size=20",
            "train.checkpoint_every=0",
            "tensorboard=false",
        ],
    )


_WORKER_TMP = pytest.StashKey[str]()


def pytest_configure(config):
    """Each pytest-xdist worker (and every process it starts) makes its temporary files in a directory of its own:
    tests that check what is left in /tmp (tests/sandbox/test_leftovers.py) must not see the other worker's
    (a render worker's or a chromium profile's directory, made while they run)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # short, and not `posttrain*`: Ray puts its sockets under $TMPDIR (108-byte limit on a socket's path)
        own = tempfile.mkdtemp(prefix=f"pytest-{worker}-")
        os.environ["TMPDIR"] = tempfile.tempdir = own
        config.stash[_WORKER_TMP] = own
        # One torch thread per worker, and in every process it starts (unless the caller set a count): two workers of
        # torch's default pool (a thread per core) beside the processes tests start oversubscribe two cores, and
        # OpenMP's waiting threads spin, so a training test ran several times slower than alone.
        import torch

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_unconfigure(config):
    own = config.stash.get(_WORKER_TMP, None)
    if own:
        shutil.rmtree(own, ignore_errors=True)


def pytest_collection_modifyitems(items):
    """Under pytest-xdist (`--dist loadgroup`), every test on the session's Ray cluster runs on one worker: one
    cluster (2 CPUs, its object store, a raylet and workers) for the run, not one per worker."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the whole session (2 CPUs, a capped object store, no dashboard)."""
    import os

    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    # Ray's default 90 s for the raylet to register was measured too short at load 20 on 2 cores
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "300")
    # address="local": always a fresh cluster of our own, never one another process on this machine started
    ray.init(address="local", num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True, scope="module")
def _torch_threads_restored():
    """A test module that changes torch's thread count must not leak it: later tests compare in-process runs
    with subprocess runs, and another thread count changes float reductions (fails them, far from the cause)."""
    import torch

    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture
def fake_vllm(monkeypatch):
    """`vllm` as tests/fake_vllm.py fakes vLLM V1 (engine core in another process), a GPU reported visible; every
    fake engine core started in the test is shut down after it."""
    import sys
    from types import ModuleType

    import torch

    from fake_vllm import FakeLLM, FakeLoRARequest

    vllm = ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = lambda **kw: kw
    lora, request = ModuleType("vllm.lora"), ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    FakeLLM.instances.clear()
    yield vllm
    for llm in FakeLLM.instances:
        llm.shutdown()
