"""Generation engines: the `Engine` protocol, the in-process `LocalEngine` on the native model, and
client adapters (`OpenAIEngine` for any OpenAI-compatible server, `VLLMEngine` as an optional extra).

Public names are imported lazily, so `import posttrain.engine` (and every `posttrain` command that
never generates) does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CompletionDelta": "posttrain.engine.base",
    "Engine": "posttrain.engine.base",
    "WindowSpec": "posttrain.engine.kv",
    "LocalEngine": "posttrain.engine.local",
    "process_logits": "posttrain.engine.sampling",
    "sample_tokens": "posttrain.engine.sampling",
    "SpecConfig": "posttrain.engine.spec_decode",
    "OpenAIEngine": "posttrain.engine.openai_engine",
    "VLLMEngine": "posttrain.engine.vllm_engine",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'posttrain.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
