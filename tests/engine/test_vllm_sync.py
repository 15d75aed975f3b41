"""The vLLM weight-sync protocol against a fake vLLM V1 (tests/fake_vllm.py: the engine core in another process,
msgpack-encoded RPC with functions refused and tensors decoded as lists): bucketed weights through the worker
extension's named method, versions, adapter names and ids, prefix-cache resets, sleep/wake around an update,
bf16 by default, merged agent calls, and the engine built from `[engine] kind = "vllm"` with TIS on."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest
import torch

from fake_vllm import FakeLLM
from posttrain.engine.remote import weight_sync
from posttrain.engine.remote.vllm_engine import WORKER_EXTENSION, AdapterSpec, VLLMEngine, WeightSyncError, adapter_name
from posttrain.engine.remote.weight_sync import plan_buckets, unique_tensors
from posttrain.models import load_model
from posttrain.types import SamplingParams

REAL_CUDA_AVAILABLE = torch.cuda.is_available


@contextlib.contextmanager
def real_cuda_check():
    """The fake says a GPU exists; reading files back (safetensors pins memory when it believes one) must not."""
    fake = torch.cuda.is_available
    torch.cuda.is_available = REAL_CUDA_AVAILABLE
    try:
        yield
    finally:
        torch.cuda.is_available = fake


def _kinds(llm: FakeLLM) -> list[str]:
    return [e[0] for e in llm.events()]


@pytest.mark.slow
def test_the_fake_refuses_what_vllm_v1_refuses(fake_vllm, tiny_model_dir):
    """The old sync sent a function with the state dict through `collective_rpc`: V1's encoder refuses the
    function, and a tensor argument reaches the worker as a list, not a tensor."""
    engine = VLLMEngine(tiny_model_dir)
    llm = FakeLLM.instances[-1]
    model, _ = load_model(tiny_model_dir)
    weights = list(model.state_dict().items())

    def load_on_worker(worker, weights):  # what the old VLLMEngine sent
        worker.model_runner.model.load_weights(weights=weights)

    with pytest.raises(TypeError, match="not serializable"):
        llm.collective_rpc(load_on_worker, args=(weights,))
    assert llm.collective_rpc("fake_arg_types", args=(weights[0][1], "x")) == [["list", "str"]]
    assert engine.policy_version == 0


@pytest.mark.slow
def test_full_weight_sync_in_buckets_per_version(fake_vllm, tiny_model_dir, monkeypatch):
    # the bucket files this engine writes: other processes on the machine (another pytest-xdist worker) may have
    # their own in /dev/shm at the same moment, so the check below reads these, not the directory
    written: list[str] = []
    enter = weight_sync._BucketHandle.__enter__

    def recorded(self):
        handle = enter(self)
        written.append(self.path)
        return handle

    monkeypatch.setattr(weight_sync._BucketHandle, "__enter__", recorded)
    engine = VLLMEngine(tiny_model_dir, bucket_bytes=16 << 10)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["worker_extension_cls"] == WORKER_EXTENSION and llm.kwargs["dtype"] == "bfloat16"
    model, _ = load_model(tiny_model_dir)
    state = dict(unique_tensors(model.state_dict()))  # the tiny model ties lm_head to the embedding: sent once
    assert len(state) == len(model.state_dict()) - 1
    fp32_bytes = sum(t.numel() * t.element_size() for t in state.values())
    for version in (1, 2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        engine.load_weights(model.state_dict(), version)
        assert engine.generate(["1+1="], SamplingParams(n=2))[0][0].policy_version == version
    sync = engine.last_sync
    assert sync is not None and sync.transport == "host" and sync.tensors == len(state)
    assert sync.buckets > 1 and sync.bytes == fp32_bytes // 2  # bf16 on the wire
    # the worker holds this version's weights, rounded to vLLM's bf16, under every name
    loaded = llm.collective_rpc("fake_loaded")[0]
    assert set(loaded) == set(state)
    for name, t in unique_tensors(model.state_dict()):
        dtype, shape, total = loaded[name]
        assert dtype == "bfloat16" and shape == list(t.shape)
        assert total == pytest.approx(float(t.to(torch.bfloat16).double().sum()), rel=1e-9, abs=1e-9)
    # no message carried the weights: each holds names, shapes, offsets and a file name
    assert max(llm.messages) < min(fp32_bytes // 10, 64 << 10)
    # every bucket went through a file in memory (/dev/shm), and every one is gone
    assert len(written) == 2 * sync.buckets and all(p.startswith("/dev/shm/posttrain-weights-") for p in written)
    assert not any(os.path.exists(p) for p in written)
    kinds = _kinds(llm)
    per_version = ["load"] * sync.buckets + ["reset", "generate"]
    assert kinds == per_version * 2
    assert engine.resets == 2
    with pytest.raises(WeightSyncError, match="older"):
        engine.load_weights(model.state_dict(), 1)
    from posttrain.models.lora import apply_lora

    apply_lora(model, r=2, alpha=4)
    with pytest.raises(WeightSyncError, match="LoRA"):  # never half-loaded under the wrong names
        engine.load_weights(model.state_dict(), 3)


def test_a_tied_weight_travels_once():
    emb = torch.randn(5, 3)
    state = {"model.embed_tokens.weight": emb, "model.norm.weight": torch.ones(3), "lm_head.weight": emb}
    assert [n for n, _ in unique_tensors(state)] == ["model.embed_tokens.weight", "model.norm.weight"]
    state["lm_head.weight"] = emb.clone()  # untied: both go
    assert len(unique_tensors(state)) == 3


def test_buckets_hold_at_most_the_limit_and_keep_order():
    assert plan_buckets([4, 4, 4, 10, 1], 8) == [[0, 1], [2], [3], [4]]
    assert plan_buckets([], 8) == []
    with pytest.raises(ValueError):
        plan_buckets([1], 0)


@pytest.mark.slow
def test_lora_sync_names_a_new_adapter_every_version(fake_vllm, tiny_model_dir, tmp_path):
    peft = pytest.importorskip("peft")
    from posttrain.models.lora import apply_lora

    model, _ = load_model(tiny_model_dir)
    apply_lora(model, r=2, alpha=4, targets=["q_proj", "v_proj"])
    engine = VLLMEngine(tiny_model_dir, lora=AdapterSpec(2, 4.0, ("q_proj", "v_proj")), adapter_dir=tmp_path / "ad")
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["enable_lora"] and llm.kwargs["max_lora_rank"] >= 2
    engine.generate(["x"], SamplingParams())  # before any update: the base weights, no adapter
    seen = []
    for version in (1, 2, 3):
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_B." in name:
                    p.fill_(0.01 * version)
        engine.load_weights(model.state_dict(), version)
        engine.generate(["x"], SamplingParams())
        seen.append(tuple(llm.events()[-1][1]))
        # what vLLM is pointed at is this version's adapter, in peft's format
        with real_cuda_check():
            fresh, _ = load_model(tiny_model_dir)
            loaded = peft.PeftModel.from_pretrained(fresh, engine.lora_request.lora_path)
        b = [p for n, p in loaded.named_parameters() if ".lora_B." in n]
        assert b and all(torch.allclose(p, torch.full_like(p, 0.01 * version)) for p in b)
    events = llm.events()
    assert events[0] == ("generate", None)
    assert seen == [(adapter_name(v), v + 1) for v in (1, 2, 3)]
    assert len({name for name, _ in seen}) == 3 and len({i for _, i in seen}) == 3
    assert [e for e in events if e[0] == "reset"] == [("reset",)] * 3
    assert llm.collective_rpc("fake_loaded") == [{}]  # adapters only: the base weights never moved


@pytest.mark.slow
def test_sleep_and_wake_around_training(fake_vllm, tiny_model_dir):
    engine = VLLMEngine(tiny_model_dir, enable_sleep_mode=True)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["enable_sleep_mode"] is True
    engine.sleep(level=1)
    engine.sleep(level=1)  # already asleep: once
    model, _ = load_model(tiny_model_dir)
    engine.load_weights(model.state_dict(), 1)  # the weights' memory, the new weights, then the KV cache
    engine.sleep()
    engine.generate(["x"], SamplingParams())
    assert llm.events() == [("sleep", 1), ("wake", ["weights"]), ("load", len(unique_tensors(model.state_dict()))),
                            ("wake", ["kv_cache"]), ("reset",), ("sleep", 1), ("wake", None), ("generate", None)]


@pytest.mark.slow
def test_sleep_without_sleep_mode_is_a_one_line_error(fake_vllm, tiny_model_dir):
    engine = VLLMEngine(tiny_model_dir)
    with pytest.raises(WeightSyncError, match="enable_sleep_mode"):
        engine.sleep()


@pytest.mark.slow
def test_concurrent_agent_calls_merge_into_batched_generate_calls(fake_vllm, tiny_model_dir):
    engine = VLLMEngine(tiny_model_dir)
    llm = FakeLLM.instances[-1]
    assert engine.max_concurrency > 1

    async def episodes():
        return await asyncio.gather(*(engine.agenerate([f"{i}+1="], SamplingParams(n=2, max_tokens=4))
                                      for i in range(12)))

    results = asyncio.run(episodes())
    merged = engine.merger().stats.engine_calls
    engine.close()
    assert [len(r) for r in results] == [1] * 12 and all(len(r[0]) == 2 for r in results)
    calls = _kinds(llm).count("generate")
    assert 1 <= calls < 12  # merged, not one call per episode
    assert merged == calls


@pytest.mark.slow
def test_engine_kind_vllm_builds_from_the_learners_weights_with_tis_on(fake_vllm, tiny_config):
    from posttrain.rl.build import build

    cfg = tiny_config.model_copy(update={"engine": tiny_config.engine.model_copy(update={"kind": "vllm"})})
    parts = build(cfg, store=False)
    assert isinstance(parts.engine, VLLMEngine) and not parts.shares_weights
    assert parts.learner.importance_sampling  # auto: the sampler is not the learner's module
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["dtype"] == "bfloat16" and llm.kwargs["worker_extension_cls"] == WORKER_EXTENSION
    with real_cuda_check():
        reloaded, _ = load_model(llm.kwargs["model"])  # vLLM starts from the learner's exact weights
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in parts.model.state_dict().items())
