"""A lean decode step for the engine: one new token per running row, with packed weights.

Covers: the T = 1 decode forward of the native Llama/Qwen2 model over the
engine's plain slot cache (rows [0, b) of `SlotCache`, each at its own
length), in float32. At the sizes posttrain runs on a CPU a decode step is
bound by per-kernel overhead, not arithmetic, so this path does the same maths
as `CausalLM.forward` in about half the kernels:
- q, k, v and their RoPE partners `rotate_half(q)`, `rotate_half(k)` come from
  one matmul (rotate_half is a signed column permutation, so it folds into the
  weights exactly), and RoPE is then one multiply and one `addcmul`;
- the RMSNorm weights fold into the next matmul's columns and 1/sqrt(head_dim)
  into the query columns; the norm itself is `vector_norm` + `addcmul` + `rsqrt`;
- gate and up projections are one matmul; the residual adds ride in `addmm`;
- attention is two small batched matmuls and a softmax over the row's filled
  slots (grouped-query heads become extra query rows, the cache is never copied).
Numerically it is the model's forward up to float rounding (|delta logit| ~ 1e-6;
tests check it against the reference forward and the learner's logprobs).

The packed weights are a copy, rebuilt whenever any parameter changed: every
in-place update (optimizer steps, `load_state_dict`) bumps a tensor's version
counter, which `ensure` compares before each step, so a learner sharing the
model with the engine never decodes with stale weights. Replacing parameter
objects outright needs `invalidate()` (the engine's `set_version` calls it).

Does not cover: prefill and speculative verification (several tokens per row:
they use `CausalLM.forward`), cascade rows that read a shared prompt, sliding
windows, other dtypes. The engine falls back to the model's forward for those.
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from posttrain.engine.kv import SlotCache
from posttrain.engine.native_decode import load_kernel
from posttrain.models.llama import CausalLM

NATIVE_MAX_ROWS = 8  # up to this many rows the C kernel streams the weights once for all; beyond, MKL matmuls win


def rotate_half_matrix(d: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """[D, D] signed permutation R with x @ R == rotate_half(x) == cat(-x[D/2:], x[:D/2])."""
    h = d // 2
    r = torch.zeros(d, d, dtype=dtype)
    idx = torch.arange(h)
    r[idx + h, idx] = -1.0  # out[:h] = -x[h:]
    r[idx, idx + h] = 1.0  # out[h:] = x[:h]
    return r


class _Layer:
    __slots__ = ("w_qkv", "b_qkv", "w_o", "w_gu", "w_down")

    def __init__(self, w_qkv: Tensor, b_qkv: Tensor | None, w_o: Tensor, w_gu: Tensor, w_down: Tensor) -> None:
        self.w_qkv, self.b_qkv, self.w_o, self.w_gu, self.w_down = w_qkv, b_qkv, w_o, w_gu, w_down


class FusedDecoder:
    """The model's decode step in packed form; `step` returns the logits of one new token per row."""

    def __init__(self, model: CausalLM, native: bool = True) -> None:
        self.model = model
        self.kernel = load_kernel() if native else None
        cfg = model.config
        self.hq, self.hkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.rep = self.hq // self.hkv
        self.hidden, self.inter = cfg.hidden_size, cfg.intermediate_size
        self.eps = torch.tensor(cfg.rms_norm_eps, dtype=torch.float32)
        self._params: list[Tensor] = []
        self._versions: list[int] = []
        self.layers: list[_Layer] = []
        self.w_head: Tensor | None = None
        self._rope: tuple[Tensor, Tensor] | None = None  # cos and sin tables [L, D]
        self.rot = rotate_half_matrix(self.d)

    @staticmethod
    def supports(model: CausalLM) -> bool:
        p = next(model.parameters())
        return type(model) is CausalLM and p.dtype == torch.float32 and p.device.type == "cpu"

    # -- weights --------------------------------------------------------------------------
    def invalidate(self) -> None:
        self._params, self._versions = [], []

    def ensure(self) -> None:
        """Repack if any parameter changed since the last pack."""
        params = self._params
        if params and all(p._version == v for p, v in zip(params, self._versions)):
            return
        self._pack()

    def _pack(self) -> None:
        m, cfg = self.model, self.model.config
        scale = self.d**-0.5
        parts: list[Tensor] = []  # every packed matrix, in the order a step reads them
        biases: list[Tensor | None] = []
        with torch.no_grad():
            for layer in m.model.layers:
                a, mlp = layer.self_attn, layer.mlp
                g_in = layer.input_layernorm.weight.float()[None, :]
                g_post = layer.post_attention_layernorm.weight.float()[None, :]
                w_qkv = torch.cat((a.q_proj.weight.float() * scale, a.k_proj.weight.float(), a.v_proj.weight.float())) * g_in
                w_gu = torch.cat((mlp.gate_proj.weight, mlp.up_proj.weight)).float() * g_post
                parts += [w_qkv.t(), a.o_proj.weight.float().t(), w_gu.t(), mlp.down_proj.weight.float().t()]
                if cfg.attention_bias:
                    biases.append(torch.cat((a.q_proj.bias.float() * scale, a.k_proj.bias.float(), a.v_proj.bias.float()))[None])
                else:
                    biases.append(None)
            parts.append((m.lm_head.weight.float() * m.model.norm.weight.float()[None, :]).t())
            # one contiguous buffer: the step streams it front to back (at these sizes decode is bound by
            # reading the weights, and one sequential run is what the prefetcher handles best)
            flat = torch.empty(sum(p.numel() for p in parts), dtype=torch.float32)
            views, off = [], 0
            for p in parts:
                v = flat[off : off + p.numel()].view(p.shape)
                v.copy_(p)
                views.append(v)
                off += p.numel()
        self.layers = [_Layer(views[4 * i], biases[i], *views[4 * i + 1 : 4 * i + 4]) for i in range(len(biases))]
        self.w_head = views[-1]
        self._flat = flat
        ptrs = []
        for lw in self.layers:
            ptrs += [lw.w_qkv.data_ptr(), None if lw.b_qkv is None else lw.b_qkv.data_ptr(), lw.w_o.data_ptr(), lw.w_gu.data_ptr(), lw.w_down.data_ptr()]
        ptrs.append(self.w_head.data_ptr())
        self._mat_ptrs = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self._params = list(m.parameters())
        self._versions = [p._version for p in self._params]

    # -- the step -------------------------------------------------------------------------
    def _rope_rows(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        need = int(positions.max()) + 1
        if self._rope is None or self._rope[0].shape[0] < need:
            length = max(need, 2 * self._rope[0].shape[0] if self._rope is not None else 512)
            cfg = self.model.config
            inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, self.d, 2, dtype=torch.float32) / self.d))
            freqs = torch.arange(length, dtype=torch.float32)[:, None] * inv
            emb = torch.cat((freqs, freqs), dim=-1)
            self._rope = (emb.cos(), emb.sin())
        cos, sin = self._rope
        return cos[positions][:, None], sin[positions][:, None]  # [b, 1, D]

    def _native_step(self, ids: Tensor, starts: list[int], positions: Tensor, cache: SlotCache) -> Tensor:
        b, cfg = ids.shape[0], self.model.config
        self._rope_rows(positions)  # grow the tables to cover these positions
        cos, sin = self._rope
        logits = torch.empty((b, cfg.vocab_size), dtype=torch.float32)
        n = cfg.num_hidden_layers
        kc = (ctypes.c_void_p * n)(*[t.data_ptr() for t in cache.k])
        vc = (ctypes.c_void_p * n)(*[t.data_ptr() for t in cache.v])
        st = torch.tensor(starts, dtype=torch.int64)
        pos = positions.to(torch.int64).contiguous()
        ids = ids.to(torch.int64).contiguous()
        emb = self.model.model.embed_tokens.weight
        rc = self.kernel.pt_decode_step(
            b, n, self.hidden, self.hq, self.hkv, self.d, self.inter, cfg.vocab_size,
            self._mat_ptrs, kc, vc, cache.slots, st.data_ptr(), pos.data_ptr(), cos.data_ptr(), sin.data_ptr(),
            ids.data_ptr(), emb.data_ptr(), float(cfg.rms_norm_eps), logits.data_ptr(),
        )  # fmt: skip
        if rc != 0:
            raise MemoryError("native decode kernel could not allocate its scratch buffer")
        return logits

    def _norm_scale(self, h: Tensor) -> Tensor:
        """rsqrt(mean(h^2) + eps) per row: [b, 1]."""
        n = torch.linalg.vector_norm(h, dim=-1, keepdim=True)
        return torch.rsqrt(torch.addcmul(self.eps, n, n, value=1.0 / self.hidden))

    def step(self, ids: Tensor, starts: list[int], positions: Tensor, cache: SlotCache) -> Tensor:
        """ids [b] (row i's newest token, stored at slot starts[i], position positions[i]) -> logits [b, V]."""
        self.ensure()
        b = ids.shape[0]
        hq, hkv, d, rep, inter = self.hq, self.hkv, self.d, self.rep, self.inter
        sizes = (hq * d, hkv * d, hkv * d)
        span = max(starts) + 1
        if span > cache.slots - 1:
            raise ValueError(f"KV cache row overflow: {span} tokens > {cache.slots - 1} slots")
        if self.kernel is not None and b <= NATIVE_MAX_ROWS and cache.k[0].is_contiguous():
            return self._native_step(ids, starts, positions, cache)
        uniform = min(starts) == span - 1
        if uniform:
            mask = rows_t = slot_t = None
        else:
            st = torch.tensor(starts)
            mask = torch.zeros((b * hkv, 1, span)).masked_fill_(torch.arange(span)[None, None] > st.repeat_interleave(hkv)[:, None, None], float("-inf"))
            rows_t, slot_t = torch.arange(b), st
        cos, sin = self._rope_rows(positions)  # [b, 1, D]
        rot = self.rot
        h = self.model.model.embed_tokens.weight.index_select(0, ids)  # [b, H]
        for i, lw in enumerate(self.layers):
            x = h * self._norm_scale(h)
            p = torch.mm(x, lw.w_qkv) if lw.b_qkv is None else torch.addmm(lw.b_qkv, x, lw.w_qkv)
            q, k, v = p.split(sizes, dim=1)
            q = q.reshape(b, hq, d)
            k = k.reshape(b, hkv, d)
            q = torch.addcmul(q * cos, torch.matmul(q, rot), sin)
            k = torch.addcmul(k * cos, torch.matmul(k, rot), sin)
            kc, vc = cache.k[i], cache.v[i]
            if uniform:
                kc[:b, :, span - 1] = k
                vc[:b, :, span - 1] = v.view(b, hkv, d)
            else:
                kc[rows_t, :, slot_t] = k
                vc[rows_t, :, slot_t] = v.view(b, hkv, d)
            keys = kc[:b, :, :span].reshape(b * hkv, span, d)
            scores = torch.bmm(q.view(b * hkv, rep, d), keys.transpose(1, 2))  # [b*Hkv, rep, S]
            if mask is not None:
                scores = scores + mask
            o = torch.bmm(torch.softmax(scores, dim=-1), vc[:b, :, :span].reshape(b * hkv, span, d))  # [b*Hkv, rep, D]
            h = torch.addmm(h, o.view(b, hq * d), lw.w_o)
            x = h * self._norm_scale(h)
            g, u = torch.mm(x, lw.w_gu).split((inter, inter), dim=1)
            h = torch.addmm(h, torch.nn.functional.silu(g) * u, lw.w_down)
        return torch.mm(h * self._norm_scale(h), self.w_head)
