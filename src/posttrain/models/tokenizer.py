"""Tokenizers: the built-in character-level one, and any HF `tokenizer.json`.

Covers: encoding and decoding with explicit BOS/EOS/PAD ids, built on the
`tokenizers` library, saved and loaded as `tokenizer.json` (+
`tokenizer_config.json` naming the special tokens) so transformers can load
what posttrain writes.
A checkpoint's chat template (`chat_template` in `tokenizer_config.json`, or
`chat_template.jinja`) travels with the tokenizer unread, so every checkpoint a
run writes keeps the template its base shipped.
Does not cover: rendering chat templates (`engine/chat.py`).
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

from tokenizers import Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from posttrain.errors import UserError

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
CHARSET = "\n" + "".join(c for c in string.printable if c not in "\t\n\r\x0b\x0c")


class TokenizerFileError(UserError, FileNotFoundError):
    """A checkpoint directory without the tokenizer.json it needs."""


class Tokenizer:
    """A thin, typed wrapper over `tokenizers.Tokenizer`."""

    def __init__(self, backend: HFTokenizer, bos: str | None, eos: str | None, pad: str | None) -> None:
        self.backend = backend
        self.bos_token, self.eos_token, self.pad_token = bos, eos, pad
        self.bos_id = backend.token_to_id(bos) if bos else None
        self.eos_id = backend.token_to_id(eos) if eos else None
        pad_id = backend.token_to_id(pad) if pad else None
        # Padding never reaches attention (it is masked), so any id will do when a model has none.
        self.pad_id = pad_id if pad_id is not None else (self.eos_id if self.eos_id is not None else 0)
        self.chat_template: Any = None  # tokenizer_config.json's `chat_template` as loaded (a string or named list)
        self.chat_template_jinja: str | None = None  # a `chat_template.jinja` file's text

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = self.backend.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos and self.bos_id is not None else ids

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(ids, skip_special_tokens=True)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        self.backend.save(str(directory / "tokenizer.json"))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "pad_token": self.pad_token,
            "unk_token": UNK if self.backend.token_to_id(UNK) is not None else None,
            "clean_up_tokenization_spaces": False,
        }
        if self.chat_template is not None:
            config["chat_template"] = self.chat_template
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
        if self.chat_template_jinja is not None:
            (directory / "chat_template.jinja").write_text(self.chat_template_jinja)

    @classmethod
    def load(cls, directory: str | Path, model_config: dict | None = None) -> "Tokenizer":
        """Load `tokenizer.json`; special tokens from `tokenizer_config.json`, else config.json ids."""
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.exists():
            raise TokenizerFileError(f"{path} not found: a checkpoint needs a tokenizer.json")
        backend = HFTokenizer.from_file(str(path))
        specials: dict[str, str | None] = {}
        tc_path = directory / "tokenizer_config.json"
        tc: dict[str, Any] = {}
        if tc_path.exists():
            tc = json.loads(tc_path.read_text())
            for key in ("bos_token", "eos_token", "pad_token"):
                value = tc.get(key)
                specials[key] = value.get("content") if isinstance(value, dict) else value
        if model_config:
            for key in ("bos", "eos", "pad"):
                tid = model_config.get(f"{key}_token_id")
                if isinstance(tid, list):
                    tid = tid[0] if tid else None
                if specials.get(f"{key}_token") is None and tid is not None:
                    specials[f"{key}_token"] = backend.id_to_token(tid)
        tokenizer = cls(backend, specials.get("bos_token"), specials.get("eos_token"), specials.get("pad_token"))
        tokenizer.chat_template = tc.get("chat_template")
        jinja = directory / "chat_template.jinja"
        tokenizer.chat_template_jinja = jinja.read_text() if jinja.exists() else None
        return tokenizer


def char_tokenizer() -> Tokenizer:
    """The built-in tokenizer: one token per printable ASCII character plus 4 specials."""
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK, *CHARSET])}
    backend = HFTokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([PAD, BOS, EOS, UNK])
    return Tokenizer(backend, BOS, EOS, PAD)


def merging_tokenizer(words: tuple[str, ...] = ("read", "submit", "tool_call")) -> Tokenizer:
    """The built-in characters plus BPE merges that spell each of `words` as one token: a text has several
    encodings (one id per character, or the merged ids), so a runtime that re-encoded sampled text would change
    the ids. The test double for "nothing is ever re-tokenised" (`tests/_harness/tito.py`, `benchmarks/tito.py`)."""
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK, *CHARSET])}
    merges = []
    for word in words:
        for k in range(2, len(word) + 1):
            merges.append((word[: k - 1], word[k - 1]))
            vocab.setdefault(word[:k], len(vocab))
    backend = HFTokenizer(models.BPE(vocab, merges, unk_token=UNK))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([PAD, BOS, EOS, UNK])
    return Tokenizer(backend, BOS, EOS, PAD)
