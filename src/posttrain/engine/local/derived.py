"""Copies derived from a model's weights, and how they know they are stale: the one owner of both.

Covers: `WeightStamp` (the parameters a copy was derived from and their in-place update counters when it
was; torch bumps a tensor's counter on every in-place update, optimizer steps and `load_state_dict`
included, so a copy is current while every counter is where it was; replacing parameter objects outright
is caught by identity, or by the holder's own `invalidate`), and `shared` (one table per model object
of what was derived from it: the packed decode weights of engine/local/fused.py, the bf16 / int8 serving
copies of engine/local/precision.py; engines are often rebuilt over one model, and each copy costs up to a
model's memory). torch's private counter is read in `versions` and nowhere else.
Does not cover: what is derived (the packers and the serving copy build it), when to check (their holders).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from torch import Tensor, nn

T = TypeVar("T")


def versions(params: Iterable[Tensor]) -> list[int]:
    """Each tensor's in-place update counter (torch's private `_version`: named here and nowhere else)."""
    return [p._version for p in params]


class WeightStamp:
    """The parameters a copy was derived from (listed once: walking a module costs ~85 us a step) and their
    counters then."""

    __slots__ = ("params", "versions")

    def __init__(self, params: Iterable[Tensor]) -> None:
        self.params = list(params)
        self.versions = versions(self.params)

    def current(self) -> bool:
        """No parameter was updated in place since the stamp."""
        return versions(self.params) == self.versions

    def restamped(self) -> WeightStamp:
        """The same parameters with their counters now (after a re-derivation)."""
        return WeightStamp(self.params)

    def same_weights(self, other: WeightStamp) -> bool:
        """Both stamps name the same parameter objects at the same counters."""
        return self.versions == other.versions and all(a is b for a, b in zip(self.params, other.params))


# model -> key -> (the stamp it was derived under, or None: it follows the model itself; the derived value)
_DERIVED: weakref.WeakKeyDictionary[nn.Module, dict[Hashable, tuple[WeightStamp | None, Any]]] = weakref.WeakKeyDictionary()


def shared(model: nn.Module, key: Hashable, build: Callable[[], T], stamp: WeightStamp | None = None) -> T:
    """What was derived from `model` under `key`, built by `build()` when nothing is held yet, or (given a
    `stamp`) when what is held was derived from other weights. A value is never mutated once stored, except
    by its own refresh (a serving copy, stored without a stamp, follows its source itself)."""
    per_model = _DERIVED.setdefault(model, {})
    hit = per_model.get(key)
    if hit is not None and (stamp is None or (hit[0] is not None and hit[0].same_weights(stamp))):
        return hit[1]
    value = build()
    per_model[key] = (stamp, value)
    return value
