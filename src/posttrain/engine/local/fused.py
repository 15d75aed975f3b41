"""The engine's decode fast path: packed weights, and a forward of a few new tokens per running row.

Covers: the decode forward of the native Llama/Qwen2 model over the engine's
plain slot cache (rows [0, b) of `SlotCache`, each at its own length, every
row holding its whole sequence), in float32, from a repacked copy of the
weights: q|k|v and gate|up as single matrices, the RMSNorm weights folded into
the next matrix's columns and 1/sqrt(head_dim) into the query columns, every
matrix in one contiguous buffer in the order a step reads it. Two paths:
- `forward_tokens`: up to `NATIVE_MAX_TOKENS` tokens per forward (batch-1
  decode, a few concurrent rows, speculative verification of 1 + k tokens per
  row) in one call of the compiled C kernel (engine/local/native_decode.py) on the
  weights packed in 16-column panels;
- `step`: one token per row. Through the kernel, 16 rows per call, when
  `native_is_faster` says so (small models, up to 32 rows, or rows of ragged
  lengths: the kernel attends over each row's own length); otherwise in
  PyTorch on the same matrices: ~15 kernels per layer instead of the model's
  ~35 (RoPE's rotate_half is a [D, D] signed permutation matmul, the residual
  adds ride in `addmm`, attention is two batched matmuls and a softmax over
  the longest row's span).
At the sizes posttrain decodes on a CPU, a step is bound by per-kernel
overhead, not arithmetic. Numerically both are the model's forward up to float
rounding (|delta logit| ~ 1e-6; tests compare logits, cached keys/values and
the learner's logprobs).

The packed weights are a copy, rebuilt whenever any parameter changed: every
in-place update (optimizer steps, `load_state_dict`) moves the weights' stamp
(engine/local/derived.py), which `ensure` checks before each step, so a learner
sharing the model with the engine never decodes with stale weights. Replacing
parameter objects outright needs `invalidate()` (the engine's `set_version` calls it).
Packs are shared by the decoders of all engines over one model object (`derived.shared`).

Does not cover: prefill (long chunks: `CausalLM.forward` with MKL), cascade
rows that read a shared prompt, sliding windows, other dtypes; the engine uses
the model's forward for those.
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from posttrain.engine.local.derived import WeightStamp, shared
from posttrain.engine.local.kv import SlotCache
from posttrain.engine.local.native_decode import load_kernel
from posttrain.engine.local.pack import PackedLayer, pack
from posttrain.engine.local.precision import check_precision
from posttrain.models.llama import CausalLM

# up to this many tokens per forward the C kernel (which streams every weight matrix once for all of
# them) is the faster path; beyond, the step is compute-bound and MKL's matmuls win
NATIVE_MAX_TOKENS = 16


def native_is_faster(b: int, span: int, starts: list[int], hidden: int) -> bool:
    """Whether one token for each of b rows is cheaper through the C kernel, 16 rows per call, than through
    `step`'s batched PyTorch matmuls. The kernel streams every weight once per 16 rows but attends over each
    row's own length; PyTorch's matmuls reuse the weights across all rows but attend over the longest row's
    span (a mask hides the rest), so they win only for many rows of similar lengths in a wide model
    (benchmarks/decode_paths.py; the measurements are in benchmarks/RESULTS.md)."""
    if b <= 2 * NATIVE_MAX_TOKENS or hidden <= 256:
        return True
    return b * span >= 1.5 * (sum(starts) + b)


def rotate_half_matrix(d: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """[D, D] signed permutation R with x @ R == rotate_half(x) == cat(-x[D/2:], x[:D/2])."""
    h = d // 2
    r = torch.zeros(d, d, dtype=dtype)
    idx = torch.arange(h)
    r[idx + h, idx] = -1.0  # out[:h] = -x[h:]
    r[idx, idx + h] = 1.0  # out[h:] = x[:h]
    return r


_WTYPE = {"int8": 1, "bf16": 2}  # pt_forward_tokens_q's weight type codes


class FusedDecoder:
    """The model's decode step in packed form; `step` returns the logits of one new token per row."""

    def __init__(self, model: CausalLM, native: bool = True, precision: str = "fp32") -> None:
        self.model = model
        self.kernel = load_kernel() if native else None
        # the C kernel's weight layout: fp32 folded panels, or int8 / bf16 panels of weights that already hold
        # those values (a ServingCopy); the PyTorch step always runs fp32 on the model's own (dequantised) weights
        self.precision = check_precision(precision)
        self._native_layout = "native" if precision == "fp32" else f"native-{precision}"
        cfg = model.config
        self.hq, self.hkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.rep = self.hq // self.hkv
        self.hidden, self.inter = cfg.hidden_size, cfg.intermediate_size
        self.eps = torch.tensor(cfg.rms_norm_eps, dtype=torch.float32)
        self._stamp: WeightStamp | None = None  # the weights the packs in `_packed` were made from
        self._packed: set[str] = set()  # layouts packed from the current weights
        self._native: tuple | None = None  # (panel buffer, biases, ctypes pointer array) for the C kernel
        self._kv_ptrs: tuple | None = None
        self._call_args: tuple | None = None  # the kernel's arguments that change only with the weights or tables
        self._index_bufs = tuple((ctypes.c_int64 * NATIVE_MAX_TOKENS)() for _ in range(4))  # rows, slots, positions, ids
        self._logits_buf = torch.empty((NATIVE_MAX_TOKENS, cfg.vocab_size), dtype=torch.float32)
        self.layers: list[PackedLayer] = []
        self.w_head: Tensor | None = None
        self._rope: tuple[Tensor, Tensor] | None = None  # cos and sin tables [L, D]
        self.rot = rotate_half_matrix(self.d)

    @staticmethod
    def supports(model: CausalLM) -> bool:
        p = next(model.parameters())
        # the kernel has no per-head q/k norm (Qwen3) and reads plain weights (no LoRA layers): those models
        # decode through the model's own forward
        attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
        plain = all(type(m) is torch.nn.Linear for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj,
                                                          mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        return (type(model) is CausalLM and p.dtype == torch.float32 and p.device.type == "cpu"
                and not model.config.qk_norm and plain)

    # -- weights --------------------------------------------------------------------------
    def invalidate(self) -> None:
        self._packed.clear()
        self._stamp = None

    def ensure(self, layout: str = "torch") -> None:
        """Pack the weights for `layout` ("torch": [K, N] matrices for `torch.mm`; "native": the C kernel's
        16-column panels; "native-int8" / "native-bf16": its quantised panels), again whenever any parameter
        changed since the last pack. Packs are shared by every decoder over the same model object (engines are
        often rebuilt over one model; engine/local/derived.py holds them)."""
        if self._stamp is not None and not self._stamp.current():
            self._packed.clear()
        if layout in self._packed:
            return
        if not self._packed or self._stamp is None:
            self._stamp = WeightStamp(self.model.parameters())
        payload = shared(self.model, ("pack", layout), lambda: pack(self.model, layout), self._stamp)
        if layout == "torch":
            self.layers, self.w_head = payload
        else:
            self._native = payload
            self._call_args = None
        self._packed.add(layout)

    # -- the step -------------------------------------------------------------------------
    def _rope_tables(self, need: int) -> tuple[Tensor, Tensor]:
        """cos and sin [L, D] for positions 0..L-1, L >= need (grown by doubling; growing drops the kernel's
        cached arguments, which hold the old tables' addresses)."""
        if self._rope is None or self._rope[0].shape[0] < need:
            self._call_args = None
            length = max(need, 2 * self._rope[0].shape[0] if self._rope is not None else 512)
            cfg = self.model.config
            inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, self.d, 2, dtype=torch.float32) / self.d))
            freqs = torch.arange(length, dtype=torch.float32)[:, None] * inv
            emb = torch.cat((freqs, freqs), dim=-1)
            self._rope = (emb.cos(), emb.sin())
        return self._rope

    def _cache_pointers(self, cache: SlotCache):
        """ctypes arrays of the cache's per-layer key and value base pointers (rebuilt when `grow` replaced them)."""
        held = self._kv_ptrs
        if held is None or held[0] is not cache.k[0] or held[1] is not cache.v[0]:
            n = len(cache.k)
            held = self._kv_ptrs = (
                cache.k[0], cache.v[0],
                (ctypes.c_void_p * n)(*[x.data_ptr() for x in cache.k]),
                (ctypes.c_void_p * n)(*[x.data_ptr() for x in cache.v]),
                list(cache.k), list(cache.v),  # keep the tensors alive while their addresses are held
            )  # fmt: skip
        return held[2], held[3]

    def forward_tokens(self, ids: Tensor, starts: list[int], n_valid: list[int] | None, cache: SlotCache,
                       row0: int = 0) -> Tensor | None:
        """ids [b, t]: the tokens of cache row row0 + i go to slots starts[i].. (only the first n_valid[i] are
        real) -> logits [b, t, V] from the C kernel, or None when it is unavailable or the forward is too wide
        for it (the caller then runs the model's forward). Positions equal slots: rows hold their whole sequence."""
        b, t = ids.shape
        if self.kernel is None or b * t > NATIVE_MAX_TOKENS or not cache.k[0].is_contiguous():
            return None
        cfg = self.model.config
        valid_to = [t] * b if n_valid is None else n_valid
        if max(s + n for s, n in zip(starts, valid_to)) > cache.slots - 1:
            raise ValueError(
                f"KV cache row overflow: {max(s + n for s, n in zip(starts, valid_to))} tokens > {cache.slots - 1} slots"
            )
        self.ensure(self._native_layout)
        m = b * t
        rows, slot, pos, tok = self._index_bufs
        ids_l = ids.reshape(-1).tolist()
        k = 0
        for i, s0 in enumerate(starts):  # fill preallocated ctypes arrays: cheaper than tensor ops at this size
            nv = t if n_valid is None else n_valid[i]
            for j in range(t):
                rows[k], pos[k], slot[k], tok[k] = row0 + i, s0 + j, (s0 + j if j < nv else -1), ids_l[k]
                k += 1
        cos, sin = self._rope_tables(max(starts) + t)
        if self._call_args is None:
            self._call_args = (
                (cfg.num_hidden_layers, self.hidden, self.hq, self.hkv, self.d, self.inter, cfg.vocab_size, self._native[2]),
                (rows, slot, pos, cos.data_ptr(), sin.data_ptr(), tok,
                 self.model.model.embed_tokens.weight.data_ptr(), cfg.rms_norm_eps),
            )  # fmt: skip
        head, tail = self._call_args
        out = self._logits_buf
        kc, vc = self._cache_pointers(cache)
        if self.precision == "fp32":
            rc = self.kernel.pt_forward_tokens(m, *head, kc, vc, cache.slots, *tail, out.data_ptr())
        else:
            rc = self.kernel.pt_forward_tokens_q(_WTYPE[self.precision], m, *head, kc, vc, cache.slots, *tail, out.data_ptr())
        logits = out[:m].view(b, t, cfg.vocab_size).clone()
        if rc != 0:
            raise MemoryError("native decode kernel could not allocate its scratch buffer")
        return logits

    def decode_greedy(self, first: int, start: int, cache: SlotCache, n: int,
                      stop_ids: frozenset[int] | set[int] = frozenset()) -> tuple[list[int], list[float]] | None:
        """Up to n greedy tokens of cache row 0 in one C call (`pt_decode_greedy`): token `first` goes to slot
        `start`, each chosen token to the next slot; stops after a token in `stop_ids`. -> (tokens, their
        logprobs under the unscaled distribution), exactly what n `forward_tokens` steps with argmax and
        log_softmax give (up to the logsumexp's rounding), or None when the kernel is unavailable."""
        if self.kernel is None or not cache.k[0].is_contiguous():
            return None
        if start + n > cache.slots - 1:
            raise ValueError(f"KV cache row overflow: {start + n} tokens > {cache.slots - 1} slots")
        self.ensure(self._native_layout)
        cfg = self.model.config
        cos, sin = self._rope_tables(start + n)
        kc, vc = self._cache_pointers(cache)
        stops = (ctypes.c_int64 * max(1, len(stop_ids)))(*stop_ids)
        toks, lps = (ctypes.c_int64 * n)(), (ctypes.c_float * n)()
        wt = 0 if self.precision == "fp32" else _WTYPE[self.precision]
        got = self.kernel.pt_decode_greedy(
            wt, n, cfg.num_hidden_layers, self.hidden, self.hq, self.hkv, self.d, self.inter, cfg.vocab_size,
            self._native[2], kc, vc, cache.slots, 0, start, cos.data_ptr(), sin.data_ptr(), first,
            self.model.model.embed_tokens.weight.data_ptr(), cfg.rms_norm_eps, stops, len(stop_ids),
            self._logits_buf.data_ptr(), toks, lps,
        )  # fmt: skip
        if got < 0:
            raise MemoryError("native decode kernel could not allocate its scratch buffer")
        return list(toks[:got]), list(lps[:got])

    def native_step(self, ids: Tensor, starts: list[int], cache: SlotCache) -> Tensor | None:
        """One new token per row through the C kernel, `NATIVE_MAX_TOKENS` rows per call: [b, V] or None."""
        b = ids.shape[0]
        if b <= NATIVE_MAX_TOKENS:
            out = self.forward_tokens(ids[:, None], starts, None, cache)
            return None if out is None else out[:, 0]
        logits = torch.empty((b, self.model.config.vocab_size), dtype=torch.float32)
        for r in range(0, b, NATIVE_MAX_TOKENS):
            part = self.forward_tokens(ids[r : r + NATIVE_MAX_TOKENS, None], starts[r : r + NATIVE_MAX_TOKENS], None,
                                       cache, row0=r)
            if part is None:
                return None
            logits[r : r + part.shape[0]] = part[:, 0]
        return logits

    def _norm_scale(self, h: Tensor) -> Tensor:
        """rsqrt(mean(h^2) + eps) per row: [b, 1]."""
        n = torch.linalg.vector_norm(h, dim=-1, keepdim=True)
        return torch.rsqrt(torch.addcmul(self.eps, n, n, value=1.0 / self.hidden))

    def step(self, ids: Tensor, starts: list[int], cache: SlotCache) -> Tensor:
        """ids [b]: row i's newest token, stored at slot starts[i] (= its position) -> logits [b, V]."""
        b = ids.shape[0]
        hq, hkv, d, rep, inter = self.hq, self.hkv, self.d, self.rep, self.inter
        sizes = (hq * d, hkv * d, hkv * d)
        span = max(starts) + 1
        if span > cache.slots - 1:
            raise ValueError(f"KV cache row overflow: {span} tokens > {cache.slots - 1} slots")
        if self.kernel is not None and native_is_faster(b, span, starts, self.hidden):
            out = self.native_step(ids, starts, cache)
            if out is not None:
                return out
        self.ensure("torch")
        uniform = min(starts) == span - 1
        if uniform:
            mask = rows_t = slot_t = None
        else:
            st = torch.tensor(starts)
            mask = torch.zeros((b * hkv, 1, span)).masked_fill_(
                torch.arange(span)[None, None] > st.repeat_interleave(hkv)[:, None, None], float("-inf")
            )
            rows_t, slot_t = torch.arange(b), st
        cos, sin = self._rope_tables(span)
        pos = torch.tensor(starts)
        cos, sin = cos[pos][:, None], sin[pos][:, None]  # [b, 1, D]
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
