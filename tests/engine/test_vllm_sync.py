"""The vLLM weight-sync protocol against a fake `vllm` module (no GPU needed): versions, adapter names and ids,
prefix-cache resets, sleep/wake, and the engine built from `[engine] kind = "vllm"` with TIS on."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace

import pytest
import torch

from posttrain.engine.remote.vllm_engine import AdapterSpec, VLLMEngine, WeightSyncError, adapter_name
from posttrain.models import load_model
from posttrain.types import SamplingParams


@dataclass
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


class FakeLLM:
    """Stands in for `vllm.LLM`: records every call the sync protocol makes."""

    instances: list[FakeLLM] = []

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.events: list[tuple] = []
        self.loaded: dict | None = None
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(load_weights=self._record)))
        self.worker = worker
        FakeLLM.instances.append(self)

    def _record(self, weights):
        self.loaded = dict(weights)
        self.events.append(("load", len(self.loaded)))

    def generate(self, prompts, sampling_params, use_tqdm=True, lora_request=None):
        self.events.append(("generate", None if lora_request is None else (lora_request.lora_name, lora_request.lora_int_id)))
        out = SimpleNamespace(index=0, text="7", token_ids=[7], logprobs=[{7: SimpleNamespace(logprob=-0.1)}],
                              finish_reason="stop")
        return [SimpleNamespace(outputs=[out] * sampling_params["n"]) for _ in prompts]

    def collective_rpc(self, method, args=()):
        return [method(self.worker, *args)]

    def reset_prefix_cache(self):
        self.events.append(("reset",))

    def sleep(self, level=1):
        self.events.append(("sleep", level))

    def wake_up(self):
        self.events.append(("wake",))


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


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = lambda **kw: kw
    lora, request = ModuleType("vllm.lora"), ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    FakeLLM.instances.clear()
    return vllm


@pytest.mark.slow
def test_full_weight_sync_per_version(fake_vllm, tiny_model_dir):
    engine = VLLMEngine(tiny_model_dir)
    llm = FakeLLM.instances[-1]
    model, _ = load_model(tiny_model_dir)
    for version in (1, 2):
        engine.load_weights(model.state_dict(), version)
        assert engine.generate(["1+1="], SamplingParams(n=2))[0][0].policy_version == version
    assert llm.loaded is not None and set(llm.loaded) == set(model.state_dict())
    assert [e[0] for e in llm.events] == ["load", "reset", "generate", "load", "reset", "generate"]
    assert engine.resets == 2
    with pytest.raises(WeightSyncError, match="older"):
        engine.load_weights(model.state_dict(), 1)
    from posttrain.models.lora import apply_lora

    apply_lora(model, r=2, alpha=4)
    with pytest.raises(WeightSyncError, match="LoRA"):  # never half-loaded under the wrong names
        engine.load_weights(model.state_dict(), 3)


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
        seen.append(llm.events[-1][1])
        # what vLLM is pointed at is this version's adapter, in peft's format
        with real_cuda_check():
            fresh, _ = load_model(tiny_model_dir)
            loaded = peft.PeftModel.from_pretrained(fresh, engine.lora_request.lora_path)
        b = [p for n, p in loaded.named_parameters() if ".lora_B." in n]
        assert b and all(torch.allclose(p, torch.full_like(p, 0.01 * version)) for p in b)
    assert llm.events[0] == ("generate", None)
    assert seen == [(adapter_name(v), v + 1) for v in (1, 2, 3)]
    assert len({name for name, _ in seen}) == 3 and len({i for _, i in seen}) == 3
    assert [e for e in llm.events if e[0] == "reset"] == [("reset",)] * 3
    assert llm.loaded is None  # adapters only: the base weights never moved


def test_sleep_and_wake_around_training(fake_vllm, tiny_model_dir):
    engine = VLLMEngine(tiny_model_dir, enable_sleep_mode=True)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["enable_sleep_mode"] is True
    engine.sleep(level=2)
    engine.sleep(level=2)  # already asleep: once
    model, _ = load_model(tiny_model_dir)
    engine.load_weights(model.state_dict(), 1)  # wakes first, then loads
    engine.sleep()
    engine.generate(["x"], SamplingParams())
    assert [e[0] for e in llm.events] == ["sleep", "wake", "load", "reset", "sleep", "wake", "generate"]


def test_engine_kind_vllm_builds_from_the_learners_weights_with_tis_on(fake_vllm, tiny_config):
    from posttrain.rl.build import build

    cfg = tiny_config.model_copy(update={"engine": tiny_config.engine.model_copy(update={"kind": "vllm"})})
    parts = build(cfg, store=False)
    assert isinstance(parts.engine, VLLMEngine) and not parts.shares_weights
    assert parts.learner.importance_sampling  # auto: the sampler is not the learner's module
    llm = FakeLLM.instances[-1]
    with real_cuda_check():
        reloaded, _ = load_model(llm.kwargs["model"])  # vLLM starts from the learner's exact weights
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in parts.model.state_dict().items())
