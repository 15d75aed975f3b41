"""Running an evaluation: sample a suite with an engine, grade with the suite's verifier, record everything.

Covers: `EvalSpec` (what to sample: n, temperature, seed, max tokens, repeats,
tasks per engine call); `evaluate` (each task prompted through the model's
`PromptRenderer`, the one training rollouts use; fixed chunks of tasks in suite order, one
`engine.generate` call per chunk and repeat, seeded per chunk so a result
does not depend on which chunks ran in this process; graded through
`rewards.score`, the same guarded call training uses; records appended to
the output directory after each chunk, so an interrupted run resumes
without redoing finished samples); `rescore` (re-grade recorded responses
with the suite's current verifier, no model); and per-response tokens and
latency (an engine's own per-request figures when it keeps them, else the
chunk's wall time shared out).
Does not cover: choosing this path over agent episodes (`run.py: run_eval`, the entry point callers use),
resolving a model name to an engine (see `posttrain.resolve`), scoring response files (see `responses.py`) or
metrics (see `summary.py`).

Repeats reuse the same seeds: `--repeat R` asks whether the same request
gives the same verdict again, which a deterministic local engine always
does and a batched GPU server often does not.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from posttrain.aio import run_sync
from posttrain.engine.base import Engine, Prompt, context_overflow
from posttrain.eval.metrics import Price
from posttrain.eval.records import EvalDir, EvalDirError, EvalRun, SampleRecord
from posttrain.eval.summary import summarize
from posttrain.models.prompting import PromptRenderer
from posttrain.rewards.base import score_sync, verifier_id
from posttrain.types import Completion, FinishReason, SamplingParams, Task, Verdict

# Settings that change what is sampled: a resumed run must match them exactly.
_SAMPLING_KEYS = ("model", "suite", "suite_options", "n", "temperature", "top_p", "max_tokens", "seed", "batch")


@dataclass
class EvalSpec:
    """What to sample and how; `ks` only shapes the summary."""

    model: str  # how the model was named (a path, `builtin`, `run@step`, a URL)
    suite: str
    n: int = 1
    ks: tuple[int, ...] = (1,)
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0
    repeat: int = 1
    batch: int = 32  # tasks per engine call (fixed: chunk boundaries are part of the seeding)
    suite_options: dict[str, Any] = field(default_factory=dict)
    verify_timeout_s: float | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        if self.n < 1 or self.repeat < 1 or self.batch < 1 or self.max_tokens < 1:
            raise ValueError("eval: samples, repeat, batch and max tokens must all be >= 1")
        if self.temperature == 0 and self.n > 1:
            raise ValueError(f"eval: {self.n} samples at temperature 0 are {self.n} copies of one greedy answer; "
                             "pass --temperature > 0 for pass@k")
        bad = [k for k in self.ks if k < 1]
        if bad:
            raise ValueError(f"eval: k must be >= 1, got {bad}")

    def meta(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "verify_timeout_s"}


def chunk_seed(seed: int, chunk: int) -> int:
    """A per-chunk sampling seed that does not collide across (seed, chunk) pairs."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{chunk}".encode()).digest()[:4], "little") & 0x7FFFFFFF


def _tokens_in(engine: Engine, prompt: str) -> int | None:
    if engine.tokenizer is None:
        return None
    try:
        return len(engine.tokenizer.encode(prompt))
    except Exception:  # noqa: BLE001 - a count we cannot make is missing, not fatal
        return None


def _generate(engine: Engine, prompts: list[Prompt], params: SamplingParams) -> tuple[list[list[Completion]], list[float]]:
    """Completions per prompt and each prompt's own latency (the engine's per-request timing when it keeps
    one, as remote engines do; else the call's time shared out)."""
    t0 = time.perf_counter()
    groups = run_sync(engine.agenerate(list(prompts), params))
    shared = (time.perf_counter() - t0) / max(len(prompts), 1)
    latencies = []
    for g in groups:
        timed = [c.latency_s for c in g if c.latency_s is not None]
        latencies.append(max(timed) if timed else shared)
    return groups, latencies


def _usage(engine: Engine) -> tuple[int, int] | None:
    if engine.usage is None:
        return None
    return int(engine.usage.prompt_tokens), int(engine.usage.completion_tokens)


def _record(task: Task, repeat: int, j: int, c: Completion, v: Verdict, tokens_in: float | None,
            tokens_out: float | None, latency: float) -> SampleRecord:
    return SampleRecord(
        task_id=task.id, response=c.text, score=float(v.score), passed=bool(v.passed), status=v.status.value,
        verifier=v.verifier, details=v.details, info=dict(v.info), sample=j, repeat=repeat, tokens_in=tokens_in,
        tokens_out=tokens_out, latency_s=latency, verify_s=v.latency_s, finish=c.finish_reason.value,
    )


def _sample_chunk(engine: Engine, verifier: Any, todo: list[Task], repeat: int, params: SamplingParams,
                  timeout: float | None, renderer: PromptRenderer) -> list[SampleRecord]:
    """One engine call for `todo`, graded in one batch: a record per (task, sample). A prompt the model's context
    cannot hold is a recorded failure of the task for this model (score 0, verifier `context`), as in training."""
    before = _usage(engine)
    texts = renderer.render_all(todo)
    ids = None if renderer.adds_bos else renderer.token_ids(texts, engine)  # a raw prompt goes as text, as it always did
    prompts: list[Prompt] = list(ids) if ids is not None else list(texts)
    counted = [len(p) if isinstance(p, list) else _tokens_in(engine, p) for p in prompts]  # once: limit and record
    too_long = {i: why for i, n in enumerate(counted) if (why := context_overflow(n, engine.max_context)) is not None}
    fit = [i for i in range(len(todo)) if i not in too_long]
    sampled, timed = _generate(engine, [prompts[i] for i in fit], renderer.sampling(params)) if fit else ([], [])
    after = _usage(engine)
    fit_tasks = [todo[i] for i, g in zip(fit, sampled) for _ in g]
    judged = iter(score_sync(verifier, fit_tasks, [c.text for g in sampled for c in g], timeout) if fit_tasks else [])
    groups: dict[int, list[Completion]] = dict(zip(fit, sampled))
    latencies: dict[int, float] = dict(zip(fit, timed))
    # a server's token counts come from its usage totals; the local engine's from its tokenizer
    used_in = (after[0] - before[0]) / len(fit) if before and after and fit else None
    used_out = (after[1] - before[1]) / max(len(fit_tasks), 1) if before and after else None

    def text_tokens(i: int) -> int | None:  # the rendered text's count, as records always had it
        return counted[i] if ids is None else _tokens_in(engine, texts[i])

    out = []
    for i, task in enumerate(todo):
        if i in too_long:
            for j in range(params.n):
                empty = Completion([], "", [], FinishReason.LENGTH)
                out.append(_record(task, repeat, j, empty, Verdict(0.0, False, verifier="context", details=too_long[i]),
                                   text_tokens(i), 0, 0.0))
            continue
        group = groups[i]
        t_in = text_tokens(i) if used_in is None else used_in
        for j, c in enumerate(group):
            t_out = len(c.token_ids) if c.token_ids else used_out
            out.append(_record(task, repeat, j, c, next(judged), None if t_in is None else t_in / len(group),
                               t_out, latencies[i] / len(group)))
    return out


def _check_resumable(old: dict[str, Any], new: dict[str, Any], path: Path) -> None:
    for key in _SAMPLING_KEYS:
        if old.get(key) != new.get(key):
            raise EvalDirError(
                f"{path} holds an evaluation with {key} = {old.get(key)!r}, not {new.get(key)!r}: "
                "choose another --out to start afresh (or match the settings to resume it)"
            )


def open_eval_dir(out: str | Path | None, meta: dict[str, Any],
                  tasks: Sequence[Task]) -> tuple[EvalDir | None, dict[tuple[str, int, int], SampleRecord]]:
    """The output directory started with `meta` (None: nothing stored) and the records it already holds, when it
    holds an evaluation made with the same sampling settings (another one is an `EvalDirError`); `meta` gains the
    first run's `created` and a `resumed` count."""
    store = EvalDir(out) if out is not None else None
    done: dict[tuple[str, int, int], SampleRecord] = {}
    if store is not None and store.exists():
        old = store.meta()
        _check_resumable(old, meta, store.path)
        meta["created"] = old.get("created", meta["created"])
        meta["resumed"] = old.get("resumed", 0) + 1
        done = {r.key: r for r in store.records()}
    if store is not None:
        store.start(meta, task_rows(tasks))
    return store, done


def task_rows(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """The tasks as an evaluation stores them (`tasks.jsonl`, `EvalRun.tasks`)."""
    return [{"id": t.id, "prompt": t.prompt, "answer": t.answer} for t in tasks]


def evaluate(
    engine: Engine,
    suite: Any,
    spec: EvalSpec,
    out: str | Path | None = None,
    price: Price | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    extra_meta: dict[str, Any] | None = None,
    renderer: PromptRenderer | None = None,
) -> EvalRun:
    """Sample and grade every (task, repeat, sample) not already recorded in `out`; return the whole run.
    `renderer`: how tasks become prompts (default: the raw prompt), the training run's own for a trained model.
    A single-turn suite's leg of `run_eval` (`eval/run.py`), which callers go through.

    The summary is `run.summary` (and `out/summary.json`).
    """
    tasks: list[Task] = list(suite.tasks)
    meta = {**spec.meta(), "suite_name": suite.name, "n_suite_tasks": len(tasks), "verifier": verifier_id(suite.verifier),
            "engine": type(engine).__name__, "created": time.time(), **(extra_meta or {})}
    store, done = open_eval_dir(out, meta, tasks)
    chunks = [tasks[i : i + spec.batch] for i in range(0, len(tasks), spec.batch)]
    total, finished = len(chunks) * spec.repeat, 0
    for repeat in range(spec.repeat):
        for index, chunk in enumerate(chunks):
            todo = [t for t in chunk if any((t.id, repeat, j) not in done for j in range(spec.n))]
            if todo:
                params = SamplingParams(n=spec.n, temperature=spec.temperature, top_p=spec.top_p,
                                        max_tokens=spec.max_tokens, seed=chunk_seed(spec.seed, index))
                new = [r for r in _sample_chunk(engine, suite.verifier, todo, repeat, params, spec.verify_timeout_s,
                                                renderer or PromptRenderer()) if r.key not in done]
                done.update((r.key, r) for r in new)
                if store is not None:
                    store.append(new)
            finished += 1
            if on_progress:
                on_progress(finished, total)
    records = [r for r in done.values() if r.repeat < spec.repeat and r.sample < spec.n]
    summary = summarize(records, spec.ks, price, [t.id for t in tasks])
    if store is not None:
        store.write_summary(summary)
    return EvalRun(meta, records, task_rows(tasks), store.path if store else None, summary)


def regrade(suite: Any, records: Sequence[SampleRecord], timeout: float | None = None) -> list[SampleRecord]:
    """The same responses judged again by `suite.verifier` (records of unknown tasks become ERROR records)."""
    by_id = {t.id: t for t in suite.tasks}
    known = [r for r in records if r.task_id in by_id]
    verdicts = score_sync(suite.verifier, [by_id[r.task_id] for r in known], [r.response for r in known], timeout)
    out = []
    for r, v in zip(known, verdicts):
        out.append(SampleRecord(**{**asdict(r), "score": float(v.score), "passed": bool(v.passed), "status": v.status.value,
                                   "verifier": v.verifier, "details": v.details, "info": dict(v.info),
                                   "verify_s": v.latency_s}))
    for r in records:
        if r.task_id not in by_id:
            out.append(SampleRecord(**{**asdict(r), "score": 0.0, "passed": False, "status": "error",
                                       "details": f"task {r.task_id!r} is not in suite {suite.name!r}", "info": {}}))
    return out


def rescore(path: str | Path, suite: Any | None = None, price: Price | None = None,
            timeout: float | None = None) -> tuple[EvalRun, int]:
    """Re-grade an evaluation directory's responses with its suite's current verifier, in place.

    Returns the updated run and how many verdicts changed (passed or status).
    """
    from posttrain.tasks.domains import load_domain

    store = EvalDir(path)
    run = store.load()
    if run.meta.get("mode") == "episodes":
        raise EvalDirError(f"{path} holds agent episodes, judged in their sandbox as they ran: an episode cannot be "
                           "re-graded from its answer alone; rerun the evaluation instead")
    suite = suite or load_domain(run.meta["suite"], **run.meta.get("suite_options", {})).suite()
    fresh = regrade(suite, run.records, timeout)
    old = {r.key: (r.passed, r.status) for r in run.records}
    changed = sum(old[r.key] != (r.passed, r.status) for r in fresh)
    meta = dict(run.meta)
    meta.setdefault("rescored", []).append({"time": time.time(), "from": meta.get("verifier"), "changed": changed})
    meta["verifier"] = verifier_id(suite.verifier)
    meta.pop("summary", None)  # the figures live in summary.json, never in meta.json
    store.start(meta, run.tasks)
    store.rewrite(fresh)
    summary = summarize(fresh, meta.get("ks", (1,)), price, [t["id"] for t in run.tasks])
    store.write_summary(summary)
    return EvalRun(meta, fresh, run.tasks, store.path, summary), changed
