"""Procedural arithmetic tasks with a difficulty knob: the built-in domain.

Covers: addition, subtraction, a mix of both, multiplication, and chained
sums of several terms; `digits` is the difficulty knob (operand size), and
`terms` lengthens chains. Prompts look like `123+45=`, answers like `168`.
Does not cover: word problems or reasoning-gym's generators (see the suites
adapters).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from posttrain.tasks.base import GeneratedSource, Split, split_of
from posttrain.types import Task

Family = Literal["add", "sub", "addsub", "mul", "chain"]
FAMILIES: tuple[str, ...] = ("add", "sub", "addsub", "mul", "chain")
WORKED_FAMILIES: tuple[str, ...] = ("mul", "chain")
"""The families whose result needs intermediate results, which `worked` writes out."""


@dataclass
class ArithmeticSource(GeneratedSource):
    """Arithmetic problems whose split is decided by a hash of the problem.

    The split key is canonical: `a+b` and `b+a` (and any reordering of a
    chain's added terms) are the same problem, so the model can never meet a
    held-out sum in training merely written the other way round.
    """

    family: Family = "add"
    digits: int = 3
    terms: int = 3  # only for "chain"
    held_out_fraction: float = 0.05
    worked: bool = False
    """`mul` and `chain` only: the target is a worked solution, kept in `meta["solution"]`: for a product one
    partial product per digit of the second operand, then their sum (`47*38=` ->
    `47*8=376;47*30=1410;376+1410=1786`); for a chain its running total (`12+34-7=` -> `12+34=46;46-7=39`).
    `answer` stays the result, which the verifier reads as the last number."""
    min_digits: int | None = None
    """When set, each operand's length is drawn uniformly from min_digits..digits (easy problems mixed in),
    instead of its value uniformly from 0..10**digits - 1 (where almost every operand has `digits` digits)."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown arithmetic family {self.family!r}; choose one of {', '.join(FAMILIES)}")
        if not 1 <= self.digits <= 18:
            raise ValueError(f"digits must be in 1..18, got {self.digits}")
        if self.min_digits is not None and not 1 <= self.min_digits <= self.digits:
            raise ValueError(f"min_digits must be in 1..digits ({self.digits}), got {self.min_digits}")
        if self.worked and self.family not in WORKED_FAMILIES:
            raise ValueError(f"worked solutions exist for {' and '.join(WORKED_FAMILIES)} only, not {self.family!r}")
        if self.terms < 2:
            raise ValueError(f"terms must be >= 2, got {self.terms}")
        if not 0 < self.held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must be in (0, 1), got {self.held_out_fraction}")

    @property
    def name(self) -> str:
        extra = f"x{self.terms}" if self.family == "chain" else ""
        lo = f"{self.min_digits}to" if self.min_digits is not None else ""
        worked = "-worked" if self.worked else ""
        return f"arith-{self.family}{extra}-d{lo}{self.digits}{worked}"

    @property
    def max_solution_chars(self) -> int:
        """The longest worked solution this source writes, in characters (worked sources only: a bare answer's
        cap is the domain's own)."""
        if not self.worked:
            raise ValueError(f"{self.name} writes no worked solutions")
        top = 10**self.digits - 1
        if self.family == "mul":
            return len(worked_solution(top, top))
        # chain: every term added, plus a minus sign per negative total
        return len(worked_chain([top] * self.terms, ["+"] * self.terms)) + 2 * self.terms

    def _operand(self, rng: random.Random) -> int:
        if self.min_digits is None:
            return rng.randint(0, 10**self.digits - 1)
        d = rng.randint(self.min_digits, self.digits)
        return rng.randint(0 if d == 1 else 10 ** (d - 1), 10**d - 1)

    def _draw(self, rng: random.Random) -> Task:
        op = self.family
        if op == "addsub":
            op = rng.choice(("add", "sub"))
        if op == "chain":
            nums = [self._operand(rng) for _ in range(self.terms)]
            signs = ["+"] + [rng.choice("+-") for _ in range(self.terms - 1)]
            prompt = str(nums[0]) + "".join(s + str(n) for s, n in zip(signs[1:], nums[1:])) + "="
            value = sum(n if s == "+" else -n for s, n in zip(signs, nums))
            pos = sorted(n for s, n in zip(signs, nums) if s == "+")
            neg = sorted(n for s, n in zip(signs, nums) if s == "-")
            key = "+".join(map(str, pos)) + "".join(f"-{n}" for n in neg)
        else:
            a, b = self._operand(rng), self._operand(rng)
            if op == "add":
                prompt, value, key = f"{a}+{b}=", a + b, f"{min(a, b)}+{max(a, b)}"
            elif op == "sub":
                prompt, value, key = f"{a}-{b}=", a - b, f"{a}-{b}"
            else:
                prompt, value, key = f"{a}*{b}=", a * b, f"{min(a, b)}*{max(a, b)}"
        meta = {"family": self.family, "digits": self.digits, "split_key": key}
        if self.worked:  # only mul and chain (checked at construction)
            meta["solution"] = worked_chain(nums, signs) if op == "chain" else worked_solution(a, b)
        return Task(id=f"{self.name}:{prompt[:-1]}", prompt=prompt, answer=str(value), meta=meta)

    def split_of(self, task: Task) -> Split:
        # The key is the canonical expression alone, so one problem has one split across families and difficulties.
        return split_of(task.meta["split_key"], self.held_out_fraction)


def worked_solution(a: int, b: int) -> str:
    """`a*b` worked as on paper: a partial product per digit of `b` (lowest first, shifted by its place), then
    their sum; a one-digit `b` is its one product. `worked_solution(47, 38)` is `47*8=376;47*30=1410;376+1410=1786`."""
    digits = str(b)[::-1]
    if len(digits) == 1:
        return str(a * b)
    parts = [a * int(d) * 10**i for i, d in enumerate(digits)]
    steps = [f"{a}*{int(d) * 10**i}={p}" for i, (d, p) in enumerate(zip(digits, parts))]
    return ";".join(steps) + ";" + "+".join(map(str, parts)) + f"={a * b}"


def worked_chain(nums: list[int], signs: list[str]) -> str:
    """A chain's running total, one operation per step: `worked_chain([12, 34, 7], ["+", "+", "-"])` is
    `12+34=46;46-7=39` (`signs[0]` is the first term's, always `+`)."""
    total, steps = nums[0], []
    for sign, n in zip(signs[1:], nums[1:]):
        new = total + n if sign == "+" else total - n
        steps.append(f"{total}{sign}{n}={new}")
        total = new
    return ";".join(steps)
