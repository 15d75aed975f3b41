"""The engine's serving precision: the fp32 learner module, or a bf16 / int8 weight-only copy derived from it.

Covers: the precision names and their one-line validation (`check_precision`);
weight-only quantisation of the decode matmuls' weights (`quantize`: int8 with
one symmetric scale per output channel, absmax / 127; bf16 by rounding to
nearest even); and `ServingCopy`, the module an engine at a reduced precision
samples with: a copy of the learner's `CausalLM` whose q/k/v/o, gate/up/down
and lm_head weights hold their dequantised values (everything else, norms,
biases and the embedding unless it is tied to the lm_head, is copied in fp32).
That copy IS the served policy: prefill, the PyTorch decode paths and
perplexity run it in fp32 arithmetic, and the compiled kernel
(engine/local/fused.py, decode_kernel.c) reads the same values from int8 or
bf16 panels with per-column scales, dequantised in registers. Quantisation is
idempotent on the copy's weights (re-quantising q * s gives q back exactly), so
the kernel's panels are packed from the copy like any other pack.

The copy follows the learner: `refresh()` checks the source parameters' stamp
(engine/local/derived.py: every in-place update bumps their counters) and
re-derives the copy in place; `invalidate()` forces it (the engine's
`set_version` calls it), and is what replacing parameter objects outright
needs. Copies are shared per (model, precision) by every engine over one model
object (`derived.shared`).

Does not cover: activation or KV-cache quantisation (both stay fp32), GPUs,
models other than the native `CausalLM`.
"""

from __future__ import annotations

import copy
import weakref
from typing import Literal

import torch
from torch import Tensor

from posttrain.engine.local.derived import WeightStamp, shared
from posttrain.errors import UserError
from posttrain.models.llama import CausalLM

Precision = Literal["fp32", "bf16", "int8"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "int8")


class PrecisionError(UserError, ValueError):
    """An unknown serving precision, or one the model cannot be served at."""


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise PrecisionError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    return precision


def quantize(w: Tensor, precision: str) -> tuple[Tensor, Tensor]:
    """w [out, in] fp32 -> (q [out, in] int8 or bf16, scale [out] fp32) with w ~= q * scale[:, None].

    int8: symmetric, one scale per output channel (row), q in [-127, 127]; an all-zero row gets scale 1.
    bf16: round to nearest even, scale 1.
    """
    w = w.detach().float()
    if precision == "bf16":
        return w.to(torch.bfloat16), torch.ones(w.shape[0], dtype=torch.float32)
    if precision != "int8":
        raise PrecisionError(f"quantize: precision must be bf16 or int8, got {precision!r}")
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def dequantize(q: Tensor, scale: Tensor) -> Tensor:
    return q.float() * scale[:, None]


def quantized_weights(model: CausalLM) -> list[Tensor]:
    """The weights a reduced precision rounds: per layer q, k, v, o, gate, up, down, then the lm_head."""
    out: list[Tensor] = []
    for layer in model.model.layers:
        a, mlp = layer.self_attn, layer.mlp
        out += [a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, a.o_proj.weight]
        out += [mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight]
    out.append(model.lm_head.weight)
    return out


class ServingCopy:
    """The module an engine at `precision` samples with, derived from (and kept current with) `source`."""

    def __init__(self, source: CausalLM, precision: str) -> None:
        if check_precision(precision) == "fp32":
            raise PrecisionError("ServingCopy is for bf16 and int8; fp32 serves the model itself")
        p = next(source.parameters())
        if type(source) is not CausalLM or p.dtype != torch.float32 or p.device.type != "cpu":
            got = f"{type(source).__name__} ({p.dtype}, {p.device})"
            raise PrecisionError(f"precision {precision!r} needs the native fp32 CausalLM on CPU, got {got}")
        self.precision = precision
        self._source = weakref.ref(source)  # the copy must not keep the learner's module alive
        module = copy.deepcopy(source)
        module.eval()
        for q in module.parameters():
            q.requires_grad_(False)
            q.grad = None
        self.module = module
        self._stamp: WeightStamp | None = None  # the source's parameters and their counters at the last derivation
        self.refresh()

    def invalidate(self) -> None:
        self._stamp = None

    def refresh(self) -> CausalLM:
        """The copy, re-derived first if any source parameter changed (or after `invalidate`)."""
        src = self._source()
        if src is None:
            raise RuntimeError("the model this serving copy was derived from is gone")
        if self._stamp is not None and self._stamp.current():
            return self.module
        stamp = WeightStamp(src.parameters()) if self._stamp is None else self._stamp.restamped()
        params = stamp.params
        with torch.no_grad():
            for dst, s in zip(self.module.parameters(), params, strict=True):
                dst.copy_(s)
            for w in quantized_weights(self.module):  # a tied lm_head rounds the embedding with it: one tensor
                w.copy_(dequantize(*quantize(w, self.precision)))
        self._stamp = stamp
        return self.module


def serving_copy(model: CausalLM, precision: str) -> ServingCopy:
    """The copy of `model` at `precision`, one per (model, precision): engines are often rebuilt over one model,
    and a copy costs a model's memory (engine/local/derived.py holds it; it follows the model itself)."""
    return shared(model, ("serving", precision), lambda: ServingCopy(model, precision))
