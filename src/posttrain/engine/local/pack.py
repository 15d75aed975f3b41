"""The packed forms of a model's weights that engine/local/fused.py's decode paths read.

Covers: per layer q|k|v and gate|up as single matrices, the RMSNorm weights folded into the next matrix's
columns and 1/sqrt(head_dim) into the query columns (`folded_matrices`); the "torch" layout ([K, N] matrices
for `torch.mm`), the C kernel's fp32 16-column panels and its int8 / bf16 panels with per-column scales
(`quantised_pack`); every matrix copied into one contiguous buffer in the order a step reads it, on huge
pages (`flat_pack`: decode at these sizes is bound by reading the weights, and one sequential run is what the
prefetcher and the TLB handle best).
Does not cover: when to pack or whom packs are shared with (engine/local/fused.py, engine/local/derived.py).
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from posttrain.engine.local.hugepages import hugepage_empty
from posttrain.engine.local.precision import quantize
from posttrain.models.llama import CausalLM


class PackedLayer:
    """One layer's matrices in the "torch" layout: q|k|v, o, gate|up, down ([K, N] each) and the q|k|v bias."""

    __slots__ = ("w_qkv", "b_qkv", "w_o", "w_gu", "w_down")

    def __init__(self, w_qkv: Tensor, b_qkv: Tensor | None, w_o: Tensor, w_gu: Tensor, w_down: Tensor) -> None:
        self.w_qkv, self.b_qkv, self.w_o, self.w_gu, self.w_down = w_qkv, b_qkv, w_o, w_gu, w_down


PANEL = 16  # the C kernel's column panel width (two AVX registers)


def to_panels(w: Tensor) -> Tensor:
    """[K, N] -> [ceil(N / 16), K, 16], zero-padded: the C kernel streams one panel front to back per column block."""
    k, n = w.shape
    np_ = -(-n // PANEL)
    padded = torch.zeros((k, np_ * PANEL), dtype=w.dtype)
    padded[:, :n] = w
    return padded.view(k, np_, PANEL).permute(1, 0, 2)


def padded_scales(v: Tensor) -> Tensor:
    """[N] -> [ceil(N / 16) * 16] fp32, zero-padded: per-column scales beside their panels."""
    out = torch.zeros(-(-v.numel() // PANEL) * PANEL, dtype=torch.float32)
    out[: v.numel()] = v
    return out


def flat_pack(mats: list[Tensor], shape_fn) -> tuple[list[Tensor], Tensor]:
    """Copy `shape_fn(m)` of every matrix into one contiguous buffer, in step order -> (views, buffer).

    At these sizes decode is bound by reading the weights, and one sequential run on huge pages
    (`hugepage_empty`) is what the hardware prefetcher and the TLB handle best.
    """
    with torch.no_grad():
        shaped = [shape_fn(m) for m in mats]
        flat = hugepage_empty(sum(x.numel() for x in shaped), shaped[0].dtype)
        views, off = [], 0
        for x in shaped:
            v = flat[off : off + x.numel()].view(x.shape)
            v.copy_(x)
            views.append(v)
            off += x.numel()
    return views, flat


def pack(model: CausalLM, layout: str) -> tuple:
    """The payload of `layout` ("torch": per-layer [K, N] matrices and the head; "native": the C kernel's fp32
    panels and their pointers; "native-int8" / "native-bf16": its quantised panels), packed from `model`'s
    weights now; never mutated once built."""
    if layout.startswith("native-"):
        return quantised_pack(model, layout.removeprefix("native-"))
    mats, biases = folded_matrices(model)
    if layout == "torch":
        views, _ = flat_pack(mats, lambda w: w)
        layers = [PackedLayer(views[4 * i], biases[i], *views[4 * i + 1 : 4 * i + 4]) for i in range(len(biases))]
        return (layers, views[-1])
    panels, flat = flat_pack(mats, to_panels)
    ptrs = []
    for i, bias in enumerate(biases):
        rest = panels[4 * i + 1 : 4 * i + 4]
        ptrs += [panels[4 * i].data_ptr(), None if bias is None else bias.data_ptr(), *(x.data_ptr() for x in rest)]
    ptrs.append(panels[-1].data_ptr())
    return (flat, biases, (ctypes.c_void_p * len(ptrs))(*ptrs))  # the tensors stay alive with their pointers

def quantised_pack(model: CausalLM, precision: str) -> tuple:
    """The kernel's int8 / bf16 layout: per layer (qkv, its scales, bias, input norm, o, scales, post norm,
    gate|up, scales, down, scales), then (head, scales, final norm); 11 and 3 pointers. The model's own
    weights are quantised unfolded (a norm weight varies along K, which a per-column scale cannot carry),
    so the kernel applies the norms to the activations; 1/sqrt(D) rides in the query columns' scales.
    Quantising weights that already hold int8 / bf16 values (a ServingCopy's) returns them exactly."""
    m, cfg = model, model.config
    d, hq = cfg.head_dim, cfg.num_attention_heads
    scale = d**-0.5
    nq = hq * d
    mats: list[Tensor] = []
    vecs: list[list[Tensor | None]] = []  # per matrix: its scales, then the layer's norm weight / bias
    with torch.no_grad():
        for layer in m.model.layers:
            a, mlp = layer.self_attn, layer.mlp
            q, s = quantize(torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)), precision)
            s[:nq] *= scale
            bias = None
            if cfg.attention_bias:
                bias = torch.cat((a.q_proj.bias.float() * scale, a.k_proj.bias.float(), a.v_proj.bias.float())).contiguous()
            mats.append(q.t())
            vecs.append([padded_scales(s), bias, layer.input_layernorm.weight.detach().float().contiguous()])
            q, s = quantize(a.o_proj.weight, precision)
            mats.append(q.t())
            vecs.append([padded_scales(s), layer.post_attention_layernorm.weight.detach().float().contiguous()])
            q, s = quantize(torch.cat((mlp.gate_proj.weight, mlp.up_proj.weight)), precision)
            mats.append(q.t())
            vecs.append([padded_scales(s)])
            q, s = quantize(mlp.down_proj.weight, precision)
            mats.append(q.t())
            vecs.append([padded_scales(s)])
        q, s = quantize(m.lm_head.weight, precision)
        mats.append(q.t())
        vecs.append([padded_scales(s), m.model.norm.weight.detach().float().contiguous()])
    panels, flat = flat_pack(mats, to_panels)
    ptrs: list[int | None] = []
    for w, extra in zip(panels, vecs, strict=True):
        ptrs += [w.data_ptr(), *(None if v is None else v.data_ptr() for v in extra)]
    return (flat, vecs, (ctypes.c_void_p * len(ptrs))(*ptrs))  # the tensors stay alive with their pointers

def folded_matrices(model: CausalLM) -> tuple[list[Tensor], list[Tensor | None]]:
    """Per layer [K, N] matrices (qkv, o, gate|up, down) with norm weights and 1/sqrt(D) folded in, then the head."""
    m, cfg = model, model.config
    d = cfg.head_dim
    scale = d**-0.5
    mats: list[Tensor] = []  # every matrix, in the order a step reads them
    biases: list[Tensor | None] = []
    with torch.no_grad():
        for layer in m.model.layers:
            a, mlp = layer.self_attn, layer.mlp
            g_in = layer.input_layernorm.weight.float()[None, :]
            g_post = layer.post_attention_layernorm.weight.float()[None, :]
            w_qkv = torch.cat((a.q_proj.weight.float() * scale, a.k_proj.weight.float(), a.v_proj.weight.float())) * g_in
            w_gu = torch.cat((mlp.gate_proj.weight, mlp.up_proj.weight)).float() * g_post
            mats += [w_qkv.t(), a.o_proj.weight.float().t(), w_gu.t(), mlp.down_proj.weight.float().t()]
            if cfg.attention_bias:
                bias = torch.cat((a.q_proj.bias.float() * scale, a.k_proj.bias.float(), a.v_proj.bias.float()))
                biases.append(bias[None].contiguous())
            else:
                biases.append(None)
        mats.append((m.lm_head.weight.float() * m.model.norm.weight.float()[None, :]).t())
    return mats, biases
