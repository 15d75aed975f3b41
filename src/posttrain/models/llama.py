"""The native decoder: Llama / Qwen2 / Qwen3 family in plain PyTorch, with an explicit KV cache.

Covers: RMSNorm, rotary position embeddings, grouped-query attention, SwiGLU,
tied or untied embeddings, optional q/k/v biases (Qwen2), per-head q/k RMSNorm
(Qwen3). Without a cache, `forward` / `hidden` also take `segment_ids` (several
sequences packed in one row: attention stays inside a segment, positions are
the caller's) and, when `gradient_checkpointing` is set and gradients are on,
recompute each layer's activations in the backward pass instead of keeping them (each half of a layer,
attention and MLP, on its own). Parameter names are
HF's (`model.layers.0.self_attn.q_proj.weight`, ...), so a `model.safetensors`
from transformers loads with a plain `load_state_dict`. One forward serves
both the engine (with a `KVCache`) and the learner (without one), so sampler
and trainer logprobs come from the same code.
A cache is a `Cache`: `prepare` (positions and attention mask for the new
tokens), `update` (store one layer's new keys/values, return what to attend
over), `advance`, and `cascade`; a `CascadeCache` also has `attend`, for a cache that attends itself
(over a group's shared prompt KV); `KVCache` is the simple shared-length one,
the engine's per-row slot cache (`posttrain.engine.local.kv`) is another.
Does not cover: paged/block KV caches (the engine builds its own on top of the
`forward(ids, positions, cache)` contract), tensor parallelism, RoPE scaling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posttrain.models.config import ModelConfig


class Cache(Protocol):
    """What `CausalLM.forward(..., cache=)` needs of a KV cache."""

    @property
    def cascade(self) -> bool:
        """True when this forward's attention is the cache's own `attend` (e.g. over a shared prompt's KV)."""
        ...

    def prepare(self, input_ids: Tensor, position_ids: Tensor | None,
                attention_mask: Tensor | None) -> tuple[Tensor, Tensor | None]: ...

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]: ...

    def advance(self, t: int) -> None: ...


class CascadeCache(Cache, Protocol):
    """A cache whose `cascade` is True: it computes each layer's attention itself (the engine's slot cache,
    attending over a group's shared prompt KV and each row's own tokens)."""

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor: ...


@dataclass
class KVCache:
    """Preallocated keys and values for a batch of rows that share slot indices.

    Every row has the same number of filled slots (`length`); rows whose
    prompts are shorter are left-padded and their padding slots are masked out
    by `key_mask`. Position ids are therefore per row, not per slot.
    """

    k: list[Tensor]  # per layer [B, H_kv, S_max, D]
    v: list[Tensor]  # per layer [B, H_kv, S_max, D]
    key_mask: Tensor  # [B, S_max] bool: slot holds a real token
    length: int = 0  # slots filled so far

    @classmethod
    def allocate(cls, config: ModelConfig, batch: int, max_len: int, dtype=torch.float32, device=None) -> "KVCache":
        shape = (batch, config.num_key_value_heads, max_len, config.head_dim)
        layers = config.num_hidden_layers
        return cls(
            k=[torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)],
            v=[torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)],
            key_mask=torch.zeros(batch, max_len, dtype=torch.bool, device=device),
        )

    @property
    def batch_size(self) -> int:
        return self.key_mask.shape[0]

    @property
    def capacity(self) -> int:
        return self.key_mask.shape[1]

    def select(self, rows: Tensor) -> "KVCache":
        """A cache holding only `rows` (an index tensor, repeats allowed: that is how a prefill is forked)."""
        return KVCache(
            k=[t.index_select(0, rows) for t in self.k],
            v=[t.index_select(0, rows) for t in self.v],
            key_mask=self.key_mask.index_select(0, rows),
            length=self.length,
        )

    def repeat_interleave(self, n: int) -> "KVCache":
        """Fork every row n times: one prefill shared by a group of n samples."""
        rows = torch.arange(self.batch_size, device=self.key_mask.device).repeat_interleave(n)
        return self.select(rows)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def prepare(self, input_ids: Tensor, position_ids: Tensor | None, attention_mask: Tensor | None):
        """Mark the new slots, derive per-row positions when not given -> (positions [B, T], mask [B, 1, T, S])."""
        t = input_ids.shape[1]
        if self.length + t > self.capacity:
            raise ValueError(f"KV cache overflow: {self.length} + {t} > capacity {self.capacity}")
        valid = attention_mask if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
        self.key_mask[:, self.length : self.length + t] = valid
        if position_ids is None:  # count real tokens before each one, per row
            seen = self.key_mask[:, : self.length].sum(1, keepdim=True)
            position_ids = (seen + valid.long().cumsum(1) - 1).clamp(min=0)
        return position_ids, _cache_mask(self.key_mask[:, : self.length + t], self.length, t)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store k, v [B, H_kv, T, D] in the next slots -> all filled keys and values."""
        start, t = self.length, k.shape[2]
        self.k[layer][:, :, start : start + t] = k
        self.v[layer][:, :, start : start + t] = v
        return self.k[layer][:, :, : start + t], self.v[layer][:, :, : start + t]

    def advance(self, t: int) -> None:
        self.length += t

    @property
    def cascade(self) -> bool:
        return False  # rows hold their own copy of the prompt: plain attention over `update`'s keys


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin tables for `positions` [B, T] -> each [B, T, 1, D] (broadcast over heads)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    freqs = positions[..., None].float() * inv_freq  # [B, T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [B, T, D]
    return emb.cos().to(dtype)[:, :, None], emb.sin().to(dtype)[:, :, None]


def apply_rope(x: Tensor, cos: Tensor, signed_sin: Tensor) -> Tensor:
    """x * cos + rotate_half(x) * sin, with rotate_half(x) * sin == roll(x, D/2) * signed_sin
    (signed_sin = [-sin, sin] halves): the same products, bit for bit, in four kernels instead of seven."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if cfg.qk_norm:  # Qwen3: RMSNorm over each head's dimensions, before RoPE
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(
        self,
        x: Tensor,  # [B, T, H]
        cos: Tensor,
        sin: Tensor,
        mask: Tensor | None,  # [B, 1, T, S] bool or additive float, or None for plain causal
        cache: Cache | None,
        layer: int,
    ) -> Tensor:
        b, t, _ = x.shape
        # RoPE in [B, T, H, D] layout: contiguous, so the elementwise kernels run on dense memory
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, cos, sin).transpose(1, 2)  # [B, Hq, T, D]
        k = apply_rope(k, cos, sin).transpose(1, 2)  # [B, Hkv, T, D]
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        if cache is not None and cache.cascade:  # the cache attends itself (shared prompt KV)
            attended = cast(CascadeCache, cache).attend(layer, q, k, v)
            return self.o_proj(attended.transpose(1, 2).reshape(b, t, -1))
        if cache is not None:
            k, v = cache.update(layer, k, v)
            if self.n_kv != self.n_heads and mask is not None:
                # the query heads sharing a kv head become extra query rows: the cache is never copied
                rep = self.n_heads // self.n_kv
                q = q.reshape(b, self.n_kv, rep * t, self.head_dim)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.repeat(1, 1, rep, 1) if t > 1 else mask)
                return self.o_proj(out.view(b, self.n_heads, t, self.head_dim).transpose(1, 2).reshape(b, t, -1))
        if self.n_kv != self.n_heads:
            rep = self.n_heads // self.n_kv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# positions per recomputed MLP piece under activation checkpointing: 1,024 x an intermediate of 4,864 (Qwen2.5-0.5B)
# fp32 is 19 MB per [t, intermediate] tensor, against 152 MB for the whole of an 8k sequence
MLP_RECOMPUTE_CHUNK = 1024


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, cache, layer, recompute: bool = False):
        """One layer; with `recompute` (no cache, gradients on), the attention half and the MLP half are each
        checkpointed on their own, the MLP (position-wise) `MLP_RECOMPUTE_CHUNK` positions at a time: the
        backward pass then holds one piece's recomputed activations at a time, not the whole layer's (the MLP's
        [T, intermediate] tensors are most of a layer's), for one more saved [B, T, H] input per layer. Called
        through the module, so wrappers' hooks (FSDP2) still run."""
        if recompute:
            from torch.utils.checkpoint import checkpoint

            x = x + checkpoint(self._attention_half, x, cos, sin, mask, layer, use_reentrant=False)
            t = x.shape[1]
            if t <= MLP_RECOMPUTE_CHUNK:
                return x + checkpoint(self._mlp_half, x, use_reentrant=False)
            pieces = [checkpoint(self._mlp_half, x[:, s : s + MLP_RECOMPUTE_CHUNK], use_reentrant=False)
                      for s in range(0, t, MLP_RECOMPUTE_CHUNK)]
            return x + torch.cat(pieces, dim=1)
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))

    def _attention_half(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, layer: int) -> Tensor:
        return self.self_attn(self.input_layernorm(x), cos, sin, mask, None, layer)

    def _mlp_half(self, x: Tensor) -> Tensor:  # [B, t, H] -> [B, t, H], each position on its own
        return self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class CausalLM(nn.Module):
    """Decoder-only language model; `forward` returns logits [B, T, V]."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self._rope_table: tuple[Tensor, Tensor] | None = None  # (cos, signed sin) [1, L, D], grown on demand
        self.gradient_checkpointing = False  # recompute layer activations in backward (the learner's memory knob)

    def init_weights(self, generator: torch.Generator | None = None, std: float = 0.02) -> None:
        """Random init as transformers does (normal(0, std), zero biases, unit norms)."""
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith(("layernorm.weight", "_norm.weight")) or name == "model.norm.weight":
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.normal_(0.0, std, generator=generator)

    def _rope(self, position_ids: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """(cos, signed sin) for `apply_rope` by table lookup: computed once per length, not every step."""
        need = int(position_ids.max()) + 1 if position_ids.numel() else 1
        table = self._rope_table
        if table is None or table[0].shape[1] < need or table[0].dtype != dtype or table[0].device != position_ids.device:
            length = max(need, 2 * table[0].shape[1] if table is not None else 256)
            positions = torch.arange(length, device=position_ids.device)[None]
            cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, dtype)
            half = self.config.head_dim // 2
            signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
            table = self._rope_table = (cos[:, :, 0], signed[:, :, 0])  # [1, L, D]
        return table[0][0][position_ids][:, :, None], table[1][0][position_ids][:, :, None]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        input_ids: Tensor,  # [B, T]
        position_ids: Tensor | None = None,  # [B, T]
        cache: Cache | None = None,  # a KVCache, the engine's SlotCache, or any other `Cache`
        attention_mask: Tensor | None = None,  # [B, T] bool: real token (False for padding)
        logits_index: Tensor | None = None,  # [B, K] positions in T whose logits are wanted; all when None
        segment_ids: Tensor | None = None,  # [B, T] packed rows: attention stays within equal ids (no cache)
        return_hidden: bool = False,  # the final normed hidden states [B, T, H] instead of logits (see `hidden`)
        branch_ids: Tensor | None = None,  # [B, T] prefix trees (no cache): see `prefix_tree_mask`
    ) -> Tensor:
        h = self._trunk(input_ids, position_ids, cache, attention_mask, segment_ids, branch_ids)
        if return_hidden:
            return self.model.norm(h)
        if logits_index is not None:  # prefill needs only the last position: skip the rest of the vocab projection
            h = h.gather(1, logits_index[..., None].expand(-1, -1, h.shape[-1]))
        return self.lm_head(self.model.norm(h))

    def hidden(
        self,
        input_ids: Tensor,
        position_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
    ) -> Tensor:
        """The final normed hidden states [B, T, H] (no cache): `lm_head` of them is `forward`'s logits,
        so a caller can project a few positions at a time (`models.logprobs.chunked_logprobs`). The same as
        `forward(..., return_hidden=True)`, which wrappers that hook `forward` (DDP, FSDP, peft) need."""
        return self(input_ids, position_ids, attention_mask=attention_mask, segment_ids=segment_ids, return_hidden=True)

    def _trunk(self, input_ids: Tensor, position_ids: Tensor | None, cache: Cache | None,
               attention_mask: Tensor | None, segment_ids: Tensor | None, branch_ids: Tensor | None = None) -> Tensor:
        b, t = input_ids.shape
        # ids built on the host go to the embedding's device (a no-op, no copy, when they are there already)
        input_ids = input_ids.to(self.model.embed_tokens.weight.device)
        mask: Tensor | None
        if cache is None:
            if position_ids is None:
                position_ids = torch.arange(t, device=input_ids.device).expand(b, t)
            if branch_ids is not None:
                mask = prefix_tree_mask(branch_ids)
            elif segment_ids is not None:
                mask = packed_causal_mask(segment_ids)
            else:
                mask = None if attention_mask is None else _padded_causal_mask(attention_mask)
        else:
            position_ids, mask = cache.prepare(input_ids, position_ids, attention_mask)
        h = self.model.embed_tokens(input_ids)
        cos, sin = self._rope(position_ids, h.dtype)
        recompute = self.gradient_checkpointing and cache is None and torch.is_grad_enabled()
        for i, layer in enumerate(self.model.layers):
            h = layer(h, cos, sin, mask, cache, i, recompute=recompute)
        if cache is not None:
            cache.advance(t)
        return h


def packed_causal_mask(segment_ids: Tensor) -> Tensor:
    """[B, 1, T, T] bool for rows holding several sequences: query i sees key j <= i of the same segment."""
    t = segment_ids.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=segment_ids.device).tril()
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return (same & causal)[:, None]


def prefix_tree_mask(branch_ids: Tensor) -> Tensor:
    """[B, 1, T, T] bool for rows that each hold a prefix tree: one shared prefix (branch 0) followed by
    several continuations of it (branches 1, 2, ...), each laid out after the one before. Query i sees key
    j <= i of the prefix or of its own branch, never another branch; padding (branch -1) sees the prefix and
    itself, so its rows stay finite. With the positions of each branch continuing the prefix's, every branch
    token gets exactly the hidden state it would have in its own row `prefix + branch`."""
    t = branch_ids.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=branch_ids.device).tril()
    q, k = branch_ids[:, :, None], branch_ids[:, None, :]
    diag = torch.eye(t, dtype=torch.bool, device=branch_ids.device)
    return ((causal & ((k == 0) | (k == q))) | diag)[:, None]


def _cache_mask(key_mask: Tensor, start: int, t: int) -> Tensor:
    """[B, 1, T, S] bool: query i (slot start+i) sees valid slots <= its own, and always itself.

    Letting padding queries see themselves keeps their rows finite: an
    all-masked row would make NaN keys that poison real rows through 0 * NaN.
    """
    s = key_mask.shape[1]
    slots = torch.arange(s, device=key_mask.device)
    q_slots = torch.arange(start, start + t, device=key_mask.device)
    causal = slots[None, :] <= q_slots[:, None]  # [T, S]
    diag = slots[None, :] == q_slots[:, None]
    return ((key_mask[:, None, :] & causal) | diag)[:, None]


def _padded_causal_mask(attention_mask: Tensor) -> Tensor:
    """[B, 1, T, T] for a padded batch without cache."""
    b, t = attention_mask.shape
    return _cache_mask(attention_mask, 0, t)
