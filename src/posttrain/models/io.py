"""Load and save HF-format checkpoints: config.json, model.safetensors, tokenizer.json.

Covers: single-file and sharded (`model.safetensors.index.json`) safetensors,
tied embeddings (saved without the duplicate `lm_head.weight`, as
transformers does), clear errors for missing files and mismatched weights.
A model with LoRA adapters injected (models/lora.py) is saved merged.
Does not cover: PyTorch `.bin` pickles (unsafe to load), quantised weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from posttrain.errors import UserError
from posttrain.models.config import ModelConfig
from posttrain.models.llama import CausalLM
from posttrain.models.tokenizer import Tokenizer


class CheckpointError(UserError, ValueError):
    """A checkpoint directory is missing files or holds weights that do not fit its config."""


def _read_state(directory: Path) -> dict[str, torch.Tensor]:
    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    if single.exists():
        return load_file(str(single))
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(str(directory / shard)))
        return state
    raise CheckpointError(f"{directory}: no model.safetensors (or sharded index) found")


def load_model(path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[CausalLM, Tokenizer]:
    """Load an HF-format Llama/Qwen2 checkpoint directory into the native model."""
    directory = Path(path)
    cfg_path = directory / "config.json"
    if not cfg_path.exists():
        raise CheckpointError(f"{directory}: config.json not found (is this an HF-format checkpoint?)")
    raw = json.loads(cfg_path.read_text())
    config = ModelConfig.from_hf(raw)
    model = CausalLM(config)
    state = _read_state(directory)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    expected = set(model.state_dict())
    if config.tie_word_embeddings:
        expected.discard("lm_head.weight")
    missing, unexpected = expected - set(state), set(state) - expected
    unexpected = {k for k in unexpected if not k.endswith("rotary_emb.inv_freq")}
    if missing or unexpected:
        raise CheckpointError(
            f"{directory}: weights do not match config: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    model.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=False)
    model.to(dtype)
    tokenizer = Tokenizer.load(directory, raw)
    return model.eval(), tokenizer


def save_model(model: CausalLM, tokenizer: Tokenizer, path: str | Path) -> Path:
    """Write config.json, model.safetensors, tokenizer.json (+ tokenizer_config.json)."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config
    config.bos_token_id, config.eos_token_id = tokenizer.bos_id, tokenizer.eos_id
    config.pad_token_id = tokenizer.pad_id
    raw = model.state_dict()
    if any(".base_layer." in k for k in raw):  # LoRA adapters injected: save the merged, plain HF weights
        from posttrain.models.lora import merged_state_dict

        raw = merged_state_dict(model)
    state = {k: v.detach().contiguous().cpu() for k, v in raw.items()}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    tmp = directory / "model.safetensors.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    tmp.replace(directory / "model.safetensors")  # atomic: a crash never leaves half a checkpoint
    (directory / "config.json").write_text(json.dumps(config.to_hf(), indent=2))
    tokenizer.save(directory)
    return directory
