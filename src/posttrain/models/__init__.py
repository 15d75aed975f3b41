"""The native model: one Llama/Qwen2 implementation for both sampling and training."""

from posttrain.models.config import ModelConfig, UnsupportedModelError
from posttrain.models.io import CheckpointError, load_model, save_model
from posttrain.models.llama import CausalLM, KVCache
from posttrain.models.logprobs import sequence_logprobs, token_logprobs
from posttrain.models.tokenizer import Tokenizer, char_tokenizer

__all__ = [
    "CausalLM",
    "CheckpointError",
    "KVCache",
    "ModelConfig",
    "Tokenizer",
    "UnsupportedModelError",
    "char_tokenizer",
    "load_model",
    "save_model",
    "sequence_logprobs",
    "token_logprobs",
]
