"""Constraint verifiers: length limits, required and forbidden text, and per-task predicates.

Covers: `LengthLimit` (characters, words, and a tokenizer-free token
estimate), `ContainsConstraint` (must contain / must not contain, with case
options, all-or-nothing or partial credit), and `PredicateConstraint`, which
calls a *named* Python predicate from a registry (`register_predicate`) with
arguments from the spec merged with the task's `meta["predicate_args"]`.
Task files choose among registered predicates by name and pass data; they
never ship code, and nothing here evaluates a string.
Does not cover: format shape (`format.py`) or correctness of the answer.

Each per-task limit can also come from the task's meta (`meta["max_words"]`,
`meta["must_contain"]`, ...), so one spec serves a whole instruction-following
suite whose tasks differ in their constraints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from posttrain.rewards.base import SyncVerifier
from posttrain.rewards.registry import register_verifier
from posttrain.types import Task, Verdict

_WORD = re.compile(r"\S+")
_TOKENISH = re.compile(r"\w+|[^\w\s]")


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


def count_tokens_estimate(text: str) -> int:
    """Word pieces and punctuation marks: a tokenizer-free stand-in, close to BPE counts for English prose."""
    return len(_TOKENISH.findall(text))


_MEASURES: dict[str, Callable[[str], int]] = {"chars": len, "words": count_words, "tokens": count_tokens_estimate}


@dataclass
class LengthLimit(SyncVerifier):
    """1.0 when every set bound holds: `min_/max_` `chars`, `words`, `tokens` (a task's meta may set them too)."""

    min_chars: int | None = None
    max_chars: int | None = None
    min_words: int | None = None
    max_words: int | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    name: str = "length"

    def verify(self, task: Task, response: str) -> Verdict:
        problems = []
        bounds = {"chars": (self.min_chars, self.max_chars), "words": (self.min_words, self.max_words),
                  "tokens": (self.min_tokens, self.max_tokens)}
        for unit, measure in _MEASURES.items():
            lo = task.meta.get(f"min_{unit}", bounds[unit][0])  # a task's meta keys are the field names
            hi = task.meta.get(f"max_{unit}", bounds[unit][1])
            if lo is None and hi is None:
                continue
            n = measure(response)
            if lo is not None and n < int(lo):
                problems.append(f"{n} {unit} < min {lo}")
            if hi is not None and n > int(hi):
                problems.append(f"{n} {unit} > max {hi}")
        ok = not problems
        return Verdict(float(ok), ok, details="; ".join(problems))


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"{what} must be a string or a list of strings, got {value!r}")


@dataclass
class ContainsConstraint(SyncVerifier):
    """Required (`must`) and forbidden (`must_not`) substrings, plus the task's `meta["must_contain"]` /
    `meta["must_not_contain"]`. `partial`: score is the fraction of constraints met (passed only when all are)."""

    must: list[str] = field(default_factory=list)
    must_not: list[str] = field(default_factory=list)
    case_sensitive: bool = False
    whole_word: bool = False
    partial: bool = False
    name: str = "contains"

    def _found(self, needle: str, text: str) -> bool:
        flags = 0 if self.case_sensitive else re.IGNORECASE
        if self.whole_word:
            return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", text, flags) is not None
        return (needle in text) if self.case_sensitive else (needle.casefold() in text.casefold())

    def verify(self, task: Task, response: str) -> Verdict:
        must = _strings(self.must, "must") + _strings(task.meta.get("must_contain"), "meta['must_contain']")
        must_not = _strings(self.must_not, "must_not") + _strings(task.meta.get("must_not_contain"), "meta['must_not_contain']")
        if not must and not must_not:
            raise ValueError(f"task {task.id!r}: contains verifier with no constraints")
        missing = [s for s in must if not self._found(s, response)]
        present = [s for s in must_not if self._found(s, response)]
        met = len(must) + len(must_not) - len(missing) - len(present)
        ok = not missing and not present
        value = met / (len(must) + len(must_not)) if self.partial else float(ok)
        notes = [f"missing {s!r}" for s in missing] + [f"forbidden {s!r} present" for s in present]
        return Verdict(value, ok, details="; ".join(notes)[:400])


# Named predicates: (response, task, **args) -> bool | float in [0, 1] | (bool | float, detail)
Predicate = Callable[..., Any]
_PREDICATES: dict[str, Predicate] = {}


def register_predicate(name: str) -> Callable[[Predicate], Predicate]:
    """Make a Python predicate callable from specs and task files by name.

    >>> @register_predicate("palindrome")
    ... def palindrome(response, task):
    ...     text = response.strip().lower()
    ...     return text == text[::-1]
    """

    def decorate(fn: Predicate) -> Predicate:
        _PREDICATES[name] = fn
        return fn

    return decorate


def predicate_names() -> list[str]:
    return sorted(_PREDICATES)


@dataclass
class PredicateConstraint(SyncVerifier):
    """Runs the registered predicate `predicate` (or the task's `meta["predicate"]`) with `args` merged
    with the task's `meta["predicate_args"]`. A bool is 1.0/0.0; a float in [0, 1] is partial credit."""

    predicate: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    name: str = "predicate"

    def __post_init__(self) -> None:
        if self.predicate is not None and self.predicate not in _PREDICATES:
            raise ValueError(f"unknown predicate {self.predicate!r}: known are {', '.join(predicate_names())}")

    def version_key(self) -> str:
        import inspect

        name = self.predicate
        fn = _PREDICATES.get(name) if name else None
        try:
            return inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            return getattr(fn, "__qualname__", "")

    def verify(self, task: Task, response: str) -> Verdict:
        name = self.predicate or task.meta.get("predicate")
        if name not in _PREDICATES:
            raise ValueError(f"task {task.id!r}: unknown predicate {name!r}: known are {', '.join(predicate_names())}")
        extra = task.meta.get("predicate_args", {})
        if not isinstance(extra, dict):
            raise ValueError(f"task {task.id!r}: meta['predicate_args'] must be an object")
        out = _PREDICATES[name](response, task, **{**self.args, **extra})
        detail = ""
        if isinstance(out, tuple):
            out, detail = out
        if isinstance(out, bool):
            return Verdict(float(out), out, details="" if out else (detail or f"{name} is false"))
        value = float(out)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"predicate {name!r} returned {value}, outside [0, 1]")
        return Verdict(value, value >= 1.0, details=detail)


@register_predicate("starts_with")
def _starts_with(response: str, task: Task, prefix: str, case_sensitive: bool = True) -> bool:
    text = response.lstrip()
    return text.startswith(prefix) if case_sensitive else text.casefold().startswith(prefix.casefold())


@register_predicate("ends_with")
def _ends_with(response: str, task: Task, suffix: str, case_sensitive: bool = True) -> bool:
    text = response.rstrip()
    return text.endswith(suffix) if case_sensitive else text.casefold().endswith(suffix.casefold())


@register_predicate("line_count")
def _line_count(response: str, task: Task, min: int = 0, max: int | None = None) -> tuple[bool, str]:  # noqa: A002
    n = len(response.strip().splitlines())
    return (n >= min and (max is None or n <= max)), f"{n} lines, wanted {min}..{max if max is not None else 'inf'}"


@register_predicate("is_json")
def _is_json(response: str, task: Task) -> bool:
    try:
        json.loads(response)
    except (ValueError, RecursionError):
        return False
    return True


@register_predicate("lowercase")
def _lowercase(response: str, task: Task) -> bool:
    return response == response.lower()


@register_predicate("uppercase")
def _uppercase(response: str, task: Task) -> bool:
    return response == response.upper()


@register_predicate("no_digits")
def _no_digits(response: str, task: Task) -> bool:
    return not any(c.isdigit() for c in response)


@register_predicate("count_at_least")
def _count_at_least(response: str, task: Task, text: str, n: int = 1, case_sensitive: bool = False) -> tuple[bool, str]:
    hay, needle = (response, text) if case_sensitive else (response.casefold(), text.casefold())
    found = hay.count(needle) if needle else 0
    return found >= n, f"{text!r} appears {found} times, wanted >= {n}"


@register_predicate("contains_answer")
def _contains_answer(response: str, task: Task) -> bool:
    return task.answer is not None and task.answer.strip() in response


@register_verifier("length")
def _length(**params: Any) -> LengthLimit:
    return LengthLimit(**params)


@register_verifier("contains")
def _contains(**params: Any) -> ContainsConstraint:
    return ContainsConstraint(**params)


@register_verifier("predicate")
def _predicate(**params: Any) -> PredicateConstraint:
    return PredicateConstraint(**params)
