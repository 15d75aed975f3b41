"""LoRA adapters (peft) on the native model's HF-named projections.

Covers: `apply_lora` (peft's `inject_adapter_in_model`: the model stays a `CausalLM`, its targeted
`nn.Linear`s become peft LoRA layers, every other weight is frozen), `adapter_state_dict` (only the
adapter weights, peft's names without the adapter name: what is trained and synced), `save_adapter` /
`load_adapter` (peft's on-disk format, `adapter_config.json` + `adapter_model.safetensors`, which
`peft.PeftModel.from_pretrained` and vLLM's LoRA loader read), `merged_state_dict` (the HF-named full
weights with each adapter folded in, W + (alpha / r) B A: what a plain checkpoint or a full-weight
sync holds) and `has_lora`.
peft is an optional extra (`pip install 'posttrain[lora]'`), imported only here, only when used.
Does not cover: several adapters on one model, DoRA / other peft tuners, quantised bases.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from posttrain.errors import UserError
from posttrain.extras import MissingExtraError, require

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER = "default"  # peft's adapter name inside the module tree
_PREFIX = "base_model.model."  # how peft's saved files name the wrapped model's modules


class LoRAUnavailableError(MissingExtraError):
    """peft is not installed."""


def _peft() -> ModuleType:
    return require("peft", "lora", "LoRA", LoRAUnavailableError)


def lora_config(r: int = 8, alpha: float = 16.0, targets: tuple[str, ...] | list[str] = DEFAULT_TARGETS,
                dropout: float = 0.0) -> Any:
    """A `peft.LoraConfig` for the native model's projections."""
    return _peft().LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets), lora_dropout=dropout, bias="none")


def apply_lora(model: nn.Module, r: int = 8, alpha: float = 16.0, targets: tuple[str, ...] | list[str] = DEFAULT_TARGETS,
               dropout: float = 0.0, seed: int = 0) -> nn.Module:
    """Inject adapters into `model` in place (B = 0: the policy is unchanged) and freeze every other weight."""
    peft = _peft()
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # peft draws A from the global generator
        peft.inject_adapter_in_model(lora_config(r, alpha, targets, dropout), model, adapter_name=ADAPTER)
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    model.lora_config = lora_config(r, alpha, targets, dropout)  # what save_adapter writes
    return model


def adapter_settings(model: nn.Module) -> tuple[int, float, tuple[str, ...]]:
    """(r, alpha, target modules) of the adapters `apply_lora` injected."""
    cfg = model.lora_config
    return int(cfg.r), float(cfg.lora_alpha), tuple(sorted(cfg.target_modules))


def has_lora(model: nn.Module) -> bool:
    return any(".lora_" in name for name, _ in model.named_parameters())


def adapter_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The adapter weights only, named as peft names them (`...q_proj.lora_A.weight`)."""
    return dict(_peft().get_peft_model_state_dict(model, adapter_name=ADAPTER))


def save_adapter(model: nn.Module, path: str | Path, base_model: str | None = None) -> Path:
    """peft's format: adapter_config.json and adapter_model.safetensors (keys prefixed `base_model.model.`)."""
    return write_adapter(adapter_state_dict(model), model.lora_config, path, base_model)


def adapter_weights(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The adapter entries of a LoRA model's full state dict, named as peft saves them (adapter name dropped)."""
    return {k.replace(f".{ADAPTER}.", "."): v for k, v in state.items() if ".lora_" in k}


def write_adapter(adapter: dict[str, Tensor], config: Any, path: str | Path, base_model: str | None = None) -> Path:
    """Adapter weights (peft names) and their `peft.LoraConfig` -> a peft-format directory."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    config.base_model_name_or_path = base_model
    state = {_PREFIX + k: v.detach().contiguous().cpu() for k, v in adapter.items()}
    save_file(state, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(directory))
    return directory


def load_adapter(model: nn.Module, path: str | Path) -> nn.Module:
    """Inject the adapter saved at `path` (peft's format) into `model` and load its weights."""
    peft = _peft()
    directory = Path(path)
    raw = json.loads((directory / "adapter_config.json").read_text())
    apply_lora(model, raw["r"], raw["lora_alpha"], sorted(raw["target_modules"]), raw.get("lora_dropout", 0.0))
    state = {k.removeprefix(_PREFIX): v for k, v in load_file(str(directory / "adapter_model.safetensors")).items()}
    result = peft.set_peft_model_state_dict(model, state, adapter_name=ADAPTER)
    unexpected = list(result.unexpected_keys)
    if unexpected:
        raise UserError(f"{directory}: adapter weights that fit no module: {unexpected[:5]}")
    return model


def load_merged(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Load plain HF-named weights (what `save_model` wrote for a LoRA model: merged) into a LoRA-injected
    model: they become the base weights and every adapter's B is zeroed, so the policy is exactly `state`'s."""
    own = model.state_dict()
    mapped = {}
    for name, t in state.items():
        owner, _, leaf = name.rpartition(".")
        adapted = f"{owner}.base_layer.{leaf}"
        mapped[adapted if adapted in own else name] = t
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.zero_()
    missing = [k for k in own if ".lora_" not in k and k not in mapped]
    model.load_state_dict(mapped, strict=False)
    if missing:
        raise UserError(f"load_merged: weights missing from the state: {missing[:5]}")


def merged_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """HF-named full weights with every adapter folded in (no `base_layer` / `lora_` names), detached."""
    modules = dict(model.named_modules())
    out: dict[str, Tensor] = {}
    for name, t in model.state_dict().items():
        if ".lora_" in name:
            continue
        if ".base_layer." in name:
            owner, leaf = name.split(".base_layer.")
            if leaf == "weight":
                with torch.no_grad():
                    t = t + modules[owner].get_delta_weight(ADAPTER).to(t.dtype)
            name = f"{owner}.{leaf}"
        out[name] = t.detach()
    return out
