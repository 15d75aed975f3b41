"""Commands of the `eval` package, mounted on the `posttrain` app by `register`.

Covers: `posttrain eval` (sample a model on a suite, or grade a responses
file, or re-grade a recorded eval), `posttrain compare A B` (paired
comparison; exit 1 on a significant regression, so it gates CI) and
`posttrain report X [Y ...]` (one self-contained HTML file). User errors
print one line and exit 2; progress goes to stderr so `--json` stays clean.
Does not cover: the computations (harness, summary, compare, report modules).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any, Optional

import typer


def _parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise typer.BadParameter(f"-k takes comma-separated integers like 1,8,16, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise typer.BadParameter(f"-k values must be >= 1, got {text!r}")
    return ks


def _price_table(price: str | None, prices: Path | None) -> dict[str, Any]:
    """The price settings as stored in an eval's meta: {"default": {...}} and/or a table by model name."""
    from posttrain.cli import UserError

    table: dict[str, Any] = {}
    if prices is not None:
        try:
            table = json.loads(prices.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"--prices {prices}: {exc}") from None
    if price is not None:
        try:
            parts = [float(x) for x in price.split(",")]
        except ValueError:
            raise UserError(f"--price takes IN,OUT[,PER_HOUR] numbers (USD per million tokens, per hour), got {price!r}") from None
        if not 2 <= len(parts) <= 3:
            raise UserError(f"--price takes IN,OUT[,PER_HOUR], got {price!r}")
        table["default"] = dict(zip(("input_per_mtok", "output_per_mtok", "per_hour"), parts))
    return table


def price_of(meta: dict[str, Any]):
    """The `Price` an eval's meta says its model costs (free when it says nothing)."""
    from posttrain.eval.metrics import Price, price_for

    table = {k: Price(**v) for k, v in (meta.get("prices") or {}).items()}
    name = (meta.get("model_info") or {}).get("served_model") or meta.get("model") or ""
    return price_for(str(name), table)


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.1%}" if pct else (f"{x:.4g}")
    return str(x)


def _print_summary(title: str, s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column(f"{s.get('confidence', 0.95):.0%} interval", justify="right")
    table.add_row("tasks (samples)", f"{s['n_tasks']} ({s['n_samples']})", "")
    for k in s["ks"]:
        lo, hi = s[f"pass@{k}_ci"]
        table.add_row(f"pass@{k}", _fmt(s[f"pass@{k}"], True), f"{_fmt(lo, True)} .. {_fmt(hi, True)}")
    for k in s["ks"]:
        if k > 1:
            table.add_row(f"pass^{k}", _fmt(s[f"pass^{k}"], True), "")
    table.add_row("mean score", _fmt(s["mean_score"]), "")
    table.add_row("verifier errors", str(s["n_errors"]), "")
    table.add_row("tokens in / out", f"{_fmt(s['tokens_in'])} / {_fmt(s['tokens_out'])}", "")
    table.add_row("cost (per solved)", f"{_fmt(s['cost'])} ({_fmt(s['cost_per_solved'])})", "")
    table.add_row("latency p50 / p95 s", f"{_fmt(s['latency_p50'])} / {_fmt(s['latency_p95'])}", "")
    if "flaky_tasks" in s:
        table.add_row(f"flaky tasks ({s['repeats']} repeats)", str(len(s["flaky_tasks"])), f"flip rate {_fmt(s['flip_rate'])}")
    Console(stderr=False).print(table)


def _emit(summary: dict[str, Any], as_json: bool, title: str, extra: dict[str, Any] | None = None) -> None:
    from posttrain.eval.records import clean_json

    if as_json:
        print(json.dumps(clean_json({**(extra or {}), **summary})))
    else:
        _print_summary(title, summary)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[-60:] or "x"


def eval_cmd(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="A checkpoint dir, a run dir[@STEP], 'builtin', or an http(s) OpenAI-compatible URL[#served-name]."),
    suite: Optional[str] = typer.Option(None, "--suite", "-s", help="Suite name (`posttrain tasks list`) or a .jsonl path."),
    responses: Optional[Path] = typer.Option(None, "--responses", help="Grade this JSONL of {task_id, response|completion} instead of sampling."),
    rescore_dir: Optional[Path] = typer.Option(None, "--rescore", help="Re-grade a recorded eval directory with the current verifier."),
    samples: int = typer.Option(1, "-n", "--samples", min=1, help="Samples per task."),
    ks: str = typer.Option("1", "-k", help="pass@k values to report, comma-separated (e.g. 1,8,16)."),
    temperature: float = typer.Option(0.0, "--temperature", "-t", min=0.0, help="Sampling temperature (0: greedy)."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed (per chunk of tasks, so results do not depend on resumes)."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Completion length cap."),
    repeat: int = typer.Option(1, "--repeat", min=1, help="Run the eval R times with the same seeds; reports each task's flip rate."),
    batch: int = typer.Option(32, "--batch", min=1, help="Tasks per engine call."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the suite's first N tasks."),
    suite_opt: Optional[list[str]] = typer.Option(
        None, "--suite-opt", help="A suite option KEY=VALUE, e.g. --suite-opt size=50 (repeatable)."
    ),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Directory for meta, every response and the summary (default: evals/<suite>-<model>-<time>)."),
    price: Optional[str] = typer.Option(None, "--price", help="IN,OUT[,PER_HOUR]: USD per million input/output tokens (and per hour of generation)."),
    prices: Optional[Path] = typer.Option(None, "--prices", help="JSON price table {model: {input_per_mtok, output_per_mtok, per_hour}}."),
    verify_timeout: Optional[float] = typer.Option(None, "--verify-timeout", help="Bound on one batch's grading, seconds."),
    label: Optional[str] = typer.Option(None, "--label", help="A name for this result in comparisons and reports."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (metrics and per-task results under 'tasks')."),
) -> None:
    """Evaluate a model on a suite (pass@k with intervals, cost, latency), or grade given responses."""
    from posttrain.cli import UserError, _friendly, err

    with _friendly():
        from posttrain.eval.harness import EvalSpec, evaluate, rescore
        from posttrain.eval.metrics import Price, price_for
        from posttrain.eval.records import EvalDir, EvalDirError
        from posttrain.tasks.domains import load_domain, parse_options

        k_values = _parse_ks(ks)
        table = _price_table(price, prices)
        options = parse_options(suite_opt)
        if limit:
            options["limit"] = limit
        modes = sum(x is not None for x in (model, responses, rescore_dir))
        if modes != 1:
            raise UserError("eval: give exactly one of --model (sample), --responses FILE (grade) or --rescore DIR (re-grade)")
        try:
            if rescore_dir is not None:
                run, changed = rescore(rescore_dir, load_domain(suite, **options).suite() if suite else None,
                                       price_of(EvalDir(rescore_dir).meta()), verify_timeout)
                err.print(f"re-graded {len(run.records)} responses in {rescore_dir}: {changed} verdicts changed")
                _emit(run.meta["summary"], as_json, f"{run.meta.get('suite')} (re-graded)", {"changed": changed})
                return
            if suite is None:
                raise UserError("eval: --suite is required")
            loaded = load_domain(suite, **options).suite()
            prewarm = getattr(loaded.verifier, "prewarm", None)
            if callable(prewarm):
                prewarm()  # start the verifier's sandbox while the responses load
            if responses is not None:
                from posttrain.eval.responses import read_responses, score_responses
                from posttrain.eval.summary import summarize

                records = score_responses(loaded, read_responses(responses), verify_timeout)
                pr = price_for(label or "", {k: Price(**v) for k, v in table.items()})
                summary = summarize(records, k_values, pr, [t.id for t in loaded.tasks])
                if out is not None:
                    from posttrain.rewards.base import verifier_id

                    store = EvalDir(out)
                    meta = {"model": label or str(responses), "label": label, "suite": suite, "suite_options": options,
                            "suite_name": loaded.name, "responses": str(responses), "verifier": verifier_id(loaded.verifier),
                            "ks": list(k_values), "prices": table, "created": time.time()}
                    store.start(meta, ({"id": t.id, "prompt": t.prompt, "answer": t.answer} for t in loaded.tasks))
                    store.rewrite(records)
                    store.write_summary(summary)
                _emit(summary, as_json, f"{loaded.name}: {responses.name}", {"suite": suite})
                return
            from posttrain.resolve import resolve_model

            spec = EvalSpec(model=model, suite=suite, n=samples, ks=k_values, temperature=temperature, top_p=top_p,
                            max_tokens=max_tokens, seed=seed, repeat=repeat, batch=batch, suite_options=options,
                            verify_timeout_s=verify_timeout, label=label)
            resolved = resolve_model(model, seed=seed)
            out = out or Path("evals") / f"{_slug(suite)}-{_slug(model)}-{time.strftime('%Y%m%d-%H%M%S')}"
            extra = {"model_info": resolved.info, "prices": table}
            price_obj = price_of({**spec.meta(), **extra})
            from rich.progress import Progress

            try:
                with Progress(console=err, transient=True) as progress:
                    bar = progress.add_task(f"eval {loaded.name}", total=None)
                    run = evaluate(resolved.engine, loaded, spec, out, price_obj,
                                   on_progress=lambda done, total: progress.update(bar, completed=done, total=total),
                                   extra_meta=extra)
            except KeyboardInterrupt:
                err.print(f"[yellow]interrupted[/]: finished samples are kept in {out}; rerun the same command to resume")
                raise typer.Exit(130) from None
            err.print(f"results in {out} (rescore with: posttrain eval --rescore {out})")
            _emit(run.meta["summary"], as_json, f"{loaded.name}: {model}", {"out": str(out), "suite": suite, "model": model})
        except (EvalDirError, ValueError) as exc:
            raise UserError(str(exc)) from None
        except Exception as exc:
            if type(exc).__name__ == "EngineRequestError":
                raise UserError(f"the model endpoint failed: {exc} (finished samples are kept; rerun to resume)") from None
            raise


def compare_cmd(
    a: Path = typer.Argument(..., help="Baseline eval directory."),
    b: Path = typer.Argument(..., help="Candidate eval directory (same suite)."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level and FDR for per-task tests."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Paired comparison of two evals; exit code 1 when B significantly regresses on A (gates CI)."""
    from posttrain.cli import UserError, _friendly

    with _friendly():
        from posttrain.eval.compare import compare
        from posttrain.eval.records import EvalDirError, clean_json, load_eval

        try:
            ra, rb = load_eval(a), load_eval(b)
        except EvalDirError as exc:
            raise UserError(str(exc)) from None
        result = compare(ra, rb, alpha, (price_of(ra.meta), price_of(rb.meta)))
        if as_json:
            print(json.dumps(clean_json(result.to_dict())))
        else:
            _print_comparison(result)
    if result.regression:
        raise typer.Exit(1)


def _print_comparison(c) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    d = c.diff
    con.print(f"[bold]{c.suite}[/]: {c.n_paired} paired tasks; A = {c.a}, B = {c.b}")
    con.print(f"pass@1 A {c.a_pass1:.1%}  B {c.b_pass1:.1%}  B-A {d.mean:+.3f} "
              f"(paired bootstrap {1 - c.alpha:.0%}: {d.lo:+.3f} .. {d.hi:+.3f})")
    if c.mcnemar:
        con.print(f"McNemar exact: A-only {c.mcnemar['a_only']}, B-only {c.mcnemar['b_only']}, p = {c.mcnemar['p']:.3g}")
    view = Table(title="accuracy vs cost and latency")
    view.add_column("")
    for side in ("A", "B"):
        view.add_column(f"{side}: {c.sides[side]['name']}", justify="right")
    view.add_column("B/A", justify="right")
    for key, pct in (("pass@1", True), ("cost_per_task", False), ("cost_per_solved", False), ("solved_per_cost", False),
                     ("tokens_out", False), ("latency_p50", False), ("latency_p95", False), ("seconds_per_solved", False)):
        va, vb = c.sides["A"][key], c.sides["B"][key]
        ratio = vb / va if isinstance(va, (int, float)) and va and not math.isnan(va) and vb is not None else math.nan
        view.add_row(key, _fmt(va, pct), _fmt(vb, pct), _fmt(ratio))
    con.print(view)
    for name, rows in (("regressed", c.regressed), ("improved", c.improved)):
        if rows:
            t = Table(title=f"{len(rows)} {name} (Fisher, BH q <= {c.alpha})")
            for col in ("task", "A", "B", "p", "q"):
                t.add_column(col)
            for r in rows[:50]:
                t.add_row(r.task_id, f"{r.a_c}/{r.a_n}", f"{r.b_c}/{r.b_n}", f"{r.p:.2g}", f"{r.q:.2g}")
            con.print(t)
    con.print("[bold red]REGRESSION[/]: " + "; ".join(c.reasons) if c.regression else "[green]no significant regression[/]")


def report_cmd(
    sources: list[Path] = typer.Argument(..., help="Eval directories and/or training run directories; the first eval is the baseline."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="HTML file to write (default: report.html beside the first source)."),
) -> None:
    """Write one self-contained HTML report: pass@k, per-task rates, learning curves, cost, regressions, samples."""
    from posttrain.cli import UserError, _friendly, err

    with _friendly():
        from posttrain.eval.records import EvalDirError
        from posttrain.eval.report import write_report

        target = out or (sources[0] / "report.html")
        try:
            path = write_report(sources, target)
        except EvalDirError as exc:
            raise UserError(str(exc)) from None
        err.print(f"report written to {path}")
        print(path)


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level app (imports stay lazy inside each command)."""
    app.command("eval")(eval_cmd)
    app.command("compare")(compare_cmd)
    app.command("report")(report_cmd)
