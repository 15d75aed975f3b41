"""Generation engines: the `Engine` protocol and the in-process `LocalEngine` on the native model."""

from posttrain.engine.base import CompletionDelta, Engine
from posttrain.engine.kv import WindowSpec
from posttrain.engine.local import LocalEngine
from posttrain.engine.sampling import process_logits, sample_tokens
from posttrain.engine.spec_decode import SpecConfig

__all__ = ["CompletionDelta", "Engine", "LocalEngine", "SpecConfig", "WindowSpec", "process_logits", "sample_tokens"]
