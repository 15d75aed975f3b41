"""`LocalEngine.load_weights`'s check and copy: a state dict adopted into the model in place.

Covers: every parameter of the model by its state-dict name (tied weights: any one of a tensor's names
will do), nothing else, each of its shape, checked before anything changes (`WeightsMismatchError` lists
what is missing, unexpected or misshapen); tensors that are the model's own storage (a learner sharing
the module) are not copied.
Does not cover: what the weights invalidate (the engine's `set_version`), weights of a remote engine.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from posttrain.errors import UserError


class WeightsMismatchError(UserError, KeyError):
    """`load_weights` got a state whose names (or shapes) are not the model's: the message lists them."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


def load_state(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Copy `state` into `model`'s parameters and buffers in place; raises `WeightsMismatchError` first."""
    own = model.state_dict(keep_vars=True)
    aliases: dict[int, list[str]] = {}  # tied weights: one tensor under several names, any of which will do
    for name, t in own.items():
        aliases.setdefault(id(t), []).append(name)
    missing = [names[0] for names in aliases.values() if not any(n in state for n in names)]
    unexpected = [k for k in state if k not in own]
    misshapen = [
        f"{k} {tuple(state[k].shape)} != {tuple(own[k].shape)}" for k in state if k in own and state[k].shape != own[k].shape
    ]
    if missing or unexpected or misshapen:
        parts = [
            f"{label}: {_names(items)}"
            for label, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape", misshapen))
            if items
        ]
        raise WeightsMismatchError(f"load_weights needs exactly the model's state dict; {'; '.join(parts)}")
    with torch.no_grad():
        for name, t in state.items():
            dst = own[name]
            if not _same_memory(t, dst):
                dst.copy_(t)


def _same_memory(a: Tensor, b: Tensor) -> bool:
    """`a` is `b`'s own storage (same address, layout and type): a learner sharing the module passed it."""
    return a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.device == b.device and a.stride() == b.stride()


def _names(items: list[str], most: int = 8) -> str:
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more
