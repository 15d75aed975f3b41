"""Procedural code-writing tasks: the answer is a short Python program, checked by generated tests.

Covers two families, small enough for the built-in character-level model:

- `ops`: a chain of operations applied to `x` left to right, no precedence
  (`x +3 *2 -1 ->`); the answer is a Python expression computing it
  (`(x+3)*2-1`), so the model must place parentheses where Python's
  precedence would otherwise change the result. Knobs: `max_ops` (chain
  length), `digits` (constant size), `operators` (add `//` and `%` to make
  it harder).
- `linear`: three input/output examples of an integer linear function
  (`f(0)=3 f(1)=5 f(2)=7 ->`); the answer is an expression in `x`
  (`2*x+3`). Knob: `digits` (size of slope and intercept).

Each task carries, in `meta`, Python assert-style tests (`assert f(4) == 11`)
at hidden inputs as well as the shown ones, the function name and the
template that turns a response into a module (`def f(x):\n    return
{response}\n`); the sandboxed unit-test verifier (`rewards/code.py`,
kind `python_tests`, wrapped in `dedup` so a batch's identical responses run
once) runs them, so any program with the same behaviour scores full marks,
partial credit is the fraction of tests passed, and a lookup table of the
shown examples fails the hidden inputs. Expected
outputs are computed here from the task's own specification, never by
running model output on the host. The split is a hash of the specification,
as in `arithmetic.py`, so a held-out problem is never trained on.
Does not cover: running the tests (the verifier's job) or multi-line programs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.tasks.base import GeneratedSource, Split, split_of
from posttrain.tasks.domains import Domain, SamplingDefaults, register_domain, reject_unknown
from posttrain.types import Task

CodeFamily = Literal["ops", "linear"]
CODE_FAMILIES: tuple[str, ...] = ("ops", "linear")
OPERATORS: tuple[str, ...] = ("+", "-", "*", "//", "%")
ENTRY_POINT = "f"
TEMPLATE = "def f(x):\n    return {response}\n"
# The sandboxed unit-test verifier (rewards/code.py), run once per distinct response of a batch.
VERIFIER: dict[str, Any] = {"type": "dedup", "inner": "python_tests"}
_LOW = {"+": 0, "-": 0, "*": 1, "//": 1, "%": 1}  # Python precedence level of each operator


def apply_ops(x: int, steps: list[tuple[str, int]]) -> int:
    """The value the `ops` specification defines: each operation applied in order, Python semantics."""
    for op, c in steps:
        if op == "+":
            x += c
        elif op == "-":
            x -= c
        elif op == "*":
            x *= c
        elif op == "//":
            x //= c
        else:
            x %= c
    return x


def ops_expression(steps: list[tuple[str, int]]) -> str:
    """The shortest canonical Python expression for a chain: parentheses only where precedence needs them."""
    expr, level = "x", 2  # a bare name binds tighter than any operator
    for op, c in steps:
        if _LOW[op] > level:
            expr = f"({expr})"
        expr, level = f"{expr}{op}{c}", _LOW[op]
    return expr


def linear_expression(a: int, b: int) -> str:
    """Canonical `a*x+b` with the obvious simplifications (`x`, `2*x`, `x-3`, `-x+1`, `5`)."""
    if a == 0:
        return str(b)
    head = "x" if a == 1 else "-x" if a == -1 else f"{a}*x"
    return head if b == 0 else f"{head}{b:+d}"


def tests_source(inputs: list[int], outputs: list[int], entry_point: str = ENTRY_POINT) -> str:
    return "".join(f"assert {entry_point}({x}) == {y}\n" for x, y in zip(inputs, outputs))


@dataclass
class CodeSource(GeneratedSource):
    """Code-writing problems whose split is decided by a hash of the specification (see module docstring)."""

    family: CodeFamily = "ops"
    digits: int = 1
    """Constants have up to this many digits (ops: 1..10**digits-1; linear: slope and intercept)."""
    max_ops: int = 3
    """ops: chains have 1..max_ops operations, the length drawn uniformly."""
    operators: str = "+-*"
    """ops: the operators drawn from; a string of `+ - * / %` where `/` means floor division."""
    n_tests: int = 6
    """Test inputs per task: the shown examples (linear) plus hidden ones in -20..20."""
    held_out_fraction: float = 0.15

    def __post_init__(self) -> None:
        if self.family not in CODE_FAMILIES:
            raise ValueError(f"unknown code family {self.family!r}; choose one of {', '.join(CODE_FAMILIES)}")
        if not 1 <= self.digits <= 6:
            raise ValueError(f"digits must be in 1..6, got {self.digits}")
        if not 1 <= self.max_ops <= 8:
            raise ValueError(f"max_ops must be in 1..8, got {self.max_ops}")
        bad = set(self.operators) - set("+-*/%")
        if bad or not self.operators:
            raise ValueError(f"operators must be a non-empty string of '+-*/%' (/ is floor division), got {self.operators!r}")
        if not 3 <= self.n_tests <= 50:
            raise ValueError(f"n_tests must be in 3..50, got {self.n_tests}")
        if not 0 < self.held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must be in (0, 1), got {self.held_out_fraction}")

    @property
    def name(self) -> str:
        if self.family == "ops":
            return f"code-ops{self.max_ops}-{self.operators.replace('/', 'f')}-d{self.digits}"
        return f"code-linear-d{self.digits}"

    @property
    def max_answer_chars(self) -> int:
        """A generous bound on the canonical answer's length (for generation caps)."""
        if self.family == "ops":
            return 1 + self.max_ops * (self.digits + 4) + 2
        return 2 * self.digits + 6

    def _ops(self) -> list[str]:
        return sorted({"/": "//"}.get(c, c) for c in set(self.operators))

    def _draw(self, rng: random.Random) -> Task:
        hi = 10**self.digits - 1
        if self.family == "ops":
            ops = self._ops()
            steps = [(rng.choice(ops), rng.randint(1, hi)) for _ in range(rng.randint(1, self.max_ops))]
            spec = "x " + " ".join(f"{op}{c}" for op, c in steps)
            prompt, answer = f"{spec} ->", ops_expression(steps)
            shown: list[int] = []
            fn = lambda x: apply_ops(x, steps)  # noqa: E731
        else:
            a, b = rng.randint(1, hi), rng.randint(-hi, hi)
            shown = [0, 1, 2]
            spec = " ".join(f"f({x})={a * x + b}" for x in shown)
            prompt, answer = f"{spec} ->", linear_expression(a, b)
            fn = lambda x: a * x + b  # noqa: E731
        # Hidden inputs come from the specification's own hash: the same problem always has the same tests.
        hidden_rng = random.Random(f"tests:{spec}")
        hidden = [x for x in hidden_rng.sample(range(-20, 21), 40) if x not in shown][: self.n_tests - len(shown)]
        inputs = shown + hidden
        return Task(
            id=f"{self.name}:{spec}",
            prompt=prompt,
            answer=answer,
            meta={
                "family": f"code:{self.family}",
                "split_key": spec,
                "verifier": VERIFIER,
                "tests": tests_source(inputs, [fn(x) for x in inputs]),
                "entry_point": ENTRY_POINT,
                "solution_template": TEMPLATE,
            },
        )

    def split_of(self, task: Task) -> Split:
        return split_of(task.meta["split_key"], self.held_out_fraction)



_OPTIONS = ("max_ops", "operators", "n_tests")


def code_source(
    family: str, digits: int = 1, held_out_fraction: float = 0.15, options: dict[str, Any] | None = None
) -> CodeSource:
    """The source `code:<family>` names, with its options checked; every problem is a one-line `TaskFileError`."""
    from posttrain.tasks.jsonl import TaskFileError

    options = dict(options or {})
    reject_unknown(f"code:{family}", options, _OPTIONS)
    try:
        return CodeSource(family=family, digits=digits, held_out_fraction=held_out_fraction, **options)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise TaskFileError(f"code:{family}: {exc}") from None


@register_domain("code:", "code-writing problems (ops, linear), checked by unit tests in the sandbox", knob="digits",
                 members=lambda leveled: ["ops", "linear"])
def _code_domain(
    family: str, limit: int = 500, digits: int = 1, held_out_fraction: float = 0.15, seed: int = 0, **options: Any
) -> Domain:
    from posttrain.rewards.registry import make_verifier

    source = code_source(family, digits=digits, held_out_fraction=held_out_fraction, options=options)
    return Domain(
        f"code:{family}",
        source,
        make_verifier(VERIFIER),
        evaluation=lambda n, s: source.take(500 if n is None else n, "held_out", seed=s),
        sampling=SamplingDefaults(max_tokens=max(16, source.max_answer_chars + 2)),
        description=f"held-out {source.name} problems",
        meta={"family": family, "digits": digits, "limit": limit, "seed": seed, **options},
        eval_limit=limit,
        eval_seed=seed,
    )
