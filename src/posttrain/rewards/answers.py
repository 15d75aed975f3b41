"""Mathematical-equivalence answers: `1/2`, `0.5` and `\\frac{1}{2}` are the same answer.

Covers: `MathEquivalence`, a verifier that reads the answer from a response
(`\\boxed{}`, `<answer>` tags, or wherever `math-verify` finds the last
expression), parses it and the gold answer into SymPy objects with
`math-verify` (LaTeX and plain expressions: numbers, fractions, polynomials,
sets, intervals, equations), and accepts when they are equivalent. Garbage or
an unparseable answer is a wrong answer; a gold answer that does not parse is
an ERROR (the task, not the model, is broken).
Does not cover: exact and numeric matching (`verifiers.py`).

Why no SymPy-only fallback: SymPy's own `parse_expr` evaluates Python code,
which must never see a model's output in the host. Without the `math` extra
the verifier says so at construction (`pip install 'posttrain[math]'`).

Time bounds: `math-verify` bounds each parse and comparison with SIGALRM,
which only works on the main thread (where the trainer scores). Off the main
thread it runs unbounded, so there answers are capped in length and
exponent towers (`9^{9^{9}}`), which SymPy may try to expand for ever, are
refused as wrong.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.extras import require
from posttrain.rewards.base import SyncVerifier
from posttrain.rewards.extract import ExtractMode, extract_answer, last_boxed, tagged
from posttrain.rewards.registry import register_verifier
from posttrain.types import Task, Verdict

_TOWER = re.compile(r"\^\s*\{[^{}]*\^|\^\s*\(?[\d.]+\)?\s*\^|\*\*[^*]*\*\*")


@functools.cache
def _math_verify() -> Any:
    return require("math_verify", "math", "math equivalence")


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@dataclass
class MathEquivalence(SyncVerifier):
    """1.0 when the response's answer is mathematically equivalent to the gold answer.

    `extract="auto"` reads the last `\\boxed{}`, else the last `<answer>` tag,
    else lets math-verify find the last expression in the whole response; any
    other `ExtractMode` reads the answer that way first.
    """

    extract: Literal["auto"] | ExtractMode = "auto"
    float_rounding: int = 6
    strict: bool = True
    timeout_s: int = 5
    max_answer_chars: int = 1000
    name: str = "math"

    def __post_init__(self) -> None:
        _math_verify()
        self._gold: dict[str, list[Any]] = {}  # parsed gold answers: a task is scored n times per step
        if self.timeout_s < 1:
            raise ValueError(f"math: timeout_s must be a whole number of seconds >= 1, got {self.timeout_s}")

    def _parse(self, text: str, wrap: bool, timeout: int | None) -> list[Any]:
        mv = _math_verify()
        config = [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()]
        found = mv.parse(f"${text}$", config, parsing_timeout=timeout) if wrap else []
        return found or mv.parse(text, config, parsing_timeout=timeout)

    def _answer_text(self, response: str) -> tuple[str | None, bool]:
        """The text to parse and whether it is an isolated answer (wrapped as LaTeX math) or a whole response."""
        if self.extract == "auto":
            found = last_boxed(response)
            if found is None:
                found = tagged(response)
            if found is not None:
                return found, True
            return response[-4 * self.max_answer_chars :], False
        return extract_answer(response, self.extract), True

    def verify(self, task: Task, response: str) -> Verdict:
        if task.answer is None:
            raise ValueError(f"task {task.id!r} has no gold answer")
        main = _on_main_thread()
        timeout = self.timeout_s if main else None
        gold = self._gold.get(task.answer)
        if gold is None:
            gold = self._parse(task.answer.strip(), True, timeout)
            if len(self._gold) < 4096:
                self._gold[task.answer] = gold
        if not gold:
            raise ValueError(f"task {task.id!r}: gold answer {task.answer!r} does not parse as math")
        text, isolated = self._answer_text(response)
        if text is None or not text.strip():
            return Verdict(0.0, False, details="no answer found")
        if isolated and len(text) > self.max_answer_chars:
            return Verdict(0.0, False, details=f"answer is {len(text)} chars, over the {self.max_answer_chars} cap")
        if not main and _TOWER.search(text):
            return Verdict(0.0, False, details="nested exponents refused (no time bound off the main thread)")
        got = self._parse(text, isolated, timeout)
        if not got:
            return Verdict(0.0, False, details=f"no parseable answer in {text[:80]!r}")
        hit = bool(
            _math_verify().verify(gold, got, float_rounding=self.float_rounding, strict=self.strict, timeout_seconds=timeout)
        )
        shown = got[-1] if isinstance(got[-1], str) else got[0]
        return Verdict(float(hit), hit, details="" if hit else f"expected {task.answer.strip()!r}, got {str(shown)[:80]!r}")


@register_verifier("math")
def _math(**params: Any) -> MathEquivalence:
    return MathEquivalence(**params)
