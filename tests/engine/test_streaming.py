"""Streaming text: what `stream` sends equals what `generate` returns, for several tokenizers and stop
strings, and detokenising costs a bounded amount per token (issue 12, item 10).

The tokenizers are built here (never downloaded): the built-in character tokenizer, a byte-level BPE
(GPT-2 style: characters outside ASCII are several byte tokens) and a Metaspace BPE with byte
fallback (Llama/SentencePiece style: a token's leading space depends on its neighbours), each under a
random model of its vocabulary, so completions hold every awkward case: split UTF-8 characters,
undecodable bytes, special tokens that decode to nothing.
"""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from posttrain.engine import LocalEngine
from posttrain.engine.detokenize import IncrementalText, text_deltas
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.models.tokenizer import Tokenizer
from posttrain.types import SamplingParams

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "café naïve résumé über straße",
    "日本語のテキストと中文文本",
    "emoji 🙂🚀 and math ∑∫√ symbols",
    "12+34=46 and 7*8=56, then 100-1=99",
] * 20
SPECIALS = ["<pad>", "<bos>", "<eos>"]


def byte_level_bpe() -> Tokenizer:
    backend = HFTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(CORPUS, trainer)
    return Tokenizer(backend, "<bos>", "<eos>", "<pad>")


def metaspace_bpe(byte_fallback: bool = False) -> Tokenizer:
    """SentencePiece-style: "▁" marks a word's leading space, and the decoder strips the text's first one."""
    trained = HFTokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trained.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS))
    spec = json.loads(trained.to_str())["model"]
    vocab = dict(spec["vocab"])
    steps = [decoders.Replace("▁", " ")]
    if byte_fallback:  # any character the vocabulary lacks becomes its UTF-8 bytes, as <0xNN> tokens
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", len(vocab))
        steps.append(decoders.ByteFallback())
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=byte_fallback))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Sequence([*steps, decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    backend.add_special_tokens(SPECIALS)
    return Tokenizer(backend, "<bos>", "<eos>", "<pad>")


TOKENIZERS = {"char": char_tokenizer, "byte-level-bpe": byte_level_bpe, "metaspace-bpe": metaspace_bpe}


def engine_for(tok: Tokenizer, seed: int = 0) -> LocalEngine:
    cfg = ModelConfig(
        vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed), std=0.5)  # a spread-out distribution: every kind of token
    return LocalEngine(model.eval(), tok, seed=seed)


def streamed(engine: LocalEngine, prompts, params) -> dict[tuple[int, int], tuple[str, list[int]]]:
    out: dict[tuple[int, int], tuple[str, list[int]]] = {}
    for d in engine.stream(prompts, params):
        text, ids = out.get((d.prompt_index, d.sample_index), ("", []))
        out[(d.prompt_index, d.sample_index)] = (text + d.text, ids + d.token_ids)
    return out


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@pytest.mark.slow
def test_streamed_text_equals_generated_text(name):
    tok = TOKENIZERS[name]()
    engine = engine_for(tok)
    prompts = ["café ", "12+34=", "日本"]
    params = SamplingParams(n=3, max_tokens=40, temperature=1.0, seed=7, ignore_eos=True)
    want = engine.generate(prompts, params)
    got = streamed(engine, prompts, params)
    if name != "char":  # (the character tokenizer is ASCII only) the hard cases occur
        assert any(any("\ufffd" in c.text or not c.text.isascii() for c in g) for g in want)
    for i, group in enumerate(want):
        for j, c in enumerate(group):
            assert got[(i, j)] == (c.text, c.token_ids)


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@pytest.mark.slow
def test_stop_strings_stream_exactly_the_cut_text(name):
    tok = TOKENIZERS[name]()
    engine = engine_for(tok, seed=1)
    free = engine.generate(["the "], SamplingParams(n=4, max_tokens=30, temperature=1.0, seed=3, ignore_eos=True))[0]
    # stop strings taken from inside the free completions, so they fire (several characters long, so
    # text is held back while it might still become one), plus one that never occurs
    stops = tuple({c.text[len(c.text) // 2 : len(c.text) // 2 + 3] for c in free if len(c.text) > 6} | {"@@never@@"})
    params = SamplingParams(n=4, max_tokens=30, temperature=1.0, seed=3, ignore_eos=True, stop=stops)
    want = engine.generate(["the "], params)[0]
    assert any(c.finish_reason.value == "stop" for c in want)
    got = streamed(engine, ["the "], params)
    for j, c in enumerate(want):
        assert got[(0, j)] == (c.text, c.token_ids)
        assert not any(s in c.text for s in stops)


def test_text_streams_token_by_token_not_at_the_end():
    engine = engine_for(char_tokenizer())
    deltas = [d for d in engine.stream(["12+"], SamplingParams(max_tokens=30, temperature=0, ignore_eos=True))]
    with_text = [d for d in deltas[:-1] if d.text]
    assert len(with_text) > 20  # a character tokenizer: (nearly) every token brings its character at once


def test_detokenising_costs_a_bounded_window_per_token():
    """The windows decoded per token stay short however long the output grows (no re-decoding from the start)."""
    tok = byte_level_bpe()
    engine = engine_for(tok, seed=2)
    lengths: list[int] = []
    decode = tok.decode

    def counting(ids):
        lengths.append(len(ids))
        return decode(ids)

    tok.decode = counting
    try:
        n = 400
        (c,) = [
            d.completion
            for d in engine.stream(["x"], SamplingParams(max_tokens=n, temperature=1.0, seed=0, ignore_eos=True))
            if d.completion
        ]
    finally:
        tok.decode = decode
    assert len(c.token_ids) == n
    windows = [k for k in lengths if k != n]  # everything but the one full decode of the finished completion
    assert len(lengths) - len(windows) == 1
    assert sum(windows) <= 12 * n  # linear in the output, not quadratic (the old stream decoded ~n^2/2 tokens)


def test_byte_fallback_characters_stream_whole():
    """Llama-style byte fallback: a character outside the vocabulary is several <0xNN> tokens, held back
    until they make the character (a run that is not UTF-8 as a whole is out of scope: detokenize.py)."""
    tok = metaspace_bpe(byte_fallback=True)
    text = "a ∑ b 🚀 c"  # neither ∑ nor 🚀 is in the corpus' vocabulary
    ids = tok.encode(text, add_bos=False)
    assert len(ids) > len(text.split())  # the bytes are tokens of their own
    assert tok.decode(ids) == text
    pieces = text_deltas(tok.decode, ids, text)
    assert "".join(pieces) == text
    stream = IncrementalText(tok.decode)
    assert "".join(stream.push(t) for t in ids) == text
    assert all("\ufffd" not in p for p in pieces)  # no half character is ever sent


def test_incremental_text_matches_whole_decodes_on_random_ids():
    """Property over random id sequences of the byte-level vocabulary (split characters, junk bytes)."""
    tok = byte_level_bpe()
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        ids = torch.randint(0, tok.vocab_size, (int(torch.randint(1, 60, (1,), generator=g)),), generator=g).tolist()
        stream = IncrementalText(tok.decode)
        pieces = [stream.push(t) for t in ids]
        full = tok.decode(ids)
        assert full.startswith("".join(pieces)) and stream.text == "".join(pieces)
        assert full[: stream.length] == stream.text
        assert "".join(text_deltas(tok.decode, ids, full)) == full
        assert stream.tail(3) == stream.text[-3:]
