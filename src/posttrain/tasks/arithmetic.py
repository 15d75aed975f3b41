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
        if self.terms < 2:
            raise ValueError(f"terms must be >= 2, got {self.terms}")
        if not 0 < self.held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must be in (0, 1), got {self.held_out_fraction}")

    @property
    def name(self) -> str:
        extra = f"x{self.terms}" if self.family == "chain" else ""
        lo = f"{self.min_digits}to" if self.min_digits is not None else ""
        return f"arith-{self.family}{extra}-d{lo}{self.digits}"

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
        return Task(
            id=f"{self.name}:{prompt[:-1]}",
            prompt=prompt,
            answer=str(value),
            meta={"family": self.family, "digits": self.digits, "split_key": key},
        )

    def split_of(self, task: Task) -> Split:
        # The key is the canonical expression alone, so one problem has one split across families and difficulties.
        return split_of(task.meta["split_key"], self.held_out_fraction)

