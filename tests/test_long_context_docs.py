"""``benchmarks/long_context.py``'s docs parts: the same questions at another report length, the single-turn
truncated form within its token budget, `retrieval_hold` as a ratio, and a smoke run of `--parts base,rl` on a
tiny base (one RL step) whose last line carries every figure."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    return load_benchmark("long_context")


def _easy(n=3):
    from posttrain.tasks.domains import load_domain

    return load_domain("docs:reports", form="agent", compact=True, hops=1, distractors=0, length=6000,
                       limit=n).suite().tasks


def test_the_same_questions_at_another_length():
    bench = _bench()
    tasks = _easy()
    far = bench.at_length(tasks, 60_000)
    assert [t.answer for t in far] == [t.answer for t in tasks]
    assert [t.meta["question"] for t in far] == [t.meta["question"] for t in tasks]
    assert all(f.meta["chars"] > 55_000 and f.meta["compact"] for f in far)
    none = bench.at_length(tasks, 6000, kinds=("none",))
    assert all(t.answer == "none" and t.meta["report_seed"] == s.meta["report_seed"] for t, s in zip(none, tasks))


def test_the_single_turn_form_is_cut_to_its_budget():
    from posttrain.models.tokenizer import char_tokenizer

    bench, tok = _bench(), char_tokenizer()
    long = bench.at_length(_easy(1), 60_000)[0]
    st = bench.single_turn_truncated(long, tok, 2000)
    assert len(tok.encode(st.prompt)) <= 2000 and st.prompt.endswith("</answer>.") and "<document>" in st.prompt
    assert st.meta["verifier"]["extract"] == "tag" and st.answer == long.answer
    short = bench.single_turn_truncated(_easy(1)[0], tok, 8000)  # fits: the whole report
    assert "Total liabilities and equity" in short.prompt


def test_hold_is_far_over_fit():
    args = type("A", (), {"curve_lengths": [6000, 60000, 819200]})()
    fig = {"agent": {"6000": 0.5, "60000": 0.5, "819200": 0.4}, "single_turn": {"6000": 0.0, "819200": 0.0}}
    assert _bench().hold(fig, args) == {"agent": 0.8, "single_turn": None, "fit": "6000", "far": "819200"}


@pytest.mark.slow
def test_a_tiny_base_and_one_rl_step_give_every_figure(tmp_path):
    tiny = ["model.base.hidden_size=16", "model.base.num_layers=1", "model.base.intermediate_size=32",
            "model.base.num_heads=2", "model.base.max_steps=2", "model.base.eval_every=2", "model.base.eval_size=16",
            "train.steps=1", "eval.size=8", "eval.every=1", "train.prompts_per_step=1", "sampling.n=2"]
    cmd = [sys.executable, str(ROOT / "benchmarks" / "long_context.py"), "--parts", "base,rl", "--figure-tasks", "2",
           "--single-turn-tasks", "1", "--none-tasks", "2", "--curve-lengths", "6000,20000", "--runs",
           str(tmp_path / "runs"), "--pass1-samples", "1"] + [a for s in tiny for a in ("--set", s)]
    env = {**os.environ, "POSTTRAIN_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src"),
           "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert last["docs_base"][0]["steps"] == 2 and last["docs_base"][0]["context"] == 8192
    row = last["docs_rl"][0]
    assert set(row["figures_best"]["agent"]) == {"6000", "20000"} and "false_positive_rate" in row["figures_best"]["none"]
    # the figures run real episodes after the RL run closed its sandboxes (they once all ended in env_error, silently)
    assert all(d["env_error"] == 0 and d["episodes"] == 2 for d in row["figures_best"]["diagnosis"].values())
    assert "docs_rl_gain" in last and "retrieval_hold_best" in last and "false_positive_rate" in last


def test_diagnose_counts_where_episodes_go_wrong():
    import asyncio

    from posttrain.agent import run_agent_task
    from posttrain.agent.reports import LINE_SPEC, agent_task_of, oracle_calls
    from posttrain.agent.scripted import ScriptedAgent, call
    from posttrain.sandbox import Limits, Sandbox

    bench, tasks = _bench(), _easy(3)
    sandbox = Sandbox(Limits(wall_s=10, cpu_s=10, memory_mb=256, pids=64, output_bytes=1 << 20, disk_mb=32))

    def episode(calls, task):
        return asyncio.run(run_agent_task(ScriptedAgent(calls), agent_task_of(task), None, 6, sandbox=sandbox,
                                          system=LINE_SPEC.system, tool_listing=LINE_SPEC.tool_listing))

    try:
        oracle = oracle_calls(tasks[0])
        year = oracle[0].arguments["query"].split()[-1].removeprefix("FY")
        eps = [episode(oracle, tasks[0]),
               episode([oracle[0], call("submit", answer=f"FY{year}")], tasks[0]),  # a year alone: no figure
               episode([call("submit", answer="1")], tasks[1])]
    finally:
        sandbox.close()
    got = bench.diagnose([tasks[0], tasks[0], tasks[1]], eps)
    assert got == {"episodes": 3, "searched": 2, "query_as_oracle": 2, "hit_holds_answer": 2, "submitted": 3,
                   "submitted_a_figure_of_the_hit": 1, "passed": 1, "env_error": 0}


def test_figures_refuse_a_length_whose_episodes_ended_in_environment_errors(monkeypatch):
    # the planted failure: every episode an env_error (what a closed sandbox pool gave, silently scored 0)
    from types import SimpleNamespace

    from posttrain.agent.episode import EpisodeStatus

    bench = _bench()
    broken = SimpleNamespace(turns=[], submitted=None, passed=False, status=EpisodeStatus.ENV_ERROR)
    monkeypatch.setattr(bench, "agent_success", lambda engine, tasks, spec, sandboxes: (0.0, [broken] * len(tasks)))
    engine = SimpleNamespace(tokenizer=None, model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8192)))
    args = type("A", (), {"curve_lengths": [6000], "single_turn_tasks": 1, "none_tasks": 1})()
    with pytest.raises(RuntimeError, match="environment error"):
        bench.figures_of(engine, _easy(2), None, None, args)
