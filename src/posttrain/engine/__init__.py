"""Generation engines: the in-process `LocalEngine` on the native model."""

from posttrain.engine.local import LocalEngine
from posttrain.engine.sampling import process_logits, sample_tokens

__all__ = ["LocalEngine", "process_logits", "sample_tokens"]
