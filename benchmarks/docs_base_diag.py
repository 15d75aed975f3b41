"""What a `docs:reports` base has learned: teacher-forced accuracy of its calls' tokens on the compact form's oracle
episodes (the JSON around them, the search's words, the submitted year and figure), and a few greedy transcripts.

    python benchmarks/docs_base_diag.py PATH_TO_BASE [--tasks 32] [--show 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def teacher_forced(model, tok, tasks) -> dict:
    """Teacher-forced greedy accuracy of `model` on the compact form's oracle episodes of `tasks`: per token of the
    calls (the JSON around the values, the search's words, the submitted year and figure) and whole copies (every
    token of a task's search words, or of its answer, right)."""
    import re

    import torch

    from posttrain.agent.reports import LINE_SPEC, oracle_steps
    from posttrain.agent.traces import episode_trace

    model.eval()
    right = {"json": [0, 0], "query": [0, 0], "answer": [0, 0]}
    parts = {"query_words": [0, 0], "query_year": [0, 0], "answer_year": [0, 0], "answer_figure": [0, 0]}
    whole = {"query": 0, "answer": 0}
    for t in tasks:
        decisions: list[bool] = []
        steps = oracle_steps(t)
        ids, mask = episode_trace(LINE_SPEC, t.prompt, steps, tok, decisions)
        with torch.no_grad():
            pred = model(torch.tensor([ids]))[0, :-1].argmax(-1).tolist()  # pred[j] guesses ids[j + 1]
        # the first call's decisions are the search's words, the second's the answer
        first_call_end = len(episode_trace(LINE_SPEC, t.prompt, steps[:1], tok)[0])
        ok = {"query": True, "answer": True}
        runs: dict[str, int] = {"query": 0, "answer": 0}  # position within the call's value (one token a character)
        for j in range(1, len(ids)):
            if not mask[j]:
                continue
            kind = "json" if not decisions[j] else ("query" if j < first_call_end else "answer")
            good = pred[j - 1] == ids[j]
            right[kind][0] += good
            right[kind][1] += 1
            if kind != "json":
                ok[kind] &= good
                value = str(list(steps[0 if kind == "query" else -1][0].arguments.values())[-1])
                year = re.search(r"FY\d{4}", value)
                at = runs[kind]
                runs[kind] += 1
                in_year = year is not None and year.start() <= at < year.end()
                part = f"{kind}_{'year' if in_year else 'words' if kind == 'query' else 'figure'}"
                parts[part][0] += good
                parts[part][1] += 1
        for k in ok:
            whole[k] += ok[k]
    model.train()
    return {"token_accuracy": {k: round(a / max(1, n), 3) for k, (a, n) in right.items()},
            "part_accuracy": {k: round(a / max(1, n), 3) for k, (a, n) in parts.items()},
            "whole_copies": {k: f"{v}/{len(tasks)}" for k, v in whole.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--show", type=int, default=3)
    args = ap.parse_args()

    import torch

    from posttrain.agent.reports import LINE_SPEC, oracle_steps
    from posttrain.config import BaseModelConfig
    from posttrain.models.io import load_model
    from posttrain.recipes.builtin import base_task_source, stopping_set

    torch.set_num_threads(1)
    model, tok = load_model(args.path)
    model.eval()
    cfg = BaseModelConfig(family="docs:reports")
    tasks = stopping_set(cfg, base_task_source(cfg))[: args.tasks]
    print(json.dumps(teacher_forced(model, tok, tasks)))

    import asyncio

    from posttrain.agent import run_agent_task
    from posttrain.agent.reports import agent_task_of
    from posttrain.engine.build import build_engine
    from posttrain.sandbox import Limits, Sandbox
    from posttrain.types import SamplingParams

    engine = build_engine(None, model, tok)
    sb = Sandbox(Limits(wall_s=20, cpu_s=20, memory_mb=512, pids=64, output_bytes=1 << 20, disk_mb=64))
    try:
        for t in tasks[: args.show]:
            ep = asyncio.run(run_agent_task(engine, agent_task_of(t), None, LINE_SPEC.max_steps, sandbox=sb,
                                            params=SamplingParams(temperature=0.0, max_tokens=LINE_SPEC.max_tokens),
                                            max_format_errors=LINE_SPEC.max_format_errors, system=LINE_SPEC.system,
                                            tool_listing=LINE_SPEC.tool_listing))
            print(f"--- {t.meta['question']} gold {t.answer} (oracle: {oracle_steps(t)[0][0].arguments['query']!r}); "
                  f"{ep.status.value}, passed {ep.passed}")
            for turn in ep.turns:
                print("  >", turn.completion.text[:200].replace("\n", " | "))
                print("  <", (turn.observation or "")[:200].replace("\n", " | "))
    finally:
        sb.close()


if __name__ == "__main__":
    main()
