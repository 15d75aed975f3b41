"""`VLLMEngine`: the engine interface over vLLM's offline `LLM`, for generation on GPUs.

Covers: building (or wrapping) a `vllm.LLM`, mapping posttrain's
`SamplingParams` to vLLM's, text or token-id prompts, Completions with token
ids, text, the sampled tokens' logprobs and finish reason; the logprobs are of
the distribution actually sampled (`logprobs_mode="processed_logprobs"`,
vLLM >= 0.10.2: after temperature and top-k/top-p, as `LocalEngine` reports
them), so importance ratios against the learner mean what they say; vLLM runs
in bf16 by default (`dtype`: the learner's fp32 checkpoint under vLLM's "auto"
would serve as float16, with overflow risk); and `load_weights`, which sends a
state dict (HF parameter names, as the native model's are) to every worker in
buckets (engine/remote/weight_sync.py: CUDA IPC from a learner on the GPU, a
memory-backed file from one on the host), each loaded by the worker extension's
named method (engine/remote/_vllm_worker.py, installed with vLLM's
`worker_extension_cls`: vLLM V1's engine core is another process, its msgpack
channel refuses functions and would turn tensors into lists), then empties
vLLM's prefix cache (`LLM.reset_prefix_cache`) so no KV computed by the old
weights is reused; `agenerate`: concurrent callers' calls (agent episodes)
merged into shared `generate` calls by a `MergedBatcher` thread
(engine/serve/batcher.py; vLLM's `LLM` is not thread-safe, and one call batches
its prompts), so `max_concurrency` is that of the merger, not 1.
Supported vLLM: >= 0.10.2 (`logprobs_mode`, `worker_extension_cls`, V1's
`collective_rpc` by name, sleep mode), < 0.34 (the last release read: 0.33).
Weight sync per policy version (`load_weights(state, version)`): versions only
move forward; full weights go to the workers as above; with `lora` set (the
learner trains LoRA adapters) only the adapter entries of `state` are kept,
written in peft's format to `<adapter_dir>/v<version>` and sampled through a
`LoRARequest` whose name and id are new for every version (vLLM keys its
prefix cache by adapter, so one adapter name reused across versions would mix
policies); the prefix cache is reset on every version either way (`resets`
counts them). `sleep(level)` / `wake()` free and restore the GPU memory vLLM
holds (vLLM's sleep mode, `enable_sleep_mode=True`), so rollout and training
can share one GPU; a call that needs the engine wakes it first. The trainer
never treats this engine as its own module: truncated importance sampling is
on for it under `rl.importance_sampling = "auto"` (rl/build.py).
vLLM is an optional extra (`pip install 'posttrain[vllm]'`), imported only
when an engine is built; without it, or without a CUDA GPU, construction
raises one clear error.
Does not cover: the OpenAI server mode of vLLM (use `OpenAIEngine` against
`vllm serve`), NCCL weight broadcast across nodes, several adapters at once.
"""

from __future__ import annotations

import asyncio
import importlib
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain.engine.base import CompletionDelta
from posttrain.engine.remote._vllm_worker import DTYPES, WeightSyncExtension
from posttrain.engine.remote.weight_sync import DEFAULT_BUCKET_BYTES, SyncStats, send_weights
from posttrain.errors import UserError
from posttrain.extras import require
from posttrain.types import Completion, FinishReason, SamplingParams


class GPUUnavailableError(UserError, RuntimeError):
    """vLLM is installed but this machine shows it no CUDA GPU."""


class WeightSyncError(UserError, ValueError):
    """A weight sync that would be silently wrong: an older version, or weights the engine cannot take."""


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """The LoRA adapters the learner trains (what vLLM needs to load them): rank, alpha, target modules."""

    r: int
    alpha: float
    targets: tuple[str, ...]


def adapter_name(version: int) -> str:
    """A new name per policy version: vLLM's prefix cache and adapter cache key on it."""
    return f"posttrain-policy-v{version}"


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


# what vLLM imports in each worker process (the class's own qualified name, so a rename cannot leave it stale)
WORKER_EXTENSION = f"{WeightSyncExtension.__module__}.{WeightSyncExtension.__qualname__}"
DEFAULT_DTYPE = "bfloat16"
MERGED_CALLS = 64  # concurrent callers' requests merged into one generate call, at most


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
        dtype: str = DEFAULT_DTYPE,
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        enable_prefix_caching: bool = True,
        logprobs_mode: str | None = "processed_logprobs",
        lora: AdapterSpec | None = None,
        adapter_dir: str | Path | None = None,
        enable_sleep_mode: bool = False,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        **llm_kwargs: Any,
    ) -> None:
        """`logprobs_mode=None` leaves vLLM's default (raw logprobs); `lora`: sync adapters (written under
        `adapter_dir`, a temporary directory when None) instead of full weights; `bucket_bytes`: the most
        weight bytes one sync call carries."""
        vllm = require_vllm()
        llm_kwargs.setdefault("worker_extension_cls", WORKER_EXTENSION)
        if logprobs_mode is not None:
            llm_kwargs["logprobs_mode"] = logprobs_mode
        if lora is not None:
            llm_kwargs.update(enable_lora=True, max_lora_rank=max(8, lora.r), max_loras=1)
        if enable_sleep_mode:
            llm_kwargs["enable_sleep_mode"] = True  # weights and KV in vLLM's CuMem pool, freed by `sleep`
        llm = vllm.LLM(
            model=str(model),
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=enable_prefix_caching,
            **llm_kwargs,
        )
        self._init(llm, vllm, model, lora, adapter_dir, dtype, bucket_bytes, enable_sleep_mode)

    @classmethod
    def from_llm(cls, llm: Any, vllm_module: Any = None, model_dir: str | Path | None = None,
                 lora: AdapterSpec | None = None, adapter_dir: str | Path | None = None, dtype: str = DEFAULT_DTYPE,
                 sleep_mode: bool = False) -> VLLMEngine:
        """Wrap a `vllm.LLM` built elsewhere (custom parallelism, a colocated trainer); it must have been built
        with `worker_extension_cls=WORKER_EXTENSION` for full-weight syncs, and with `dtype` as given here."""
        self = cls.__new__(cls)
        vllm = vllm_module if vllm_module is not None else require("vllm", "vllm", "VLLMEngine")
        self._init(llm, vllm, model_dir, lora, adapter_dir, dtype, DEFAULT_BUCKET_BYTES, sleep_mode)
        return self

    usage = None  # nothing remote to total: the GPU is in this process
    max_context: int | None = None  # vLLM enforces its own `max_model_len` and says so

    def _init(self, llm: Any, vllm: Any, model_dir: str | Path | None, lora: AdapterSpec | None = None,
              adapter_dir: str | Path | None = None, dtype: str = DEFAULT_DTYPE, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
              sleep_mode: bool = False) -> None:
        self.llm, self._vllm = llm, vllm
        # weights travel in vLLM's serving dtype (it would round to it on load); fp32 where vLLM picks ("auto")
        self.wire_dtype = DTYPES.get(dtype, DTYPES["float32"])
        self.bucket_bytes = bucket_bytes
        self.sleep_mode = sleep_mode  # built with enable_sleep_mode: `sleep` frees its GPU memory
        self.last_sync: SyncStats | None = None
        self._merger: Any = None  # the MergedBatcher thread of `agenerate`, started on first use
        self._merger_lock = threading.Lock()
        self.policy_version = 0
        self.lora = lora
        self.lora_request: Any = None  # the current version's adapter (None: the base weights, or full-weight sync)
        self._tmp = tempfile.TemporaryDirectory(prefix="posttrain-adapters-") if lora and adapter_dir is None else None
        self.adapter_dir = Path(adapter_dir) if adapter_dir is not None else (Path(self._tmp.name) if self._tmp else None)
        self.resets = 0  # prefix-cache resets, one per adopted version
        self.asleep = False
        self._lock = threading.Lock()  # vLLM's offline LLM is not thread-safe
        self.tokenizer = None  # a posttrain Tokenizer when the model is a local HF-format directory
        if model_dir is not None and (Path(model_dir) / "tokenizer.json").exists():
            from posttrain.models.tokenizer import Tokenizer

            self.tokenizer = Tokenizer.load(model_dir)
        # calls a caller should keep in flight: merged into shared generate calls (the merger cuts a merged
        # completion back to each caller's max_tokens, which needs the tokenizer), else one at a time
        self.max_concurrency = MERGED_CALLS if self.tokenizer is not None else 1

    def encode(self, prompts: list[str]) -> list[list[int]] | None:
        """Token ids with the checkpoint's tokenizer (None when the model is not a local directory with one)."""
        return None if self.tokenizer is None else [self.tokenizer.encode(p) for p in prompts]

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (grouped in prompt order)."""
        if not prompts:
            return []
        sp = self._vllm.SamplingParams(**sampling_kwargs(params))
        with self._lock:
            self._wake()
            extra = {"lora_request": self.lora_request} if self.lora_request is not None else {}
            outputs = self.llm.generate([vllm_prompt(p) for p in prompts], sp, use_tqdm=False, **extra)
            version = self.policy_version
        return [[completion_from_vllm(o, version) for o in sorted(out.outputs, key=lambda o: o.index)] for out in outputs]

    async def agenerate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """`generate` for async callers: concurrent calls with equal sampling parameters (up to `max_tokens`,
        unseeded) are merged into one vLLM `generate` call by the merger thread, so concurrent agent episodes
        batch on the GPU instead of taking turns; without a tokenizer, calls take turns on a thread."""
        if not prompts:
            return []
        if self.tokenizer is None:
            return await asyncio.to_thread(self.generate, prompts, params)
        groups = await asyncio.wrap_future(self.merger().submit(list(prompts), params))
        return [g.completions for g in groups]

    def merger(self) -> Any:
        """The `MergedBatcher` that merges concurrent `agenerate` calls (started on first use)."""
        with self._merger_lock:
            if self._merger is None:
                from posttrain.engine.serve.batcher import MergedBatcher

                self._merger = MergedBatcher(self, max_jobs=MERGED_CALLS)
            return self._merger

    def close(self) -> None:
        """Stop the merger thread (if one runs) once the calls already submitted are done."""
        merger, self._merger = self._merger, None
        if merger is not None:
            merger.close()

    def shutdown(self) -> None:
        """`close`, then stop vLLM's engine-core process and free its GPU memory (the engine is unusable after)."""
        self.close()
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)  # vLLM V1's client of its core
        if core is not None:
            core.shutdown()

    def stream(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> Iterator[CompletionDelta]:
        """The `Engine` stream, not incremental: each completion arrives whole, as its final delta."""
        for i, group in enumerate(self.generate(prompts, params)):
            for j, c in enumerate(group):
                yield CompletionDelta(i, j, i, list(c.token_ids), list(c.logprobs), c.text, c.finish_reason, c)

    def load_weights(self, state: Mapping[str, Any], version: int) -> None:
        """Adopt the policy of `version` (> the current one): every weight (HF names) into every worker, or with
        `lora` the adapter entries of `state` as a new adapter; then drop the prefix cache of the old policy."""
        if version < self.policy_version:
            raise WeightSyncError(f"load_weights version {version} is older than the engine's {self.policy_version}")
        with self._lock:
            if self.asleep and self.lora is None and self.sleep_mode:
                # colocated: the weights' memory first, the new weights into it, then the KV cache (the peak
                # holds one of the two beside the learner, as TRL and verl order it)
                self.llm.wake_up(tags=["weights"])
                self._load_full(state)
                self.llm.wake_up(tags=["kv_cache"])
                self.asleep = False
            else:
                self._wake()
                if self.lora is not None:
                    self._load_adapter(state, version)
                else:
                    self._load_full(state)
            self.llm.reset_prefix_cache()  # no KV of the old policy is reused
            self.resets += 1
            self.policy_version = version

    def _load_full(self, state: Mapping[str, Any]) -> None:
        if any(".lora_" in k or ".base_layer." in k for k in state):
            raise WeightSyncError("load_weights got LoRA-injected names (base_layer / lora_): build the engine with "
                                  "`lora=` to sync adapters, or pass merged weights (models.lora.merged_state_dict)")
        # bucketed, by name: one `posttrain_load_bucket` call per bucket on every worker (engine/remote/weight_sync.py)
        self.last_sync = send_weights(state, self.llm.collective_rpc, self.wire_dtype, self.bucket_bytes)

    def _load_adapter(self, state: Mapping[str, Any], version: int) -> None:
        from posttrain.models.lora import adapter_weights, lora_config, write_adapter

        assert self.lora is not None and self.adapter_dir is not None
        adapter = adapter_weights(dict(state))
        if not adapter:
            raise WeightSyncError("load_weights with lora: the state holds no adapter weights (.lora_A / .lora_B)")
        config = lora_config(self.lora.r, self.lora.alpha, self.lora.targets)
        path = write_adapter(adapter, config, self.adapter_dir / f"v{version}")
        request_cls = importlib.import_module(self._vllm.__name__ + ".lora.request").LoRARequest
        # a new name and a new integer id per version: never the old policy's adapter or its cached KV
        self.lora_request = request_cls(adapter_name(version), version + 1, str(path))

    def sleep(self, level: int = 1) -> None:
        """Free vLLM's GPU memory for training: level 1 offloads the weights to CPU and drops the KV cache;
        level 2 drops the weights too (the next `load_weights` brings them). Needs `enable_sleep_mode=True`."""
        if not self.sleep_mode:
            raise WeightSyncError("VLLMEngine.sleep needs the engine built with enable_sleep_mode=True")
        with self._lock:
            if not self.asleep:
                self.llm.sleep(level=level)
                self.asleep = True

    def wake(self) -> None:
        with self._lock:
            self._wake()

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def sampler_state(self) -> None:
        """None: vLLM keeps its generators to itself (a request's `seed` is what reproduces it)."""
        return None

    def load_sampler_state(self, state: None) -> None:
        pass

    def set_version(self, version: int) -> None:
        self.policy_version = version
