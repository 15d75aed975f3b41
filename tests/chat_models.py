"""Tiny chat checkpoints built locally (never downloaded): a byte-level BPE tokenizer with chat special tokens,
a Qwen3-shaped random model, and a Qwen3-, Llama-3- or ChatML-style chat template in tokenizer_config.json.

A plain module (not conftest) so tests import it by a unique name (see tiny_models.py).
"""

from __future__ import annotations

import json

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from posttrain.models import CausalLM, ModelConfig, save_model
from posttrain.models.tokenizer import Tokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
            "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

# The shape of Qwen3's template: system first, a namespace finding the last user query, reasoning content in
# <think> blocks for the turns after it, tool calls, and `enable_thinking` deciding the empty think block.
QWEN3 = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' and message.content is string and "
    "not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.content is string %}{%- set content = message.content %}{%- else %}{%- set content = '' %}"
    "{%- endif %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning_content = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' "
    "+ content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

# Llama 3 Instruct's: BOS written by the template, headers, content trimmed, <|eot_id|> closing every turn.
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

# ChatML with a default system message when the conversation has none.
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TEMPLATES = {"qwen3": QWEN3, "llama3": LLAMA3, "chatml": CHATML}
# (bos, eos, pad) as each family's tokenizer_config.json names them
SPECIAL_ROLES = {"qwen3": (None, "<|im_end|>", "<|endoftext|>"),
                 "llama3": ("<|begin_of_text|>", "<|end_of_text|>", None),
                 "chatml": (None, "<|endoftext|>", "<|endoftext|>")}

_CORPUS = ["What is 12+34? 46", "The answer is 7.", "You are a helpful assistant.", "Answer with a number.",
           "system user assistant", "0123456789 + - * = ?", "Hello, how are you today?"] * 20


def bpe_tokenizer(family: str = "qwen3") -> Tokenizer:
    """A byte-level BPE tokenizer (vocabulary ~400) trained here on a few lines, with the chat special tokens."""
    backend = HFTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(_CORPUS, trainer)
    bos, eos, pad = SPECIAL_ROLES[family]
    tok = Tokenizer(backend, bos, eos, pad)
    tok.chat_template = TEMPLATES[family]
    return tok


def make_chat_model(path, family: str = "qwen3", seed: int = 0, hidden: int = 32, layers: int = 2):
    """A tiny random Qwen3-shaped checkpoint with `family`'s chat template, saved in HF format at `path`."""
    tok = bpe_tokenizer(family)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, model_type="qwen3")
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    save_model(model, tok, path)
    config = json.loads((path / "tokenizer_config.json").read_text())
    assert config["chat_template"] == TEMPLATES[family]  # the template travels with the tokenizer
    return path
