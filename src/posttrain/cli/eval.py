"""`posttrain eval`, `posttrain compare` and `posttrain report`: evaluating models, comparing and reporting results.

Covers: `eval` (sample a model on a suite, or grade a responses file, or re-grade a recorded eval),
`compare A B` (paired comparison; exit 1 on a significant regression, so it gates CI) and `report X [Y ...]`
(one self-contained HTML file): their options, tables and JSON. `eval`'s sampling flags default to the `[eval]`
section of the run `--model` names (its defaults for any other model; `eval/settings.py` merges them). User
errors print one line and exit 2; progress goes to stderr so `--json` stays clean.
Does not cover: the computations (`eval/modes.py`: each mode as a function over `eval.run.run_eval`, which runs an
agent suite as episodes by itself; the summary, compare and report modules) or prices (`posttrain.pricing`).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from posttrain.cli.common import INTERRUPTED_EXIT, err, fmt, friendly
from posttrain.cli.common import out as console  # `out` is also an option's name here
from posttrain.errors import UserError
from posttrain.eval.results import EvalSummary


def parse_ks(text: str) -> tuple[int, ...]:
    """`-k 1,8,16` as sorted distinct integers >= 1."""
    try:
        ks = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise typer.BadParameter(f"-k takes comma-separated integers like 1,8,16, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise typer.BadParameter(f"-k values must be >= 1, got {text!r}")
    return ks


def slug(text: str) -> str:
    """A piece of a directory name: unsafe characters folded to '_', at most the last 60."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[-60:] or "x"


def _print_summary(title: str, s: EvalSummary) -> None:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column(f"{s.confidence:.0%} interval", justify="right")
    table.add_row("tasks (samples)", f"{s.n_tasks} ({s.n_samples})", "")
    for k in s.ks:
        est = s.pass_at[k]
        table.add_row(f"pass@{k}", fmt(est.value, True), f"{fmt(est.ci_low, True)} .. {fmt(est.ci_high, True)}")
    for k in s.ks:
        if k > 1:
            table.add_row(f"pass^{k}", fmt(s.pass_hat[k].value, True), "")
    table.add_row("mean score", fmt(s.mean_score.value), "")
    table.add_row("verifier errors", str(s.n_errors), "")
    table.add_row("tokens in / out", f"{fmt(s.tokens_in)} / {fmt(s.tokens_out)}", "")
    table.add_row("cost (per solved)", f"{fmt(s.cost)} ({fmt(s.cost_per_solved)})", "")
    table.add_row("latency p50 / p95 s", f"{fmt(s.latency.p50)} / {fmt(s.latency.p95)}", "")
    if s.repeats > 1:
        table.add_row(f"flaky tasks ({s.repeats} repeats)", str(len(s.flaky_tasks)), f"flip rate {fmt(s.flip_rate)}")
    console.print(table)


def emit(summary: EvalSummary | None, as_json: bool, title: str, extra: dict[str, Any] | None = None) -> None:
    """The summary as one JSON object (`extra` first, then exactly the keys of summary.json) or a table."""
    from posttrain.eval.records import clean_json

    assert summary is not None  # every caller passes the summary it just computed
    if as_json:
        print(json.dumps(clean_json({**(extra or {}), **summary.to_dict()})))
    else:
        _print_summary(title, summary)


def eval_cmd(
    model: Optional[str] = typer.Option(
        None, "--model", "-m",
        # typer renders help as rich markup: "\\[" keeps a literal bracket
        help="A checkpoint dir, a run dir\\[@STEP], 'builtin', or an http(s) OpenAI-compatible URL\\[#served-name].",
    ),
    suite: Optional[str] = typer.Option(None, "--suite", "-s", help="Suite name (`posttrain tasks list`) or a .jsonl path."),
    responses: Optional[Path] = typer.Option(
        None, "--responses", help="Grade this JSONL of {task_id, response|completion} instead of sampling."
    ),
    rescore_dir: Optional[Path] = typer.Option(
        None, "--rescore", help="Re-grade a recorded eval directory with the current verifier."
    ),
    samples: Optional[int] = typer.Option(None, "-n", "--samples", min=1, help="Samples per task (eval.samples: 1)."),
    ks: Optional[str] = typer.Option(None, "-k", help="pass@k values to report, comma-separated, e.g. 1,8,16 (eval.ks: 1)."),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", "-t", min=0.0, help="Sampling temperature, 0: greedy (eval.temperature: 0)."
    ),
    top_p: Optional[float] = typer.Option(None, "--top-p", help="Nucleus sampling (eval.top_p: 1)."),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Sampling seed, per chunk of tasks so results do not depend on resumes (eval.seed: 0)."
    ),
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", min=1,
        help="Completion length cap (eval.max_tokens; unset: the suite's own, e.g. 8 for arith:add, 512 for humaneval).",
    ),
    repeat: Optional[int] = typer.Option(
        None, "--repeat", min=1, help="Run the eval R times with the same seeds; reports each task's flip rate (eval.repeat: 1)."
    ),
    batch: Optional[int] = typer.Option(
        None, "--batch", min=1,
        help="Tasks per engine call (eval.batch; unset: 32, and a suite per call on a run's own domains, as in training)."
    ),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the suite's first N tasks."),
    suite_opt: Optional[list[str]] = typer.Option(
        None, "--suite-opt", help="A suite option KEY=VALUE, e.g. --suite-opt size=50 (repeatable)."
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Directory for meta, every response and the summary (default: evals/<suite>-<model>-<time>)."
    ),
    price: Optional[str] = typer.Option(
        None, "--price", help="IN,OUT[,PER_HOUR]: USD per million input/output tokens (and per hour of generation)."
    ),
    prices: Optional[Path] = typer.Option(
        None, "--prices", help="JSON price table {model: {input_per_mtok, output_per_mtok, per_hour}}."
    ),
    verify_timeout: Optional[float] = typer.Option(None, "--verify-timeout", help="Bound on one batch's grading, seconds."),
    label: Optional[str] = typer.Option(None, "--label", help="A name for this result in comparisons and reports."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (metrics and per-task results under 'tasks')."),
    split: Optional[str] = typer.Option(
        None, "--split", help="With --model RUN: which of the run's own tasks: selection, reporting, held_out, train or "
        "all (eval.split: reporting)."),
    verifier: Optional[str] = typer.Option(
        None, "--verifier", help="Grade with this verifier (a kind such as numeric, or a TOML table) instead of the "
        "run's training verifier or the suite's own."),
) -> None:
    """Evaluate a model on a suite (pass@k with intervals, cost, latency), or grade given responses.

    The sampling flags default to the \\[eval] section of the run --model names (for any other model: its defaults).
    """
    with friendly():
        from posttrain.engine.remote.errors import EngineRequestError
        from posttrain.eval.settings import with_flags
        from posttrain.pricing import price_table
        from posttrain.tasks.domains import parse_options

        flags = {"samples": samples, "ks": parse_ks(ks) if ks is not None else None, "temperature": temperature,
                 "top_p": top_p, "seed": seed, "max_tokens": max_tokens, "repeat": repeat, "batch": batch, "split": split}
        table = price_table(price, prices)
        options = parse_options(suite_opt) | ({"limit": limit} if limit else {})
        if sum(x is not None for x in (model, responses, rescore_dir)) != 1:
            raise UserError("eval: give exactly one of --model (sample), --responses FILE (grade) or --rescore DIR (re-grade)")
        try:
            if rescore_dir is not None:
                _rescore(rescore_dir, _suite(suite, options, None)[1] if suite else None, verify_timeout, as_json)
                return
            run = _run_of(model, suite) if model is not None else None
            settings = with_flags(run.eval if run is not None else None, **flags)  # flags over the run's [eval]
            if run is not None and (suite is None or suite in [dc.source for dc in run.domain_configs()]):
                _eval_own_run(model, run, suite, verifier, settings, out, table, verify_timeout, label, as_json)
                return
            if suite is None:
                raise UserError("eval: --suite is required (or --model RUN, a training run: its own domains)")
            if split is not None:
                raise UserError("eval: --split applies to a training run's own domains (--model RUN, without another --suite)")
            domain, loaded = _suite(suite, options, verifier)
            if responses is not None:
                from posttrain.eval.modes import grade_responses

                graded = grade_responses(loaded, responses, tuple(settings.ks), suite, options, table, out, label,
                                         verify_timeout)
                emit(graded.summary, as_json, f"{loaded.name}: {responses.name}", {"suite": suite})
                return
            assert model is not None  # one of the three modes
            _sample(domain, loaded, model, suite, options, settings, out, table, verify_timeout, label, as_json)
        except UserError:
            raise
        except ValueError as exc:
            # eval's settings are checked where they are used (EvalSpec, SamplingParams, a suite's options):
            # from this command, each of those ValueErrors is the user's option to fix
            raise UserError(str(exc)) from None
        except EngineRequestError as exc:
            raise UserError(f"the model endpoint failed: {exc} (finished samples are kept; rerun to resume)") from None


def _rescore(path: Path, suite: Any, verify_timeout: Optional[float], as_json: bool) -> None:
    """`eval --rescore DIR`: its responses re-graded in place (by `suite`'s verifier when given), the summary printed."""
    from posttrain.eval.modes import rescore_dir

    run, changed = rescore_dir(path, suite, verify_timeout)
    err.print(f"re-graded {len(run.records)} responses in {path}: {changed} verdicts changed")
    emit(run.summary, as_json, f"{run.meta.get('suite')} (re-graded)", {"changed": changed})


def _suite(suite: str, options: dict[str, Any], verifier: Optional[str]) -> tuple[Any, Any]:
    """The named suite's domain and its evaluation `Suite` (`eval.modes.suite_of`), judged by `--verifier` when
    given (built by the wiring, as a config's verifier is)."""
    from posttrain.eval.modes import suite_of
    from posttrain.tasks.domains import load_domain

    domain = load_domain(suite, **options)
    if verifier is not None:
        from posttrain.config import RewardConfig, parse_literal
        from posttrain.rl.build import build_verifier

        domain = domain.with_verifier(build_verifier(parse_literal(verifier), RewardConfig()))
    return domain, suite_of(domain)


def _run_of(model: str, suite: Optional[str]) -> Any:
    """The `RunConfig` of the training run `model` names; None for any other model, and for an old run whose stored
    config no longer validates when `suite` is named (it is evaluated on that suite all the same)."""
    from posttrain.resolve import ModelSpecError, run_config

    try:
        return run_config(model)
    except ModelSpecError:
        if suite is None:  # only its own terms were asked for: say why they cannot be had
            raise
        return None


def _eval_own_run(model: str, cfg: Any, suite: Optional[str], verifier: Optional[str], settings: Any,
                  out: Optional[Path], table: Any, verify_timeout: Optional[float], label: Optional[str],
                  as_json: bool) -> None:
    """`--model RUN` with no other suite (or one of its own): the run `cfg` evaluated on its own terms (what it trained
    on, graded as it was rewarded, on its held-out split), sampled as `settings` say, printed."""
    from posttrain.rl.own_eval import evaluate_own

    def own_out(used_split: str) -> Path:
        return out or Path("evals") / f"{slug(model)}-{used_split}-{time.strftime('%Y%m%d-%H%M%S')}"

    def say(line: str) -> None:
        err.print(escape(line), highlight=False, soft_wrap=True)

    for r in evaluate_own(model, cfg, settings, verifier, suite, own_out, table, verify_timeout, label, say):
        emit(r.summary, as_json, r.title, r.extra)


def _sample(domain: Any, loaded: Any, model: str, suite: str, options: dict[str, Any], settings: Any,
            out: Optional[Path], table: Any, verify_timeout: Optional[float], label: Optional[str], as_json: bool) -> None:
    """`eval --model M --suite S`: the model resolved, `eval.modes.sample` under a progress bar as `settings` say, the
    summary printed (an agent suite's episode figures with it)."""
    from posttrain.eval.modes import default_max_tokens, sample
    from posttrain.eval.settings import spec_of
    from posttrain.resolve import resolve_model

    spec = spec_of(settings, model, suite, default_max_tokens(domain, loaded), 32, suite_options=options,
                   verify_timeout_s=verify_timeout, label=label)
    resolved = resolve_model(model, seed=settings.seed)
    if resolved.info.get("note"):  # a run's best/ (or its newest checkpoint) was chosen: say which
        err.print(escape(resolved.info["note"]), highlight=False, soft_wrap=True)
    out = out or Path("evals") / f"{slug(suite)}-{slug(model)}-{time.strftime('%Y%m%d-%H%M%S')}"
    kind = "episodes on" if loaded.agent is not None else "eval"
    try:
        with Progress(console=err, transient=True) as progress:
            bar = progress.add_task(f"{kind} {loaded.name}", total=None)
            run = sample(resolved.engine, loaded, spec, out, resolved.info, table, resolved.renderer,
                         on_progress=lambda done, total: progress.update(bar, completed=done, total=total))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted[/]: finished samples are kept in {out}; rerun the same command to resume")
        raise typer.Exit(INTERRUPTED_EXIT) from None
    extra: dict[str, Any] = {"out": str(out), "suite": suite, "model": model}
    if run.episodes is not None:
        err.print(f"results in {out} (episodes.jsonl holds every transcript)")
        emit(run.summary, as_json, f"{loaded.name} (episodes): {model}", {**extra, "episode_metrics": run.episode_metrics})
        return
    err.print(f"results in {out} (rescore with: posttrain eval --rescore {out})")
    emit(run.summary, as_json, f"{loaded.name}: {model}", extra)


def compare_cmd(
    a: Path = typer.Argument(..., help="Baseline eval directory."),
    b: Path = typer.Argument(..., help="Candidate eval directory (same suite)."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level and FDR for per-task tests."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Paired comparison of two evals; exit code 1 when B significantly regresses on A (gates CI)."""
    with friendly():
        from posttrain.eval.compare import compare
        from posttrain.eval.records import clean_json, load_eval
        from posttrain.pricing import price_of

        ra, rb = load_eval(a), load_eval(b)  # an EvalDirError is a UserError
        result = compare(ra, rb, alpha, (price_of(ra.meta), price_of(rb.meta)))
        if as_json:
            print(json.dumps(clean_json(result.to_dict())))
        else:
            _print_comparison(result)
    if result.regression:
        raise typer.Exit(1)


def _print_comparison(c) -> None:
    d = c.diff
    console.print(f"[bold]{c.suite}[/]: {c.n_paired} paired tasks; A = {c.a}, B = {c.b}")
    console.print(f"pass@1 A {c.a_pass1:.1%}  B {c.b_pass1:.1%}  B-A {d.mean:+.3f} "
              f"(paired bootstrap {1 - c.alpha:.0%}: {d.lo:+.3f} .. {d.hi:+.3f})")
    if c.mcnemar:
        console.print(f"McNemar exact: A-only {c.mcnemar['a_only']}, B-only {c.mcnemar['b_only']}, p = {c.mcnemar['p']:.3g}")
    view = Table(title="accuracy vs cost and latency")
    view.add_column("")
    for side in ("A", "B"):
        view.add_column(f"{side}: {c.sides[side]['name']}", justify="right")
    view.add_column("B/A", justify="right")
    for key, pct in (("pass@1", True), ("cost_per_task", False), ("cost_per_solved", False), ("solved_per_cost", False),
                     ("tokens_out", False), ("latency_p50", False), ("latency_p95", False), ("seconds_per_solved", False)):
        va, vb = c.sides["A"][key], c.sides["B"][key]
        ratio = vb / va if isinstance(va, (int, float)) and va and not math.isnan(va) and vb is not None else math.nan
        view.add_row(key, fmt(va, pct), fmt(vb, pct), fmt(ratio))
    console.print(view)
    for name, rows in (("regressed", c.regressed), ("improved", c.improved)):
        if rows:
            t = Table(title=f"{len(rows)} {name} (Fisher, BH q <= {c.alpha})")
            for col in ("task", "A", "B", "p", "q"):
                t.add_column(col)
            for r in rows[:50]:
                t.add_row(r.task_id, f"{r.a_c}/{r.a_n}", f"{r.b_c}/{r.b_n}", f"{r.p:.2g}", f"{r.q:.2g}")
            console.print(t)
    console.print("[bold red]REGRESSION[/]: " + "; ".join(c.reasons) if c.regression else "[green]no significant regression[/]")


def report_cmd(
    sources: list[Path] = typer.Argument(
        ..., help="Eval directories and/or training run directories; the first eval is the baseline."
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="HTML file to write (default: report.html beside the first source)."
    ),
) -> None:
    """Write one self-contained HTML report: pass@k, per-task rates, learning curves, cost, regressions, samples."""
    with friendly():
        from posttrain.eval.report import write_report

        target = out or (sources[0] / "report.html")
        path = write_report(sources, target)  # an EvalDirError is a UserError
        err.print(f"report written to {path}")
        print(path)
