"""The one place that constructs an engine over local weights, from the `[engine]` config section alone.

Covers: `build_engine(cfg, model, tokenizer, seed)`: `kind = "local"` is the
in-process engine sampling with `model` itself (the trainer's module: new
weights are seen without a copy); `kind = "vllm"` writes `model` as an
HF-format checkpoint to a temporary directory and starts `VLLMEngine` on it
(extra `vllm`, a CUDA GPU), syncing LoRA adapters per version when `model`
has them (models/lora.py), full weights otherwise; `cfg.precision` below fp32 samples with a weight-rounded copy
(engine/local/precision.py); `cfg.device` is where the local engine allocates its cache and samples (the
model is moved there; the C kernels serve a CPU engine only). Every caller outside `engine/` (the trainer's builder, the built-in
base model's band checks, the model resolver, `posttrain serve`) builds its
engine through this function instead of naming an engine class.
Does not cover: engines over remote servers (`OpenAIEngine`, built by the
resolver from a URL) or what the engines do.
"""

from __future__ import annotations

from posttrain.config import ConfigError, EngineConfig
from posttrain.engine.base import Engine
from posttrain.engine.local.spec_decode import SpecConfig
from posttrain.models.llama import CausalLM
from posttrain.models.tokenizer import Tokenizer


def build_engine(
    cfg: EngineConfig | None, model: CausalLM, tokenizer: Tokenizer, seed: int = 0, speculative: SpecConfig | None = None
) -> Engine:
    """An engine over `model` (which it shares, not copies) as `cfg` describes (defaults when None);
    `speculative`: the local engine's speculative decoding (`posttrain serve --fast`), none by default."""
    cfg = cfg or EngineConfig()
    if cfg.kind == "vllm":
        return _vllm_engine(cfg, model, tokenizer, seed)
    if cfg.kind != "local":
        raise ConfigError(f"engine.kind = {cfg.kind!r} is not an engine over local weights (local, vllm)")
    from posttrain.engine.local import LocalEngine

    return LocalEngine(
        model, tokenizer, seed=seed, max_batch_rows=cfg.max_batch_rows, prefill_chunk=cfg.prefill_chunk,
        max_prefill_tokens=cfg.max_prefill_tokens, prefix_cache_tokens=cfg.prefix_cache_tokens,
        fused_decode=cfg.fused_decode, precision=cfg.precision, speculative=speculative, device=cfg.device,
    )


def _vllm_engine(cfg: EngineConfig, model: CausalLM, tokenizer: Tokenizer, seed: int) -> Engine:
    import tempfile
    from pathlib import Path

    from posttrain.engine.remote.vllm_engine import AdapterSpec, VLLMEngine, require_vllm
    from posttrain.models.io import save_model
    from posttrain.models.lora import adapter_settings, has_lora

    require_vllm()  # the missing extra or GPU is reported before anything is written
    directory = Path(tempfile.mkdtemp(prefix="posttrain-vllm-"))
    save_model(model, tokenizer, directory)  # with adapters injected: the merged weights, B = 0 at the start
    lora = AdapterSpec(*adapter_settings(model)) if has_lora(model) else None
    # sleep mode keeps vLLM's memory in its own pool, so a colocated trainer can free it around each update
    return VLLMEngine(directory, seed=seed, gpu_memory_utilization=cfg.gpu_memory_utilization, lora=lora,
                      adapter_dir=directory / "adapters", enable_sleep_mode=cfg.sleep_level > 0)
