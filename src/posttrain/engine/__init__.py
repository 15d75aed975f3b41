"""Generation engines: the `Engine` protocol, the in-process `LocalEngine` on the native model,
client adapters (`OpenAIEngine` for any OpenAI-compatible server, `VLLMEngine` as an optional extra),
a scripted `MockEngine` for tests, and the OpenAI-compatible server.

Layout: at the top, the contract (`base.py`), sampling and detokenisation shared by the parts, chat
templates, train-inference parity and optional extras; `local/` the in-process engine (scheduler,
KV store, prefix cache, speculative decoding, the fused decode step and its C kernel, the worker
thread behind `agenerate`); `remote/` the client adapters; `serve/` the HTTP server (`posttrain
serve`). Public names are imported lazily, so `import posttrain.engine` (and every `posttrain`
command that never generates) does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CompletionDelta": "posttrain.engine.base",
    "ContextLengthError": "posttrain.engine.base",
    "Engine": "posttrain.engine.base",
    "MockEngine": "posttrain.engine.mock",
    "WindowSpec": "posttrain.engine.local.kv",
    "LocalEngine": "posttrain.engine.local.engine",
    "process_logits": "posttrain.engine.sampling",
    "sample_tokens": "posttrain.engine.sampling",
    "SpecConfig": "posttrain.engine.local.spec_decode",
    "OpenAIEngine": "posttrain.engine.remote.openai_engine",
    "VLLMEngine": "posttrain.engine.remote.vllm_engine",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'posttrain.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
