"""Where tasks come from: users' JSONL files, procedural generators, public suites, all named by one registry.

`load_domain(spec, **options)` resolves every spec (`arith:add`, `code:ops`, `rg:<dataset>`, `humaneval`, a
`.jsonl` path) to a `Domain`: its training source, its verifier and its evaluation view (`Domain.suite()`).
"""

from __future__ import annotations

from posttrain.tasks.arithmetic import FAMILIES, ArithmeticSource
from posttrain.tasks.base import Split, TaskSource, split_of
from posttrain.tasks.domains import Domain, SamplingDefaults, list_domains, load_domain, parse_options, register_domain
from posttrain.tasks.jsonl import ListSource, TaskFileError, load_jsonl
from posttrain.tasks.suites import Suite

__all__ = [
    "FAMILIES",
    "ArithmeticSource",
    "Domain",
    "ListSource",
    "SamplingDefaults",
    "Split",
    "Suite",
    "TaskFileError",
    "TaskSource",
    "list_domains",
    "load_domain",
    "load_jsonl",
    "parse_options",
    "register_domain",
    "split_of",
]
