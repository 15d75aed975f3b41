"""`VLLMEngine`: the engine interface over vLLM's offline `LLM`, for generation on GPUs.

Covers: building (or wrapping) a `vllm.LLM`, mapping posttrain's
`SamplingParams` to vLLM's, text or token-id prompts, Completions with token
ids, text, the sampled tokens' logprobs and finish reason; the logprobs are of
the distribution actually sampled (`logprobs_mode="processed_logprobs"`,
vLLM >= 0.10.2: after temperature and top-k/top-p, as `LocalEngine` reports
them), so importance ratios against the learner mean what they say; and
`load_weights`, which pushes a state dict (HF parameter names, as the native
model's are) into every worker with `LLM.collective_rpc`, calling each
worker's `model_runner.model.load_weights`, then empties vLLM's prefix cache
(`LLM.reset_prefix_cache`) so no KV computed by the old weights is reused;
`agenerate` (calls take turns on a thread: vLLM's `LLM` is not thread-safe).
vLLM is an optional extra (`pip install 'posttrain[vllm]'`), imported only
when an engine is built; without it, or without a CUDA GPU, construction
raises one clear error.
Does not cover: the OpenAI server mode of vLLM (use `OpenAIEngine` against
`vllm serve`), NCCL weight broadcast across nodes, LoRA adapters.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from posttrain.engine.base import CompletionDelta
from posttrain.engine.extras import require
from posttrain.errors import UserError
from posttrain.types import Completion, FinishReason, SamplingParams


class GPUUnavailableError(UserError, RuntimeError):
    """vLLM is installed but this machine shows it no CUDA GPU."""


def require_vllm() -> Any:
    """The `vllm` module, or `MissingExtraError` naming the `vllm` extra; `GPUUnavailableError` without a GPU."""
    vllm = require("vllm", "vllm", "VLLMEngine")
    import torch

    if not torch.cuda.is_available():
        raise GPUUnavailableError(
            "VLLMEngine needs a CUDA GPU and none is visible (check CUDA_VISIBLE_DEVICES); use LocalEngine on CPU"
        )
    return vllm


def sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """posttrain SamplingParams -> keyword arguments of `vllm.SamplingParams` (pure; logprobs=0: the sampled token's)."""
    kwargs: dict[str, Any] = {
        "n": params.n,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,  # -1 disables top-k in every vLLM version
        "max_tokens": params.max_tokens,
        "seed": params.seed,
        "logprobs": 0,
    }
    if params.stop_token_ids:
        kwargs["stop_token_ids"] = list(params.stop_token_ids)
    if params.stop:
        kwargs["stop"] = list(params.stop)
    if params.min_p:
        kwargs["min_p"] = params.min_p
    return kwargs


def vllm_prompt(prompt: str | list[int]) -> str | dict[str, list[int]]:
    """A text prompt as is; token ids as vLLM's `TokensPrompt` dict."""
    return prompt if isinstance(prompt, str) else {"prompt_token_ids": list(prompt)}


def completion_from_vllm(output: Any, version: int) -> Completion:
    """One vLLM `CompletionOutput` -> Completion (logprob of each sampled token from its per-step dict)."""
    token_ids = list(output.token_ids)
    logprobs: list[float] = []
    for tid, step in zip(token_ids, output.logprobs or []):
        entry = step[tid]  # a Logprob record, keyed by token id (a bare float in some vLLM versions)
        logprobs.append(float(getattr(entry, "logprob", entry)))
    finish = FinishReason.LENGTH if output.finish_reason == "length" else FinishReason.STOP
    return Completion(token_ids, output.text, logprobs, finish, version)


def _load_weights_on_worker(worker: Any, weights: list[tuple[str, Any]]) -> None:
    """Runs inside each vLLM worker (sent by `collective_rpc`)."""
    worker.model_runner.model.load_weights(weights=weights)


class VLLMEngine:
    """Generate with vLLM on a GPU.

    >>> engine = VLLMEngine("runs/quickstart-seed0/final", gpu_memory_utilization=0.3)
    >>> groups = engine.generate(["12+30="], SamplingParams(n=16, max_tokens=8))
    >>> engine.load_weights(learner_state_dict, version=1)
    """

    def __init__(
        self,
        model: str | Path,
        *,
        dtype: str = "auto",
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        enable_prefix_caching: bool = True,
        logprobs_mode: str | None = "processed_logprobs",
        **llm_kwargs: Any,
    ) -> None:
        """`logprobs_mode=None` leaves vLLM's default (raw logprobs; needed before vLLM 0.10.2)."""
        vllm = require_vllm()
        if logprobs_mode is not None:
            llm_kwargs["logprobs_mode"] = logprobs_mode
        llm = vllm.LLM(
            model=str(model),
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=enable_prefix_caching,
            **llm_kwargs,
        )
        self._init(llm, vllm, model)

    @classmethod
    def from_llm(cls, llm: Any, vllm_module: Any = None, model_dir: str | Path | None = None) -> VLLMEngine:
        """Wrap a `vllm.LLM` built elsewhere (custom parallelism, a colocated trainer)."""
        self = cls.__new__(cls)
        self._init(llm, vllm_module if vllm_module is not None else require("vllm", "vllm", "VLLMEngine"), model_dir)
        return self

    usage = None  # nothing remote to total: the GPU is in this process
    max_context: int | None = None  # vLLM enforces its own `max_model_len` and says so
    max_concurrency = 1  # calls run one at a time (vLLM batches inside a call: pass many prompts per call)

    def _init(self, llm: Any, vllm: Any, model_dir: str | Path | None) -> None:
        self.llm, self._vllm = llm, vllm
        self.policy_version = 0
        self._lock = threading.Lock()  # vLLM's offline LLM is not thread-safe
        self.tokenizer = None  # a posttrain Tokenizer when the model is a local HF-format directory
        if model_dir is not None and (Path(model_dir) / "tokenizer.json").exists():
            from posttrain.models.tokenizer import Tokenizer

            self.tokenizer = Tokenizer.load(model_dir)

    def encode(self, prompts: list[str]) -> list[list[int]] | None:
        """Token ids with the checkpoint's tokenizer (None when the model is not a local directory with one)."""
        return None if self.tokenizer is None else [self.tokenizer.encode(p) for p in prompts]

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (grouped in prompt order)."""
        if not prompts:
            return []
        sp = self._vllm.SamplingParams(**sampling_kwargs(params))
        with self._lock:
            outputs = self.llm.generate([vllm_prompt(p) for p in prompts], sp, use_tqdm=False)
            version = self.policy_version
        return [[completion_from_vllm(o, version) for o in sorted(out.outputs, key=lambda o: o.index)] for out in outputs]

    async def agenerate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """`generate` on a worker thread; concurrent calls take turns (one vLLM call batches its own prompts)."""
        return await asyncio.to_thread(self.generate, prompts, params)

    def stream(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> Iterator[CompletionDelta]:
        """The `Engine` stream, not incremental: each completion arrives whole, as its final delta."""
        for i, group in enumerate(self.generate(prompts, params)):
            for j, c in enumerate(group):
                yield CompletionDelta(i, j, i, list(c.token_ids), list(c.logprobs), c.text, c.finish_reason, c)

    def load_weights(self, state: Mapping[str, Any], version: int) -> None:
        """Copy `state` (HF names) into every worker's model, then drop prefix-cache entries of the old weights."""
        weights = list(state.items())
        # These probe the vLLM object, not a posttrain capability: `LLM.collective_rpc` and
        # `LLM.reset_prefix_cache` exist only in some vLLM releases, and the extra accepts a range of them.
        with self._lock:
            if hasattr(self.llm, "collective_rpc"):
                self.llm.collective_rpc(_load_weights_on_worker, args=(weights,))
            else:  # vLLM before collective_rpc: the single in-process worker
                self.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights(weights=weights)
            if hasattr(self.llm, "reset_prefix_cache"):
                self.llm.reset_prefix_cache()
            self.policy_version = version

    def sampler_state(self) -> None:
        """None: vLLM keeps its generators to itself (a request's `seed` is what reproduces it)."""
        return None

    def load_sampler_state(self, state: None) -> None:
        pass

    def set_version(self, version: int) -> None:
        self.policy_version = version
