"""The `Verifier` protocol (async, batched) and the guard that turns any failure into a verdict.

Covers: the one interface every reward source implements,
`async verify_batch(tasks, responses) -> list[Verdict]`; `SyncVerifier`, a
base class for verifiers that judge one response at a time in pure Python
(answers, formats, constraints), which supplies the batched method; `score`
(async) and `score_sync`, the only way the trainer and the evaluator call a
verifier: they stamp the verifier's version on each verdict, bound each
item's time with a deadline of its own, record its latency, and turn an exception, a wrong return type, a missing
verdict or a non-finite score into an ERROR / TIMEOUT verdict instead of a
crash; `verifier_version` / `verifier_id`, the hash that traces a result to
the exact checking code.
Does not cover: the verifiers themselves (see `verifiers.py` and siblings) or
their weighted composition (`Rubric`).

Why async and batched: the expensive verifiers (unit tests in the sandbox, an
LLM judge over HTTP) are I/O-bound and gain from running a whole rollout
batch concurrently; cheap ones pay one function call per item.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import hashlib
import inspect
import math
import time
import traceback
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from typing import Any, Protocol, runtime_checkable

from posttrain.aio import run_sync
from posttrain.types import Task, Verdict, VerdictStatus


@runtime_checkable
class Verifier(Protocol):
    """Judges a batch of responses, one verdict per (task, response) pair, in order.

    Example, a verifier that accepts any response containing the gold answer:

        @dataclass
        class Contains(SyncVerifier):
            name: str = "contains"
            def verify(self, task, response):
                hit = task.answer in response
                return Verdict(score=float(hit), passed=hit)

    An I/O-bound verifier implements `verify_batch` directly and awaits its
    calls concurrently (see `rewards.judge` or `rewards.code`).
    """

    name: str

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]: ...


@runtime_checkable
class VersionKeyed(Protocol):
    """A verifier whose behaviour depends on state its dataclass fields do not show (a judge's prompt
    template, a suite's tests): `version_key()` adds it to the version hash."""

    def version_key(self) -> str: ...


@runtime_checkable
class Prewarmable(Protocol):
    """A verifier with a slow start (a sandbox pool) that can begin it early, while responses load."""

    def prewarm(self) -> None: ...


class SyncVerifier(abc.ABC):
    """Base for verifiers that judge one response at a time with cheap, pure Python.

    Subclasses implement `verify(task, response) -> Verdict`; an exception in
    one item becomes that item's ERROR verdict without touching the others.
    """

    name: str = "sync"

    @abc.abstractmethod
    def verify(self, task: Task, response: str) -> Verdict:
        """One verdict for one response."""

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        return [_guarded_one(self, t, r) for t, r in zip(tasks, responses)]


@functools.cache
def _class_source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return cls.__qualname__


def verifier_version(verifier: object) -> str:
    """A short hash of the verifier's class source and parameters: which checking code produced a result.

    Composite verifiers (a `Rubric`) include their parts through their
    dataclass fields' reprs; a verifier may define `version_key()` to add
    state its fields do not show (a judge's prompt template, a suite's tests).
    """
    params = ""
    if is_dataclass(verifier) and not isinstance(verifier, type):
        params = repr(sorted((f.name, _version_repr(getattr(verifier, f.name))) for f in fields(verifier)))
    extra = verifier.version_key() if isinstance(verifier, VersionKeyed) else ""
    cls: Any = type(verifier)
    return hashlib.sha256((_class_source(cls) + params + str(extra)).encode()).hexdigest()[:12]


def _version_repr(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_version_repr(v) for v in value) + "]"
    if isinstance(value, Verifier):
        return f"{value.name}@{verifier_version(value)}"
    return repr(value)


def verifier_id(verifier: Verifier) -> str:
    return f"{verifier.name}@{verifier_version(verifier)}"


def error_verdict(exc: BaseException, verifier: str = "", status: VerdictStatus = VerdictStatus.ERROR) -> Verdict:
    """The verdict for a verifier that failed: never scored, always explained (type, message, where)."""
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {last.filename}:{last.lineno}" if last else ""
    return Verdict(score=0.0, passed=False, status=status, verifier=verifier, details=f"{type(exc).__name__}: {exc}{where}")


def _checked(verdict: object) -> Verdict:
    if not isinstance(verdict, Verdict):
        raise TypeError(f"verifier returned {type(verdict).__name__}, not Verdict")
    if verdict.status is VerdictStatus.OK and not math.isfinite(verdict.score):
        raise ValueError(f"verifier returned a non-finite score {verdict.score}")
    return verdict


def _guarded_one(verifier: SyncVerifier, task: Task, response: str) -> Verdict:
    try:
        return _checked(verifier.verify(task, response))
    except Exception as exc:  # noqa: BLE001 - a failing verifier is data, not a crash
        return error_verdict(exc)


async def score(
    verifier: Verifier, tasks: Sequence[Task], responses: Sequence[str], timeout: float | None = None
) -> list[Verdict]:
    """Judge a batch through the guard: always one verdict per item, stamped with the verifier's id.

    `timeout` is a per-item deadline: the batch runs as one call (verifiers
    batch and deduplicate inside it) and, when that call runs past the
    deadline, every item is judged again on its own, concurrently, each with
    the deadline of its own, so one slow or hanging response is a TIMEOUT
    verdict and costs only itself (at most twice the deadline of wall time).
    An exception in the batch call is retried the same way, item by item,
    so one poisoned item errors alone; a wrong count or type is an ERROR.
    Each verdict's `latency_s` is the batch's wall time divided by its size,
    unless the verifier measured it per item (or the item was judged alone).
    """
    if len(tasks) != len(responses):
        raise ValueError(f"score(): {len(tasks)} tasks but {len(responses)} responses")
    if not tasks:
        return []
    vid = verifier_id(verifier)
    start = time.perf_counter()
    try:
        verdicts = await _batch(verifier, list(tasks), list(responses), timeout)
        per_item = (time.perf_counter() - start) / len(tasks)
    except (asyncio.TimeoutError, _BatchFailed) as exc:
        if len(tasks) == 1:
            verdicts = [_failure_verdict(exc, timeout)]
        else:
            verdicts = list(await asyncio.gather(*(_alone(verifier, t, r, timeout) for t, r in zip(tasks, responses))))
        per_item = None
    for v in verdicts:
        v.verifier = v.verifier or vid
        if v.latency_s is None:
            v.latency_s = per_item
    return verdicts


class _BatchFailed(Exception):
    """The batch call raised: `cause` is what it raised."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


async def _batch(verifier: Verifier, tasks: list[Task], responses: list[str], timeout: float | None) -> list[Verdict]:
    """One guarded `verify_batch` call: checked verdicts, or `asyncio.TimeoutError` / `_BatchFailed`."""
    try:
        call = verifier.verify_batch(tasks, responses)
        verdicts = await (asyncio.wait_for(call, timeout) if timeout is not None else call)
    except asyncio.TimeoutError:
        raise
    except Exception as exc:  # noqa: BLE001 - a failing verifier is data, not a crash
        raise _BatchFailed(exc) from exc
    if not isinstance(verdicts, list) or len(verdicts) != len(tasks):
        got = len(verdicts) if isinstance(verdicts, list) else type(verdicts).__name__
        return [error_verdict(TypeError(f"verify_batch returned {got} verdicts for {len(tasks)} items")) for _ in tasks]
    checked: list[Verdict] = []
    for v in verdicts:
        try:
            checked.append(_checked(v))
        except (TypeError, ValueError) as exc:
            checked.append(error_verdict(exc))
    return checked


async def _alone(verifier: Verifier, task: Task, response: str, timeout: float | None) -> Verdict:
    """One item judged on its own, with its own deadline."""
    start = time.perf_counter()
    try:
        verdict = (await _batch(verifier, [task], [response], timeout))[0]
    except (asyncio.TimeoutError, _BatchFailed) as exc:
        verdict = _failure_verdict(exc, timeout)
    if verdict.latency_s is None:
        verdict.latency_s = time.perf_counter() - start
    return verdict


def _failure_verdict(exc: BaseException, timeout: float | None) -> Verdict:
    if isinstance(exc, _BatchFailed):
        return error_verdict(exc.cause)
    return Verdict(0.0, False, VerdictStatus.TIMEOUT, details=f"verifier ran past its {timeout:g} s deadline for this item")


def score_sync(
    verifier: Verifier, tasks: Sequence[Task], responses: Sequence[str], timeout: float | None = None
) -> list[Verdict]:
    """`score` from synchronous code; safe to call from inside a running event loop (runs in a worker thread)."""
    return run_sync(score(verifier, tasks, responses, timeout))


def safe_verify(verifier: Verifier, task: Task, response: str, timeout: float | None = None) -> Verdict:
    """One item through the guard (convenience for tests and small scripts; loops should batch)."""
    return score_sync(verifier, [task], [response], timeout)[0]
