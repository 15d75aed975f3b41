"""Model hyper-parameters, read from and written to HF `config.json`.

Covers: the Llama, Qwen2 and Qwen3 families (`model_type` "llama" / "qwen2" / "qwen3"; Qwen3 adds a
per-head RMSNorm on queries and keys and has no q/k/v biases by default), in both
the transformers 4 (`rope_theta`) and 5 (`rope_parameters`) spellings.
Does not cover: RoPE scaling variants (llama3, yarn, ...), sliding-window
attention, MoE. Those are refused with a clear error rather than loaded wrong.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from posttrain.errors import UserError

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


class UnsupportedModelError(UserError, ValueError):
    """A checkpoint asks for something the native model does not implement."""


@dataclass(slots=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    head_dim: int | None = None  # derived: hidden_size // num_attention_heads when None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    attention_bias: bool = False  # Qwen2 always has q/k/v biases
    model_type: str = "llama"
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    @property
    def qk_norm(self) -> bool:
        """Queries and keys pass through a per-head RMSNorm before RoPE (Qwen3)."""
        return self.model_type == "qwen3"

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedModelError(
                f"model_type {self.model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        if self.model_type == "qwen2":
            self.attention_bias = True
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise UnsupportedModelError("hidden_size must be divisible by num_attention_heads")
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedModelError("num_attention_heads must be a multiple of num_key_value_heads")

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> "ModelConfig":
        model_type = raw.get("model_type", "llama")
        rope = raw.get("rope_parameters") or {}
        scaling = raw.get("rope_scaling")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if scaling or rope_type != "default":
            raise UnsupportedModelError(f"RoPE scaling {scaling or rope} is not supported by the native model")
        if raw.get("use_sliding_window"):
            raise UnsupportedModelError("sliding-window attention checkpoints are not supported")
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedModelError(f"hidden_act {act!r} is not supported (only 'silu')")
        if raw.get("mlp_bias"):
            raise UnsupportedModelError("mlp_bias=True is not supported")
        eos = raw.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        return cls(
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=raw["num_attention_heads"],
            num_key_value_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
            head_dim=raw.get("head_dim"),
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", raw.get("rope_theta", 10000.0)),
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=raw.get("tie_word_embeddings", False),  # the HF default
            attention_bias=raw.get("attention_bias", False),
            model_type=model_type,
            bos_token_id=raw.get("bos_token_id"),
            eos_token_id=eos,
            pad_token_id=raw.get("pad_token_id"),
        )

    def to_hf(self) -> dict[str, Any]:
        """A config.json that transformers loads as the matching *ForCausalLM."""
        d = asdict(self)
        arch = ARCHITECTURES[self.model_type]
        d.update(
            architectures=[arch],
            hidden_act="silu",
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            torch_dtype="float32",
        )
        if self.model_type == "qwen2":
            d.pop("attention_bias")
        if self.model_type in ("qwen2", "qwen3"):
            d["use_sliding_window"] = False
        return d
