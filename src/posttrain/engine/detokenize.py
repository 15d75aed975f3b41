"""Completion text: incremental detokenisation at a constant cost per token, and stop strings.

Covers: `IncrementalText`, which decodes only a short window at the end of
the sequence for every new token (a token's text can depend on its
neighbours, so the window keeps the previous piece as context; text that ends
in an incomplete UTF-8 sequence is held back until it completes, so nothing
streamed is ever taken back), and `text_deltas`, one text piece per token of a
finished completion whose pieces concatenate to exactly its text (text past it,
cut by a stop string, never appears); `find_stop`, the earliest stop string in
a text.
Does not cover: when to stop or what to hold back while streaming (the engine
decides: engine/local/emit.py); decoders under which a later token changes
text already decided. One of HF's does, on junk output (a random model's):
`ByteFallback` turns a run of <0xNN> tokens that is not UTF-8 as a whole into
one U+FFFD per byte, so an ASCII byte token followed by junk bytes streams as
its character but reads as U+FFFD in the final text (valid runs, the
characters a vocabulary lacks, stream exactly: tests/engine/test_streaming.py).
"""

from __future__ import annotations

from collections.abc import Callable

Decode = Callable[[list[int]], str]


class IncrementalText:
    """`decode(ids)` up to what is still undecidable, kept current token by token.

    >>> t = IncrementalText(tokenizer.decode)
    >>> [t.push(i) for i in tokenizer.encode("hi", add_bos=False)]
    ['h', 'i']
    >>> t.text, t.tail(1), t.length
    ('hi', 'i', 2)

    Each `push` decodes two windows: the last committed piece (context) and
    that piece plus the tokens since; the difference is the new text. The
    windows stay a token or two long, except while the output ends in bytes
    that do not yet form a character. The text is kept as pieces (never
    copied whole per token); `tail(n)` reads its end.
    """

    __slots__ = ("decode", "ids", "length", "_pieces", "_prefix_at", "_read_at", "_prefix_len")

    def __init__(self, decode: Decode) -> None:
        self.decode = decode
        self.ids: list[int] = []
        self.length = 0  # characters of text so far
        self._pieces: list[str] = []
        self._prefix_at = 0  # decode(ids[_prefix_at:_read_at]) is context whose text is already in `text`
        self._read_at = 0
        self._prefix_len = 0  # len(decode(ids[_prefix_at:_read_at]))

    def push(self, token: int) -> str:
        """Add one token; return the text that became final with it ("" while held back)."""
        self.ids.append(token)
        window = self.decode(self.ids[self._prefix_at :])
        if len(window) <= self._prefix_len or window.endswith("\ufffd"):
            return ""
        new = window[self._prefix_len :]
        self._prefix_at, self._read_at = self._read_at, len(self.ids)
        self._prefix_len = len(self.decode(self.ids[self._prefix_at : self._read_at]))
        self._pieces.append(new)
        self.length += len(new)
        return new

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def tail(self, n: int) -> str:
        """The last `n` characters of the text (all of it when shorter)."""
        if n <= 0:
            return ""
        got, have = [], 0
        for piece in reversed(self._pieces):
            got.append(piece)
            have += len(piece)
            if have >= n:
                break
        return "".join(reversed(got))[-n:]


def text_deltas(decode: Decode, token_ids: list[int], final_text: str) -> list[str]:
    """One text piece per token whose concatenation is exactly `final_text`.

    Incremental (`IncrementalText`); text past `final_text` (a stop string the
    engine cut) is never emitted, and what the windows could not decide comes
    with the last piece.
    """
    stream = IncrementalText(decode)
    pieces, emitted = [], 0
    for t in token_ids:
        new = stream.push(t)
        upto = min(len(final_text), emitted + len(new))
        pieces.append(final_text[emitted:upto])
        emitted = upto
    if pieces:
        pieces[-1] += final_text[emitted:]
    return pieces


def find_stop(text: str, stops: tuple[str, ...], search_from: int = 0) -> int:
    """Index in `text` where the earliest stop string starts (looking from `search_from`), or -1."""
    best = -1
    for s in stops:
        i = text.find(s, search_from)
        if i >= 0 and (best < 0 or i < best):
            best = i
    return best
