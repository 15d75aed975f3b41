"""`posttrain agent run` and `posttrain agent show`: run agents on tasks in the sandbox, replay what they did.

Covers: `run --model M (--task DIR | --suite S)`: the model is anything `posttrain eval --model`
takes (a local checkpoint, `builtin`, a run dir; `URL#name` is driven with native tools), or
`oracle` (each task's own solution, then submit) / `noop` (submit at once), which prove a suite's
graders; suites are `demo` (built in), `terminal` or a directory of Harbor tasks; episodes run
concurrently, their transcripts stream to stderr live, each is stored in the run store
(`OUT/run.sqlite`, table `episodes`) as it ends, and `--json` prints one object per task on
stdout. A task that fails to load, or an endpoint that answers garbage, is one clear line; the
other tasks still run. `show RUN [EPISODE]`: the stored episodes of a run, or one transcript.
Does not cover: the runtime (`posttrain.agent`), terminal task loading (`posttrain.tasks.harbor`).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from posttrain.cli.common import err, fmt, friendly, out
from posttrain.errors import UserError

app = typer.Typer(no_args_is_help=True)

SCRIPTED = ("oracle", "noop")


def _load_tasks(task_dir: Optional[Path], suite: Optional[str]) -> list[Any]:
    if (task_dir is None) == (suite is None):
        raise UserError("agent run: give exactly one of --task DIR or --suite NAME")
    if suite == "demo":
        from posttrain.agent.demo import demo_tasks

        return list(demo_tasks())
    from posttrain.tasks import harbor

    if task_dir is not None:
        return [harbor.load_terminal_task(task_dir)]
    errors: list[harbor.TaskLoadError] = []
    tasks = list(harbor.load_terminal_suite(suite, errors=errors))
    for e in errors:  # one line each; the other tasks still run
        err.print(f"[bold red]error:[/] {escape(e.path)}: {escape(e.message)}", highlight=False)
    return tasks


def _model_for(spec: str, task: Any, shared: Any) -> tuple[Any, list[Any] | None]:
    """The model for one task, and the tools it gets (None: the env's own)."""
    from posttrain.agent.env import AgentTask
    from posttrain.agent.scripted import ScriptedAgent, call, noop_agent, oracle_agent
    from posttrain.agent.terminal import solution_tool
    from posttrain.agent.tools import default_tools

    if spec == "noop":
        return noop_agent(), None
    if spec == "oracle":
        if not task.solution:
            raise UserError(f"task {task.id}: it has no solution for the oracle to run")
        if isinstance(task, AgentTask):
            return oracle_agent(task.solution), None
        return ScriptedAgent([call("run_solution"), call("submit")]), [*default_tools(), solution_tool(task)]
    return shared, None


def _shared_model(spec: str, seed: int) -> Any:
    if spec in SCRIPTED:
        return None
    from posttrain.resolve import resolve_model

    resolved = resolve_model(spec, seed=seed)
    if spec.startswith(("http://", "https://")):
        from posttrain.agent.openai_chat import ChatEndpointModel

        return ChatEndpointModel(resolved.info["url"], resolved.info["served_model"])
    return resolved.engine


def _print_turn(task_id: str, turn: Any) -> None:
    head = f"[bold cyan]{escape(task_id)}[/] [dim]{turn.kind} ({turn.context_tokens} ctx tokens)[/]"
    text = turn.completion.text.strip()
    err.print(head + "\n  " + escape(text[:600]).replace("\n", "\n  "), highlight=False)
    if turn.format_error:
        err.print(f"  [yellow]format error:[/] {escape(turn.format_error)}", highlight=False)
    elif turn.observation:
        obs = turn.observation.strip()
        err.print("  [green]->[/] " + escape(obs[:800]).replace("\n", "\n     "), highlight=False)


def _result(idx: int, ep: Any) -> dict[str, Any]:
    return {"task_id": ep.task_id, "passed": ep.passed, "reward": ep.reward, "steps": ep.steps,
            "status": ep.status.value, "tokens_in": ep.tokens_in, "tokens_out": ep.tokens_out,
            "seconds": round(ep.times.total_s, 3), "cost_usd": ep.cost_usd, "format_errors": ep.format_errors,
            "error": ep.error, "episode": idx}


@app.command("run")
def run_cmd(
    model: str = typer.Option(..., "--model", "-m", help="A checkpoint, run dir, 'builtin', URL\\[#name] (native "
                              "tools), or oracle / noop (scripted: the task's solution / do nothing)."),
    task: Optional[Path] = typer.Option(None, "--task", help="One Harbor-format task directory."),
    suite: Optional[str] = typer.Option(None, "--suite", "-s", help="demo, terminal, or a directory of tasks."),
    max_steps: int = typer.Option(30, "--max-steps", min=1, help="Model calls per episode at most."),
    max_tokens: int = typer.Option(512, "--max-tokens", min=1, help="Tokens per reply at most."),
    temperature: float = typer.Option(0.0, "--temperature", "-t", min=0.0, help="Sampling temperature (0: greedy)."),
    context: str = typer.Option("linear", "--context", help="Context policy: linear, mask or compact."),
    budget: Optional[int] = typer.Option(None, "--budget", min=256, help="Context budget in tokens."),
    concurrency: int = typer.Option(4, "--concurrency", "-c", min=1, help="Episodes in flight at once."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the suite's first N tasks."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory (default runs/agent-<time>)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live transcript."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per task on stdout."),
) -> None:
    """Run an agent on tasks in the sandbox: live transcript, episodes stored, verdicts from the tasks' hidden tests."""
    with friendly():
        from posttrain.agent.context import ContextPolicy
        from posttrain.agent.runtime import run_agent_task
        from posttrain.sandbox import Limits, Sandbox
        from posttrain.store.run_store import EpisodeRow, RunStore
        from posttrain.types import SamplingParams

        try:
            policy = ContextPolicy.preset(context, budget)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        tasks = _load_tasks(task, suite)[:limit]
        shared = _shared_model(model, seed)
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
        run_dir = out_dir or Path("runs") / f"agent-{time.strftime('%Y%m%d-%H%M%S')}"
        store = RunStore(run_dir / "run.sqlite")
        store.set_info(kind="agent", model=model, suite=suite or str(task), max_steps=max_steps, context=context,
                       budget=budget, created=time.time())
        results: list[dict[str, Any]] = []

        async def main() -> None:
            gate = asyncio.Semaphore(concurrency)
            sandbox = Sandbox(Limits(wall_s=60, cpu_s=60, memory_mb=1024, pids=128, output_bytes=1 << 20, disk_mb=256))

            async def one(idx: int, t: Any) -> None:
                async with gate:
                    try:
                        agent, tools = _model_for(model, t, shared)
                    except UserError as exc:
                        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
                        return
                    hook = None if quiet else (lambda turn, tid=t.id: _print_turn(tid, turn))
                    ep = await run_agent_task(agent, t, tools, max_steps, policy, sandbox=sandbox, params=params,
                                              on_turn=hook)
                r = _result(idx, ep)
                results.append(r)
                store.log_episodes(0, [EpisodeRow(idx, ep.task_id, ep.status.value, int(ep.passed), ep.reward, ep.steps,
                                                  ep.tokens_in, ep.tokens_out, ep.times.total_s, ep.cost_usd,
                                                  ep.to_dict())])
                mark = "[green]PASS[/]" if ep.passed else "[red]FAIL[/]"
                err.print(f"{mark} {escape(ep.task_id)}: {ep.status.value}, {ep.steps} steps"
                          + (f" ({escape(ep.error[:200])})" if ep.error else ""), highlight=False)
                if as_json:
                    print(json.dumps(r), flush=True)

            try:
                await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
            finally:
                await asyncio.get_running_loop().run_in_executor(None, sandbox.close)

        try:
            asyncio.run(main())
        finally:
            store.close()
        err.print(f"episodes stored in {run_dir} (replay with: posttrain agent show {run_dir} EPISODE)")
        if not as_json:
            _print_results(sorted(results, key=lambda r: r["episode"]))


def _print_results(results: list[dict[str, Any]]) -> None:
    table = Table(title=f"{sum(r['passed'] for r in results)}/{len(results)} passed")
    for col in ("#", "task", "passed", "status", "steps", "tokens in/out", "seconds"):
        table.add_column(col)
    for r in results:
        table.add_row(str(r["episode"]), r["task_id"], "yes" if r["passed"] else "no", r["status"], str(r["steps"]),
                      f"{r['tokens_in']}/{r['tokens_out']}", fmt(float(r["seconds"])))
    out.print(table)


@app.command("show")
def show_cmd(
    run: Path = typer.Argument(..., help="An agent run directory (or its run.sqlite)."),
    episode: Optional[str] = typer.Argument(None, help="An episode number or task id (STEP:NUMBER in a training run): "
                                                       "replay its transcript."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List a run's episodes, or replay one transcript."""
    with friendly():
        from posttrain.store.run_store import RunStore

        path = run if run.suffix == ".sqlite" else run / "run.sqlite"
        if not path.exists():
            raise UserError(f"{run}: no run store (run.sqlite) there")
        with RunStore(path, readonly=True) as store:
            rows = store.episodes(transcripts=episode is not None)
        if episode is None:
            if as_json:
                print(json.dumps([{"step": s, **{k: getattr(r, k) for k in ("idx", "task_id", "status", "passed",
                                   "reward", "steps", "tokens_in", "tokens_out", "seconds")}} for s, r in rows]))
                return
            table = Table(title=f"{len(rows)} episodes in {run}")
            for col in ("step:#", "task", "status", "passed", "steps", "seconds"):
                table.add_column(col)
            for s, r in rows:
                table.add_row(f"{s}:{r.idx}", r.task_id, r.status, "yes" if r.passed else "no", str(r.steps), fmt(r.seconds))
            out.print(table)
            return
        match = [r for s, r in rows if episode in (str(r.idx), r.task_id, f"{s}:{r.idx}", f"{s}:{r.task_id}")]
        if not match:
            raise UserError(f"{run}: no episode {episode!r} (posttrain agent show {run} lists them)")
        t = match[0].transcript
        if as_json:
            print(json.dumps(t))
            return
        out.print(f"[bold]{escape(t['task_id'])}[/]: {t['status']}, {t['steps']} steps, reward {t['reward']}",
                  highlight=False)
        out.print("[dim]task:[/] " + escape(t.get("instruction", "")), highlight=False)
        for i, turn in enumerate(t["turns"], 1):
            out.print(f"[bold cyan]#{i} {turn['kind']}[/] [dim]({turn['context_tokens']} ctx tokens"
                      + (", history rewritten" if turn["rewrote"] else "") + ")[/]", highlight=False)
            out.print(escape(turn["text"]), highlight=False)
            if turn["format_error"]:
                out.print(f"[yellow]format error:[/] {escape(turn['format_error'])}", highlight=False)
            elif turn["observation"]:
                out.print("[green]->[/] " + escape(turn["observation"]), highlight=False)
        v = t.get("verdict")
        if v:
            out.print(f"[bold]verdict[/]: {v['status']}, score {v['score']}: {escape(v['details'][:1000])}", highlight=False)
