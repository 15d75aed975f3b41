"""Code verifiers that run in posttrain's sandbox: unit tests, Python byte-compilation, C via gcc.

Covers:
- `PythonTests` (kind ``python_tests``): the response is a program (markdown fences stripped;
  completion-style responses continue ``meta["program_prefix"]``, e.g. HumanEval's prompt;
  ``meta["solution_template"]`` wraps short answers) and ``meta["tests"]`` checks it:
  HumanEval's ``check(candidate)``, top-level asserts, or pytest-style ``test_*`` functions
  (``meta["test_style"]``, auto-detected by default). Score = fraction of tests passed.
- `PythonCompiles` (``python_compiles``) and `CCompiles` (``c_compiles``): 1.0 when the code
  compiles.

What a verdict says: ``Verdict.info`` holds the structured findings (`PythonTestsInfo`: tests
passed and total, each failure's name and error, a load error; `CompileInfo`: each diagnostic's
file, line, column, severity and message, which `compile_errors` reads back), ``Verdict.details``
a short text for people ("2/3 tests passed; line 3: assertion failed ..."). Programs read
``info``, never ``details``.

Security model (tests): the outcome is never read from anything the solution can write.
Inside the sandbox the trusted harness (`_code_harness.py`) runs the tests in its own,
non-dumpable process; the solution runs in a child forked from a zygote that never saw the
tests or the per-run nonce; calls cross as plain data; each report line carries the nonce and
comes from a descriptor only the harness holds. See that module's docstring for the attack
list, and docs/code_verifiers.md.

Speed: one sandbox execution judges a batch of responses (one fresh solution process per
response, everything else killed and the writable directories emptied in between), in the
sandbox's pre-forked interpreter with common modules preloaded; batches run concurrently.
Items a batch could not report (its harness was killed) are re-run one per sandbox, so a
response that kills the harness fails alone. A sandbox failure is an ERROR verdict, never 0.

Does not cover: answer, format or judge verifiers (their own modules), task loading.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import marshal
import re
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from posttrain.rewards.dedup import distinct, fan_out
from posttrain.rewards.registry import register_verifier
from posttrain.sandbox.sandboxes import PRELOAD as PRELOAD  # where it was; it lives with the sandboxes now
from posttrain.sandbox.sandboxes import Executor, LazySandbox, current_sandboxes
from posttrain.types import Task, Verdict, VerdictStatus

if TYPE_CHECKING:
    from posttrain.rewards._code_harness import Item, Job

HARNESS_PATH = Path(__file__).with_name("_code_harness.py")
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


# ----------------------------------------------------------------------------- programs


def strip_fences(text: str, prefer: str | None = None) -> str:
    """The code inside markdown fences (the first block mentioning ``prefer``, else the first), or the text."""
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    if not blocks:
        return text
    if prefer:
        for b in blocks:
            if prefer in b:
                return b
    return blocks[0]


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^(async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def _closed(prefix: str) -> str:
    """The prefix as a complete program (a stub ending in ``def f(x):`` gets a ``pass`` body)."""
    try:
        compile(prefix, "<prefix>", "exec", dont_inherit=True)
        return prefix
    except SyntaxError:
        return prefix.rstrip("\n") + "\n    pass\n"


def build_program(task: Task, response: str) -> str:
    """The program a response stands for.

    ``solution_template`` (``{response}`` marks the spot) wraps short answers. With a
    ``program_prefix`` (HumanEval's prompt) a response that defines the entry point at top
    level is a whole program, appended after the prefix (so the prefix's imports and helpers
    stay defined and the response's definition wins); any other response continues the prefix.
    """
    meta = task.meta
    entry = meta.get("entry_point")
    code = strip_fences(response, f"def {entry}" if entry else None)
    template = meta.get("solution_template")
    if template:
        return str(template).replace("{response}", code)
    prefix = meta.get("program_prefix")
    if prefix:
        if entry and _defines(code, entry):
            return f"{_closed(prefix)}\n{code}"
        return prefix + code
    return code


# ----------------------------------------------------------------------------- where executions run


def _start_quietly(sandbox: LazySandbox) -> None:
    try:
        sandbox.sandbox  # noqa: B018 - starts it
    except Exception:  # noqa: BLE001 - the first real call reports the same failure as a verdict
        pass


def _sandbox_or_error(n: int) -> tuple[Executor | None, list[Verdict] | None]:
    """The executor of the run under way (`sandbox.sandboxes.current_sandboxes`), started if need be; or, when
    this machine has no sandbox, one ERROR verdict per item (infrastructure, never a wrong answer)."""
    try:
        executor = current_sandboxes().executor
        if isinstance(executor, LazySandbox):
            executor.sandbox  # noqa: B018 - start it here, so a machine without one is n verdicts, not a raise
        return executor, None
    except Exception as exc:  # noqa: BLE001 - no sandbox on this machine: infrastructure, not a wrong answer
        v = f"sandbox unavailable: {type(exc).__name__}: {exc}"
        return None, [Verdict(0.0, False, VerdictStatus.ERROR, details=v) for _ in range(n)]


def _infra_error(msg: str) -> Verdict:
    return Verdict(0.0, False, VerdictStatus.ERROR, details=msg, info={"error": msg})


# ----------------------------------------------------------------------------- unit tests


_HARNESS_CODE: str | None = None


def harness_program() -> str:
    """The sandboxed program: a bootstrap that runs the harness from its marshalled code object
    (compiled once here, so an execution does not re-compile ~600 lines)."""
    global _HARNESS_CODE
    if _HARNESS_CODE is None:
        code = compile(HARNESS_PATH.read_text(), "_code_harness.py", "exec")
        blob = base64.b64encode(marshal.dumps(code)).decode()
        _HARNESS_CODE = f"import marshal as _m, base64 as _b\nexec(_m.loads(_b.b64decode('{blob}')))\n"
    return _HARNESS_CODE


@dataclass
class PythonTests:
    """Fraction of ``meta["tests"]`` the response's program passes, judged in the sandbox.

    >>> t = Task("sq", "def sq(x):", meta={"tests": "assert candidate(3) == 9", "entry_point": "sq"})
    >>> safe_verify(PythonTests(), t, "def sq(x):\\n    return x * x\\n").score   # doctest: +SKIP
    1.0
    """

    call_timeout_s: float = 3.0  # per call into the solution (and for loading it)
    timeout_s: float = 10.0  # per response, all its tests together
    memory_mb: int = 512  # address space of the solution's process
    batch_size: int = 32  # at most this many responses per sandbox execution (a batch is spread over max_concurrency)
    max_concurrency: int = 4  # sandbox executions at once
    name: str = "python_tests"

    def version_key(self) -> str:
        return hashlib.sha256(HARNESS_PATH.read_bytes()).hexdigest()[:12]

    def prewarm(self) -> None:
        """Start the current sandbox in the background (a one-shot command overlaps it with loading its inputs)."""
        executor = current_sandboxes().executor  # here: a thread does not inherit the caller's context
        if isinstance(executor, LazySandbox):
            threading.Thread(target=_start_quietly, args=(executor,), name="posttrain-sandbox-prewarm", daemon=True).start()

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(tasks)
        items: list[tuple[int, Item]] = []
        for i, (task, response) in enumerate(zip(tasks, responses)):
            tests = task.meta.get("tests")
            if not isinstance(tests, str) or not tests.strip():
                out[i] = _infra_error(f"task {task.id!r} has no meta['tests']")
                continue
            items.append((i, {
                "id": str(i), "program": build_program(task, response), "tests": tests,
                "entry_point": task.meta.get("entry_point"), "style": task.meta.get("test_style", "auto"),
                "module": task.meta.get("module", "solution"), "split": bool(task.meta.get("split_check", False)),
                "call_timeout_s": self.call_timeout_s,
                "timeout_s": float(task.meta.get("timeout_s", self.timeout_s)),
            }))
        # Identical responses to the same task (common in a sampled group) are judged once.
        unique_at, slots = distinct([json.dumps({k: v for k, v in item.items() if k != "id"}, sort_keys=True)
                                     for _, item in items])
        unique = [items[n] for n in unique_at]
        judged: dict[int, Verdict] = {}
        if unique:
            sandbox, errors = _sandbox_or_error(len(unique))
            if errors is not None:
                judged = {i: v for (i, _), v in zip(unique, errors)}
            else:
                sem = asyncio.Semaphore(self.max_concurrency)
                size = max(1, min(self.batch_size, -(-len(unique) // self.max_concurrency)))
                chunks = [unique[k:k + size] for k in range(0, len(unique), size)]
                for verdicts in await asyncio.gather(*(self._run_chunk(sandbox, c, sem) for c in chunks)):
                    judged.update(verdicts)
        firsts = [judged.get(i) or _infra_error("no verdict") for i, _ in unique]
        for (i, _), v in zip(items, fan_out(firsts, slots)):
            out[i] = v
        return [v if v is not None else _infra_error("no verdict") for v in out]

    async def _run_chunk(self, sandbox, chunk: list[tuple[int, Item]], sem: asyncio.Semaphore
                         ) -> list[tuple[int, Verdict]]:
        from posttrain.sandbox import ExecStatus, Limits

        nonce = secrets.token_hex(16)
        job: Job = {"nonce": nonce, "items": [item for _, item in chunk]}
        payload = json.dumps(job)
        budget = sum(item["timeout_s"] + item["call_timeout_s"] for _, item in chunk) + 5.0
        limits = Limits(wall_s=budget, cpu_s=budget, memory_mb=self.memory_mb + 512, pids=64,
                        output_bytes=max(1 << 20, (64 << 10) * len(chunk)))
        async with sem:
            res = await sandbox.arun(code=harness_program(), stdin=payload, limits=limits,
                                     env={"POSTTRAIN_CHILD_MB": str(self.memory_mb)})
        reports: dict[str, Report] = parse_reports(res.stdout, nonce)
        done: list[tuple[int, Verdict]] = []
        missing: list[tuple[int, Item]] = []
        for i, item in chunk:
            rep = reports.get(item["id"])
            if rep is not None:
                done.append((i, verdict_from_report(rep)))
            elif res.status is ExecStatus.SANDBOX_ERROR:
                done.append((i, _infra_error(f"sandbox failed: {res.error}")))
            else:
                missing.append((i, item))
        if missing and len(chunk) > 1:
            # A response killed the harness (or ran it out of time): judge the rest one by one.
            for sub in await asyncio.gather(*(self._run_chunk(sandbox, [m], sem) for m in missing)):
                done += sub
        elif missing:
            (i, _), = missing
            why = f"the harness ended without a report (sandbox status {res.status.value}); " \
                  "the solution killed it, or exhausted the time or memory of the whole run"
            info: PythonTestsInfo = {"passed": 0, "total": None, "failures": [], "error": why}
            done.append((i, Verdict(0.0, False, VerdictStatus.OK, details=tests_text(info), info=dict(info))))
        return done


# ----------------------------------------------------------------------------- reports
# Printed by the sandboxed programs (the harness, ``_PY_COMPILE``) as ``<nonce> <JSON>`` lines
# on a descriptor only they hold, read here.


class CaseResult(TypedDict):
    name: str
    passed: bool
    error: str
    """Why it failed (empty when it passed, and after the first 20 failures)."""


class Report(TypedDict):
    """The harness's verdict material on one item."""

    id: str
    tests: list[CaseResult]
    total: NotRequired[int | None]
    """How many tests the item has (unrun ones count as failed); absent when it could not be told."""
    load_error: NotRequired[str | None]
    """The program did not load (every test then fails)."""
    deadline: NotRequired[bool]
    """The item's time budget ran out."""
    harness_error: NotRequired[str]
    """The tests themselves are broken, or the harness failed: an ERROR verdict, never a score."""


class CompileReport(TypedDict):
    id: str
    errors: list[dict[str, Any]]
    """``CompileError`` fields, as the compiler reported them."""
    warnings: list[dict[str, Any]]


def parse_reports(stdout: str, nonce: str) -> dict[str, Any]:
    """Report lines carrying this run's nonce (``Report`` or ``CompileReport``), by item id; anything
    else on stdout is ignored."""
    out: dict[str, Any] = {}
    prefix = nonce + " "
    for line in stdout.splitlines():
        if line.startswith(prefix) and line != prefix + "DONE":
            try:
                rep = json.loads(line[len(prefix):])
            except ValueError:
                continue
            if isinstance(rep, dict) and isinstance(rep.get("id"), str):
                out[rep["id"]] = rep
    return out


class FailedTest(TypedDict):
    name: str
    error: str
    """Empty after the first 20 failures (the harness keeps its report small)."""


class PythonTestsInfo(TypedDict):
    """What `PythonTests` puts in ``Verdict.info``."""

    passed: int
    total: int | None
    """None when the harness could not tell (it ended without a report)."""
    failures: list[FailedTest]
    """The first 20 failed tests, in order."""
    load_error: NotRequired[str]
    """The program did not load (every test then fails)."""
    error: NotRequired[str]
    """Why the run ended early (the time budget, a killed harness); in an ERROR verdict, what failed."""


_SHOWN_FAILURES = 3  # failures spelled out in `details`; `info` has the first 20
_SHOWN_CHARS = 200  # of each error text in `details`


def _clip(text: str, n: int = _SHOWN_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


def tests_text(info: PythonTestsInfo) -> str:
    """The people's version of a `PythonTestsInfo`: "2/3 tests passed; line 3: assertion failed at tests line 3"."""
    total = info["total"]
    parts = [f"{info['passed']}/{total} tests passed" if total is not None else f"{info['passed']} tests passed"]
    failures = info["failures"]
    if info.get("load_error"):  # every test failed the same way: say why once
        parts.append(f"the program did not load: {_clip(info['load_error'])}")
    else:
        parts += [f"{f['name']}: {_clip(f['error'])}" if f["error"] else f["name"] for f in failures[:_SHOWN_FAILURES]]
        failed = (total - info["passed"]) if total is not None else len(failures)
        if failed > _SHOWN_FAILURES:
            parts.append(f"{failed - _SHOWN_FAILURES} more failed")
    if info.get("error"):
        parts.append(_clip(info["error"], 400))
    return "; ".join(parts)


def verdict_from_report(rep: Report) -> Verdict:
    tests = rep.get("tests") or []
    if rep.get("harness_error"):
        return _infra_error(str(rep.get("harness_error")))
    total = int(rep.get("total") or len(tests))
    passed = sum(1 for t in tests if t["passed"])
    failures: list[FailedTest] = [{"name": t["name"], "error": t["error"]} for t in tests if not t["passed"]][:20]
    info: PythonTestsInfo = {"passed": passed, "total": total, "failures": failures}
    if rep.get("load_error"):
        info["load_error"] = str(rep["load_error"])
    if rep.get("deadline"):
        info["error"] = "the response's time budget ran out; unrun tests count as failed"
    score = passed / total if total else 0.0
    return Verdict(score, total > 0 and passed == total, VerdictStatus.OK, details=tests_text(info), info=dict(info))


@register_verifier("python_tests")
def _python_tests(**kwargs: Any) -> PythonTests:
    return PythonTests(**kwargs)


# ----------------------------------------------------------------------------- compilation


@dataclass(frozen=True)
class CompileError:
    """One diagnostic an agent can act on."""

    file: str | None
    line: int | None
    column: int | None
    message: str
    severity: str = "error"  # "error" | "warning"


class CompileInfo(TypedDict):
    """What `PythonCompiles` and `CCompiles` put in ``Verdict.info``: `CompileError` fields per diagnostic."""

    compiled: bool
    errors: list[dict[str, Any]]
    warnings: list[dict[str, Any]]


def compile_errors(verdict: Verdict) -> list[CompileError]:
    """The diagnostics a compile verifier put in ``verdict.info`` (errors, then warnings); none for other verdicts."""
    info = verdict.info
    return [CompileError(**e) for e in list(info.get("errors", [])) + list(info.get("warnings", []))]


def _where(d: dict[str, Any]) -> str:
    return ":".join(str(x) for x in (d.get("file"), d.get("line"), d.get("column")) if x is not None)


def compile_text(info: CompileInfo, werror: bool = False) -> str:
    """The people's version of a `CompileInfo`: "compile error at main.c:3:5: 'y' undeclared; 1 more error"."""
    def one(d: dict[str, Any]) -> str:
        where = _where(d)
        return f"compile {d.get('severity', 'error')}{f' at {where}' if where else ''}: {_clip(str(d.get('message', '')))}"

    errors, warnings = info["errors"], info["warnings"]
    if errors:
        more = f"; {len(errors) - 1} more error{'s' if len(errors) > 2 else ''}" if len(errors) > 1 else ""
        return one(errors[0]) + more
    if not warnings:
        return "compiled"
    if werror:
        more = f"; {len(warnings) - 1} more" if len(warnings) > 1 else ""
        return f"warnings fail (werror): {one(warnings[0])}{more}"
    return f"compiled with {len(warnings)} warning{'s' if len(warnings) > 1 else ''}: {one(warnings[0])}"


def _compile_verdict(ok: bool, errors: list[dict], warnings: list[dict], werror: bool) -> Verdict:
    passed = ok and not (werror and warnings)
    info: CompileInfo = {"compiled": ok, "errors": errors, "warnings": warnings}
    return Verdict(float(passed), passed, VerdictStatus.OK, details=compile_text(info, werror), info=dict(info))


class CompileJob(TypedDict):
    """What ``_PY_COMPILE`` (the sandboxed program below) reads on stdin; it prints one
    ``CompileReport`` per source, ``id`` being the source's index."""

    nonce: str
    filename: str
    sources: list[str]


_PY_COMPILE = r"""
import json, sys, warnings
job = json.loads(sys.stdin.read())
for i, src in enumerate(job["sources"]):
    errors, warns = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compile(src, job["filename"], "exec", dont_inherit=True)
        except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as e:
            errors.append({"file": getattr(e, "filename", None) or job["filename"], "line": getattr(e, "lineno", None),
                           "column": getattr(e, "offset", None), "message": f"{type(e).__name__}: {getattr(e, 'msg', None) or e}",
                           "severity": "error"})
    for w in caught:
        warns.append({"file": job["filename"], "line": w.lineno, "column": None,
                      "message": f"{w.category.__name__}: {w.message}", "severity": "warning"})
    sys.stdout.write(job["nonce"] + " " + json.dumps({"id": str(i), "errors": errors, "warnings": warns}) + "\n")
"""


@dataclass
class PythonCompiles:
    """1.0 when the response byte-compiles (``compile(..., "exec")``, in the sandbox: never executed)."""

    filename: str = "solution.py"
    werror: bool = False  # SyntaxWarnings fail too
    batch_size: int = 64
    name: str = "python_compiles"

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        from posttrain.sandbox import ExecStatus, Limits

        sandbox, errors = _sandbox_or_error(len(tasks))
        if errors is not None:
            return errors
        sources = [strip_fences(r) for r in responses]
        out: list[Verdict] = []
        for k in range(0, len(sources), self.batch_size):
            chunk = sources[k:k + self.batch_size]
            nonce = secrets.token_hex(16)
            job: CompileJob = {"nonce": nonce, "filename": self.filename, "sources": chunk}
            res = await sandbox.arun(code=_PY_COMPILE, stdin=json.dumps(job),
                limits=Limits(wall_s=10 + len(chunk), cpu_s=10 + len(chunk), memory_mb=1024))
            reps: dict[str, CompileReport] = parse_reports(res.stdout, nonce)
            for j in range(len(chunk)):
                rep = reps.get(str(j))
                if rep is not None:
                    out.append(_compile_verdict(not rep["errors"], rep["errors"], rep["warnings"], self.werror))
                elif res.status is ExecStatus.SANDBOX_ERROR:
                    out.append(_infra_error(f"sandbox failed: {res.error}"))
                else:
                    err = {"file": self.filename, "line": None, "column": None, "severity": "error",
                           "message": f"the compiler did not finish ({res.status.value})"}
                    out.append(_compile_verdict(False, [err], [], self.werror))
        return out


@register_verifier("python_compiles")
def _python_compiles(**kwargs: Any) -> PythonCompiles:
    return PythonCompiles(**kwargs)


@dataclass
class CCompiles:
    """1.0 when gcc compiles the response (``-c``; with ``link=True`` it must link into a program)."""

    flags: list[str] = field(default_factory=lambda: ["-std=gnu11", "-Wall"])
    link: bool = False
    werror: bool = False  # warnings fail too
    timeout_s: float = 20.0
    max_concurrency: int = 4
    name: str = "c_compiles"

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        sandbox, errors = _sandbox_or_error(len(tasks))
        if errors is not None:
            return errors
        sem = asyncio.Semaphore(self.max_concurrency)
        return list(await asyncio.gather(*(self._one(sandbox, strip_fences(r), sem) for r in responses)))

    async def _one(self, sandbox, source: str, sem: asyncio.Semaphore) -> Verdict:
        from posttrain.sandbox import ExecStatus, Limits

        out = ["-o", "/tmp/a.out"] if self.link else ["-c", "-o", "/tmp/main.o"]
        argv = ["gcc", *self.flags, "-fdiagnostics-format=json", "main.c", *out]
        async with sem:
            res = await sandbox.arun(argv, files={"main.c": source}, prefork=False,
                                     limits=Limits(wall_s=self.timeout_s, cpu_s=self.timeout_s, memory_mb=1024))
        if res.status is ExecStatus.SANDBOX_ERROR or res.exit_code in (126, 127):
            return _infra_error(f"could not run gcc: {res.error or res.stderr.strip()[:300]}")
        errors, warnings = parse_gcc_diagnostics(res.stderr)
        ok = res.status is ExecStatus.OK
        if not ok and not errors:
            errors = [{"file": "main.c", "line": None, "column": None, "severity": "error",
                       "message": f"gcc did not finish: {res.status.value}"}]
        return _compile_verdict(ok, errors, warnings, self.werror)


@register_verifier("c_compiles")
def _c_compiles(**kwargs: Any) -> CCompiles:
    return CCompiles(**kwargs)


def parse_gcc_diagnostics(stderr: str) -> tuple[list[dict], list[dict]]:
    """gcc's ``-fdiagnostics-format=json`` array, plus the linker's plain-text errors after it."""
    errors: list[dict] = []
    warnings: list[dict] = []
    text = stderr.lstrip()
    rest = text
    if text.startswith("["):
        try:
            diags, end = json.JSONDecoder().raw_decode(text)
            rest = text[end:]
        except ValueError:
            diags = []
        for d in diags if isinstance(diags, list) else []:
            caret = (d.get("locations") or [{}])[0].get("caret", {})
            entry = {"file": caret.get("file"), "line": caret.get("line"), "column": caret.get("column"),
                     "message": str(d.get("message", "")), "severity": "warning" if d.get("kind") == "warning" else "error"}
            if d.get("kind") == "warning":
                warnings.append(entry)
            elif d.get("kind") in ("error", "fatal error"):
                errors.append(entry)
    for line in rest.splitlines():
        line = line.strip()
        if line and ("error" in line or "undefined reference" in line) and not line.startswith("collect2"):
            m = re.match(r"([^:]+):(?:\(.*?\)|(\d+)):?\s*(.*)", line)
            file, lineno, msg = (m.group(1), int(m.group(2)) if m.group(2) else None, m.group(3)) if m else (None, None, line)
            errors.append({"file": file, "line": lineno, "column": None, "message": msg, "severity": "error"})
    return errors, warnings
