"""Reading an answer out of a model's response.

Covers: the whole response (stripped), the last number, the contents of the
last `\\boxed{...}` (nested braces allowed), `<answer>...</answer>` tags, and
`auto` (the last `\\boxed{}`, else the last `<answer>` tag, else the last number).
Does not cover: mathematical normalisation (that is the equivalence verifier's job).
"""

from __future__ import annotations

import re
from typing import Literal

ExtractMode = Literal["full", "last_number", "boxed", "tag", "auto"]

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None  # unbalanced: no answer rather than a guess


def tagged(text: str) -> str | None:
    found = _TAG.findall(text)
    return found[-1].strip() if found else None


def extract_answer(text: str, mode: ExtractMode = "full") -> str | None:
    """The answer in `text` per `mode`, or None when there is none to read."""
    if mode == "full":
        return text.strip()
    if mode == "last_number":
        return last_number(text)
    if mode == "boxed":
        return last_boxed(text)
    if mode == "tag":
        return tagged(text)
    if mode == "auto":
        for found in (last_boxed(text), tagged(text)):
            if found is not None:
                return found
        return last_number(text)
    raise ValueError(f"unknown extraction mode {mode!r}")
