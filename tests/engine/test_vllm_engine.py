"""VLLMEngine: parameter mapping and output conversion with a stand-in LLM everywhere;
real generation where vLLM and a GPU exist."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

from posttrain.engine.extras import MissingExtraError
from posttrain.engine.remote._vllm_worker import WeightSyncExtension
from posttrain.engine.remote.vllm_engine import (
    GPUUnavailableError,
    VLLMEngine,
    completion_from_vllm,
    sampling_kwargs,
    vllm_prompt,
)
from posttrain.models import load_model
from posttrain.models.logprobs import token_logprobs
from posttrain.types import FinishReason, SamplingParams
from tiny_models import make_tiny_model


def test_sampling_params_map_to_vllms():
    kw = sampling_kwargs(SamplingParams(n=4, temperature=0.7, top_p=0.9, top_k=0, max_tokens=12, stop_token_ids=(2,), seed=5))
    assert kw == {
        "n": 4,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": -1,
        "max_tokens": 12,
        "seed": 5,
        "logprobs": 0,
        "stop_token_ids": [2],
    }
    assert sampling_kwargs(SamplingParams(top_k=20))["top_k"] == 20
    assert "stop_token_ids" not in sampling_kwargs(SamplingParams())
    assert vllm_prompt("12+3=") == "12+3="
    assert vllm_prompt([1, 2, 3]) == {"prompt_token_ids": [1, 2, 3]}


def _output(index, token_ids, lps, reason, text="t"):
    steps = [
        {t: SimpleNamespace(logprob=lp, rank=1), t + 1: SimpleNamespace(logprob=lp - 1, rank=2)} for t, lp in zip(token_ids, lps)
    ]
    return SimpleNamespace(index=index, text=text, token_ids=token_ids, logprobs=steps, finish_reason=reason)


def test_vllm_outputs_become_completions():
    c = completion_from_vllm(_output(0, [5, 9], [-0.5, -1.5], "length", "ab"), version=3)
    assert c.token_ids == [5, 9] and c.logprobs == [-0.5, -1.5] and c.text == "ab"
    assert c.finish_reason is FinishReason.LENGTH and c.policy_version == 3
    assert completion_from_vllm(_output(0, [2], [-0.1], "stop"), 0).finish_reason is FinishReason.STOP


class _Worker(WeightSyncExtension):
    """vLLM's worker with posttrain's extension mixed in, as `worker_extension_cls` makes it."""

    def __init__(self, load_weights) -> None:
        self.device = torch.device("cpu")
        self.model_runner = SimpleNamespace(model=SimpleNamespace(load_weights=load_weights))


class FakeLLM:
    """Stands in for `vllm.LLM` in this process: records calls, answers with canned outputs (tests/fake_vllm.py
    is the one with vLLM V1's separate engine process and msgpack channel)."""

    def __init__(self) -> None:
        self.generated, self.rpcs, self.resets = [], [], 0
        self.worker = _Worker(self._record)
        self.loaded = None

    def _record(self, weights):
        self.loaded = dict(weights)

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.generated.append((prompts, sampling_params))
        n = sampling_params["n"]
        return [SimpleNamespace(outputs=[_output(i, [7, 8], [-0.2, -0.3], "stop") for i in reversed(range(n))]) for _ in prompts]

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.rpcs.append(method)
        return [getattr(self.worker, method)(*args, **(kwargs or {}))]  # by name, as vLLM V1 calls it

    def reset_prefix_cache(self):
        self.resets += 1


def test_generate_and_load_weights_through_the_llm_api():
    llm = FakeLLM()
    engine = VLLMEngine.from_llm(llm, SimpleNamespace(SamplingParams=lambda **kw: kw))
    groups = engine.generate(["1+1=", [1, 2]], SamplingParams(n=2, max_tokens=2))
    assert [len(g) for g in groups] == [2, 2] and groups[0][0].logprobs == [-0.2, -0.3]
    assert llm.generated[0][0] == ["1+1=", {"prompt_token_ids": [1, 2]}]
    state = {"model.embed_tokens.weight": torch.arange(6.0).view(3, 2)}
    engine.load_weights(state, version=7)
    assert list(llm.loaded) == ["model.embed_tokens.weight"] and llm.resets == 1 and llm.rpcs == ["posttrain_load_bucket"]
    assert torch.equal(llm.loaded["model.embed_tokens.weight"], state["model.embed_tokens.weight"].to(torch.bfloat16))
    assert engine.generate(["x"], SamplingParams())[0][0].policy_version == 7
    (d0, d1) = engine.stream(["x"], SamplingParams(n=2))
    assert (d0.sample_index, d1.sample_index) == (0, 1) and d0.completion.token_ids == [7, 8]
    from posttrain.engine import Engine

    assert isinstance(engine, Engine)


def _vllm_and_gpu() -> bool:
    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def test_without_the_vllm_extra_construction_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError, as when the extra is absent
    with pytest.raises(MissingExtraError) as info:
        VLLMEngine(tmp_path)
    assert "pip install 'posttrain[vllm]'" in str(info.value)


def test_without_a_gpu_construction_says_so(monkeypatch, tmp_path):
    llm_calls = []
    fake = ModuleType("vllm")
    fake.LLM = lambda **kw: llm_calls.append(kw)  # must never be reached: no GPU is checked first
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(GPUUnavailableError, match="CUDA GPU"):
        VLLMEngine(tmp_path)
    assert llm_calls == []


def test_real_generation_on_vllm_and_a_gpu(tmp_path):
    """The one test that may skip: real vLLM needs the `vllm` extra and a CUDA GPU (the errors above run everywhere)."""
    if not _vllm_and_gpu():
        pytest.skip("needs the 'vllm' extra (pip install 'posttrain[vllm]') and a CUDA GPU")
    model_dir = make_tiny_model(tmp_path / "m", hidden=256, layers=2, heads=4, kv_heads=2)  # head_dim 64: every attention backend
    engine = VLLMEngine(model_dir, dtype="float16", gpu_memory_utilization=0.2, max_model_len=256, enforce_eager=True)
    model, tok = load_model(model_dir)
    prompts = ["12+34=", "7+5="]

    def check_against(reference) -> None:
        groups = engine.generate(prompts, SamplingParams(n=3, temperature=0.8, max_tokens=8, seed=0))
        for prompt, group in zip(prompts, groups):
            assert len(group) == 3
            for c in group:
                assert len(c.token_ids) == len(c.logprobs) > 0
                ids = tok.encode(prompt) + c.token_ids
                with torch.no_grad():
                    ref = token_logprobs(reference(torch.tensor([ids]))[0, :-1], torch.tensor(ids[1:]), 0.8)
                assert c.logprobs == pytest.approx(ref[len(ids) - len(c.token_ids) - 1 :].tolist(), abs=5e-2)

    check_against(model)
    other, _ = load_model(make_tiny_model(tmp_path / "other", seed=1, hidden=256, layers=2, heads=4, kv_heads=2))
    engine.load_weights(other.state_dict(), version=1)  # from the host: one /dev/shm file per bucket
    assert engine.last_sync is not None and engine.last_sync.transport == "host"
    check_against(other)
    assert engine.generate(prompts[:1], SamplingParams(max_tokens=2))[0][0].policy_version == 1
    engine.load_weights({k: v.cuda() for k, v in model.state_dict().items()}, version=2)  # a GPU learner: CUDA IPC
    assert engine.last_sync.transport == "cuda_ipc"
    check_against(model)
