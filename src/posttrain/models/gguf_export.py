"""Export a native Llama model with the built-in character tokenizer as one GGUF file, for llama.cpp.

Covers: `export_gguf(model, tokenizer, path, dtype)`, the same weights as f32 or
q8_0 (llama.cpp's 8-bit blocks of 32 with an f16 scale, quantised by the
`gguf` package's own `gguf.quants`; norms stay f32, as llama.cpp's converter
leaves them), the `llama` architecture's metadata (sizes, heads, grouped
kv heads, head dim, RMSNorm epsilon, RoPE base, context length) and the
character vocabulary written directly as a SentencePiece-style (`llama`)
vocabulary: one token per character with equal scores, so llama.cpp's own
tokenizer splits text into the same characters posttrain's does (the space is
written as SentencePiece's U+2581, which llama.cpp maps back), specials as
control tokens with posttrain's ids. Tied embeddings are written once
(`token_embd`); llama.cpp reuses them as the output matrix.

Rotary embeddings: posttrain (like transformers) rotates dimension i of a head
with dimension i + head_dim/2; llama.cpp's `llama` architecture rotates
adjacent pairs (2i, 2i+1). The query and key projections (and their biases)
are therefore written with each head's rows reordered to 0, D/2, 1, D/2+1,
...: the attention scores are unchanged because queries and keys get the same
reordering, so the logits are the same function of the token ids
(tests/models/test_gguf_export.py checks this against a reference forward with
llama.cpp's convention; benchmarks/llamacpp.py against llama.cpp itself).

Does not cover: Qwen2 / Qwen3 models and HF tokenizers (a posttrain
checkpoint is a transformers checkpoint: llama.cpp's `convert_hf_to_gguf.py`
converts those), other quantisation types, LoRA adapters (refused: save_model merges them),
reading a GGUF file back into posttrain. `gguf` is the `gguf` extra, imported
only here.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from posttrain.errors import UserError
from posttrain.extras import MissingExtraError, require
from posttrain.models.config import ModelConfig
from posttrain.models.llama import CausalLM
from posttrain.models.lora import has_lora
from posttrain.models.tokenizer import BOS, EOS, PAD, UNK, Tokenizer, char_tokenizer

GGUF_DTYPES = ("f32", "q8_0")
SPM_SPACE = "\u2581"  # SentencePiece's visible space: llama.cpp's `llama` vocabulary escapes ' ' to it


class GGUFExportError(UserError, ValueError):
    """A model or tokenizer this writer cannot express as GGUF, or an unknown GGUF dtype."""


class GGUFMissingError(MissingExtraError):
    """The `gguf` package is not installed."""


def require_gguf() -> ModuleType:
    return require("gguf", "gguf", "GGUF export", GGUFMissingError)


def rope_pair_order(n_heads: int, head_dim: int) -> np.ndarray:
    """Row indices that turn a [n_heads * head_dim, ...] projection from half-split rotary pairs (i, i + D/2)
    into llama.cpp's adjacent pairs (2i, 2i + 1): per head 0, D/2, 1, D/2 + 1, ..."""
    within = np.arange(head_dim).reshape(2, head_dim // 2).T.reshape(-1)
    return (np.arange(n_heads)[:, None] * head_dim + within[None, :]).reshape(-1)


def check_exportable(model: CausalLM, tokenizer: Tokenizer) -> None:
    cfg = model.config
    if cfg.model_type != "llama":
        raise GGUFExportError(
            f"GGUF export writes the llama architecture only, not {cfg.model_type!r}: save the model with "
            "posttrain.models.save_model and convert it with llama.cpp's convert_hf_to_gguf.py"
        )
    if tokenizer.backend.get_vocab(with_added_tokens=True) != char_tokenizer().backend.get_vocab(with_added_tokens=True):
        raise GGUFExportError(
            "GGUF export writes the built-in character tokenizer only: save the model with "
            "posttrain.models.save_model and convert it with llama.cpp's convert_hf_to_gguf.py"
        )
    if has_lora(model):  # the projections' `.weight` would be the base weights alone: the adapters would be lost
        raise GGUFExportError(
            "the model carries LoRA adapters: save_model saves it merged; export the model load_model returns from there"
        )
    if tokenizer.vocab_size != cfg.vocab_size:
        raise GGUFExportError(f"tokenizer has {tokenizer.vocab_size} tokens, the model's vocab_size is {cfg.vocab_size}")
    if cfg.head_dim is None or cfg.head_dim % 2:
        raise GGUFExportError(f"rotary embeddings need an even head_dim, got {cfg.head_dim}")


def vocab(tokenizer: Tokenizer) -> tuple[list[str], list[int]]:
    """(token texts by id, llama.cpp token types by id) for the character tokenizer."""
    gguf = require_gguf()
    by_id = {i: t for t, i in tokenizer.backend.get_vocab(with_added_tokens=True).items()}
    texts, types = [], []
    for i in range(len(by_id)):
        text = by_id[i]
        if text in (PAD, BOS, EOS):
            types.append(gguf.TokenType.CONTROL)
        elif text == UNK:
            types.append(gguf.TokenType.UNKNOWN)
        else:
            types.append(gguf.TokenType.NORMAL)
        texts.append(SPM_SPACE if text == " " else text)
    return texts, [int(t) for t in types]


def export_gguf(model: CausalLM, tokenizer: Tokenizer, path: str | Path, dtype: str = "f32", name: str = "posttrain") -> Path:
    """Write `model` (its current weights) and `tokenizer` as one GGUF file at `path`; return the path.

    dtype "f32": every tensor exactly as posttrain holds it (up to the rotary row order of q and k).
    dtype "q8_0": every matrix whose rows are a multiple of 32 wide (all of them in the benchmark's
    shapes) as llama.cpp's Q8_0 blocks, the rest f32.
    """
    if dtype not in GGUF_DTYPES:
        raise GGUFExportError(f"GGUF dtype must be one of {', '.join(GGUF_DTYPES)}; got {dtype!r}")
    check_exportable(model, tokenizer)
    gguf = require_gguf()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    q8 = dtype == "q8_0"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    _add_hyperparameters(writer, model.config, name, q8)
    _add_tokenizer(writer, tokenizer)
    _add_tensors(writer, model, q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_hyperparameters(writer, cfg: ModelConfig, name: str, q8: bool) -> None:
    """The llama architecture's metadata: the file type and the model's shape, rotary and norm constants."""
    gguf = require_gguf()
    head_dim = int(cfg.head_dim or 0)
    writer.add_name(name)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.ALL_F32))
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(cfg.rope_theta))
    writer.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))


def _add_tokenizer(writer, tokenizer: Tokenizer) -> None:
    """The character vocabulary as a llama (SentencePiece-style) tokenizer, its special ids and BOS/EOS habits."""
    texts, types = vocab(tokenizer)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(texts)
    writer.add_token_scores([0.0] * len(texts))  # equal scores: no merge is preferred, every character stays a token
    writer.add_token_types(types)
    for add, token_id in ((writer.add_bos_token_id, tokenizer.bos_id), (writer.add_eos_token_id, tokenizer.eos_id),
                          (writer.add_pad_token_id, tokenizer.pad_id),
                          (writer.add_unk_token_id, tokenizer.backend.token_to_id(UNK))):  # fmt: skip
        if token_id is not None:
            add(int(token_id))
    writer.add_add_bos_token(tokenizer.bos_id is not None)  # as posttrain's encode(add_bos=True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)


def _add_tensors(writer, model: CausalLM, q8: bool) -> None:
    """Every weight under llama.cpp's tensor names, in its order; q and k rows in adjacent-pair rotary order."""
    gguf = require_gguf()
    cfg = model.config
    head_dim = int(cfg.head_dim or 0)

    def put(kind, weight: torch.Tensor, bid: int | None = None, suffix: str = "weight", rows: np.ndarray | None = None):
        tensor_name = gguf.TENSOR_NAMES[kind].format(bid=bid) + "." + suffix
        data = weight.detach().float().cpu().numpy()
        if rows is not None:
            data = data[rows]
        data = np.ascontiguousarray(data, dtype=np.float32)
        if q8 and data.ndim == 2 and data.shape[1] % 32 == 0:
            writer.add_tensor(tensor_name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)  # fmt: skip
        else:
            writer.add_tensor(tensor_name, data)

    T = gguf.MODEL_TENSOR
    q_rows = rope_pair_order(cfg.num_attention_heads, head_dim)
    k_rows = rope_pair_order(cfg.num_key_value_heads, head_dim)
    put(T.TOKEN_EMBD, model.model.embed_tokens.weight)
    put(T.OUTPUT_NORM, model.model.norm.weight)
    if not cfg.tie_word_embeddings:
        put(T.OUTPUT, model.lm_head.weight)
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        put(T.ATTN_NORM, layer.input_layernorm.weight, i)
        put(T.ATTN_Q, attn.q_proj.weight, i, rows=q_rows)
        put(T.ATTN_K, attn.k_proj.weight, i, rows=k_rows)
        put(T.ATTN_V, attn.v_proj.weight, i)
        if cfg.attention_bias:
            put(T.ATTN_Q, attn.q_proj.bias, i, "bias", rows=q_rows)
            put(T.ATTN_K, attn.k_proj.bias, i, "bias", rows=k_rows)
            put(T.ATTN_V, attn.v_proj.bias, i, "bias")
        put(T.ATTN_OUT, attn.o_proj.weight, i)
        put(T.FFN_NORM, layer.post_attention_layernorm.weight, i)
        put(T.FFN_GATE, mlp.gate_proj.weight, i)
        put(T.FFN_UP, mlp.up_proj.weight, i)
        put(T.FFN_DOWN, mlp.down_proj.weight, i)
