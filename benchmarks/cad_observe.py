"""`observe_gain` (issue 42): generate-observe-correct episodes against single-shot programs, same model, same tasks.

One model, the built-in `cad_agent:parts` base (base seed --base-seed; built first if this machine has none:
gold programs of `cad:parts` level 1, brief form, plus correction episodes, `recipes/builtin.py`), is measured two ways
on the same held-out parts (the reporting half of `eval.size` held-out parts, split by the trainer's own rule,
`rl/build.py: build_held_out`; `--half selection` measures the selection half instead, for probes):

- single-shot: the brief prompt, one program, judged by the `cad` verifier. Paired with the agent arm (common random
  numbers, `paired_single`): each episode's opening program is itself a single-shot sample, so it is judged as one
  (an opening cut at its call's cap is sampled on to the single-shot budget), and the two arms differ only by what
  the episode's calls did after it. Checked per episode: the opening saw the single-shot prompt's ids, and its
  verdict as a single-shot response is its first render's. An independent single-shot arm, sampled on its own, is
  reported beside it (`*_unpaired`): the same expectation with the two arms' independent first programs' noise;
- agent: `cad_agent:parts` with `brief` (`agent/cad_tools.py: brief_agent_spec`, form 4): the episode opens as
  single-shot does (the same prompt ids; the first attempt a bare program to EOS), the runtime renders it and answers
  the render tool's one line (passes exactly when the verifier would; else the IoU and each feature's, and the size,
  volume and hole count beside the target's), then `--turns` calls: `render(program)` to correct it or `submit()` to
  keep it; the workspace's last rendered program is judged by the same verifier when the episode ends, whatever
  ended it, through the agent rollouter evaluation uses. So the agent's first attempt is a single-shot sample, and
  its first-render pass rate (reported) should match the single-shot arm's within sampling noise.

The budget of sampled tokens, fixed before measuring: an episode makes at most `turns + 1` calls of at most
`BRIEF_MAX_TOKENS` sampled tokens each, so it samples at most B = (turns + 1) x 192 tokens
(`cad_tools.sampled_token_budget`); the single-shot arm's program may sample the same B tokens (`max_tokens = B`).
`equal_budget` refuses a run whose arms' budgets differ, and every episode's sampled tokens are checked against B
(`over_budget`: one over aborts the run). Grading the workspace's model instead of a submitted copy samples nothing
more: the graded program is one the episode sampled within B (the opening program, at most 192 of them, is the
single-shot arm's program under a tighter cap: a level-1 program is under 100 tokens). Both arms' mean sampled
tokens per task are reported beside the rates.
No knob is chosen on the reported figures: the turns (1), temperature (1.0), samples and base are set before the
run; the selection half is for probes only.

`observe_gain` (points): for each seed s in --seeds, the agent arm samples `--samples` episodes per part at T = 1 with
sampling seed s, the paired single-shot arm is their openings; the seed's gain is 100 x (agent pass rate - paired
single-shot pass rate); the figure is the mean over seeds,
with a paired bootstrap 95% interval over parts (per seed, and pooled over seeds). Greedy rates of both arms (one
response a part, the same for every seed) are reported beside it. Every render observation of every episode is
checked by `cad_tools.leaked_target` (the count must be 0). Beside it, `correction_gain`: what the episodes' calls
added to their own first render (`correction_gain()`, equal to the paired gain but for openings sampled on past their
cap), and `observe_gain_unpaired` against the independent arm; and each arm's share of
programs that made no valid solid (`invalid_rate_*`: the single-shot program, the agent's graded one), counted as
`cad_rl.py` counts `cad_invalid_rate`. The last line is one JSON object.

    nice -n 12 python benchmarks/cad_observe.py [--seeds 1 2 3] [--samples 4] [--size 200] [--turns 1]
                                                [--half reporting|selection] [--base-seed 0] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any


def equal_budget(single_max_tokens: int, spec: Any) -> int:
    """The sampled-token budget both arms get: the agent spec's most per episode; a ValueError when the single-shot
    arm's `max_tokens` is not that same number (the comparison would not be at the same budget)."""
    from posttrain.agent.cad_tools import sampled_token_budget

    budget = sampled_token_budget(spec)
    if single_max_tokens != budget:
        raise ValueError(
            f"unequal budgets: single-shot max_tokens {single_max_tokens}, an episode at most {budget} "
            f"({spec.max_steps} calls x {spec.max_tokens})"
        )
    return budget


def over_budget(episodes: list[list[Any]], budget: int) -> list[str]:
    """The episodes (task ids) whose sampled tokens exceed `budget`."""
    return [
        ep.task_id
        for eps in episodes
        for ep in eps
        if sum(len(t.completion.token_ids) for t in ep.turns if t.completion is not None) > budget
    ]


def observation_leaks(episodes: list[list[Any]], tasks: list[Any]) -> list[str]:
    """Every render observation that tells more of the target than its size, volume and hole count."""
    from posttrain.agent.cad_tools import leaked_target

    by_id = {t.id: t for t in tasks}
    out = []
    for eps in episodes:
        for ep in eps:
            for turn in ep.turns:
                for call, res in zip(turn.calls, turn.results):
                    if call.name == "render":
                        why = leaked_target(res.output, by_id[ep.task_id], str(call.arguments.get("program", "")))
                        if why:
                            out.append(f"{ep.task_id}: {why}")
    return out


def per_task(records: list[Any], tasks: list[Any]) -> list[float]:
    """Each task's pass rate over its records, in task order (an errored record counts as a failure)."""
    got: dict[str, list[float]] = {t.id: [] for t in tasks}
    for r in records:
        got[r.task_id].append(float(r.ok and r.passed))
    return [sum(v) / len(v) if v else 0.0 for v in got.values()]


def corrections(episodes: list[list[Any]]) -> dict[str, int]:
    """How the episodes went: first render passed / failed; of those failed, how many ended passing (corrected); of
    those passed, how many ended failing (broke a pass); how many never submitted and how many had a format error."""
    out = {"episodes": 0, "first_passed": 0, "first_failed": 0, "corrected": 0, "broke_a_pass": 0, "no_submit": 0,
           "format_error": 0}
    for eps in episodes:
        for ep in eps:
            out["episodes"] += 1
            first = next((r.output for t in ep.turns for c, r in zip(t.calls, t.results) if c.name == "render"), None)
            passed_first = first is not None and first.endswith("passes")
            out["first_passed" if passed_first else "first_failed"] += 1  # the opening: a single-shot sample
            out["no_submit"] += ep.submitted is None
            out["format_error"] += ep.format_errors > 0
            if not passed_first and ep.passed:
                out["corrected"] += 1
            if passed_first and not ep.passed:
                out["broke_a_pass"] += 1
    return out


def correction_gain(counts: dict[str, int]) -> float:
    """Points the episodes' calls added to their own first render: 100 x (corrected - broke a pass) / episodes. The
    first render is a single-shot sample (same prompt ids, same sampling), so this is the paired `observe_gain` but
    for openings cut at their call's cap (the paired arm samples those on to the budget); reported beside it."""
    return 100.0 * (counts["corrected"] - counts["broke_a_pass"]) / max(1, counts["episodes"])


def invalid(records: list[Any]) -> float:
    """The share of verified records whose program made no valid solid (`rewards.cad.made_valid_solid`; for the
    agent, the episode's graded program): `cad_invalid_rate`'s rule, as `cad_rl.py` counts it."""
    from posttrain.rewards.cad import made_valid_solid

    done = [r for r in records if r.ok]
    return sum(not made_valid_solid(r.info) for r in done) / max(1, len(done))


def paired_single(engine: Any, episodes: list[list[Any]], tasks: list[Any], verifier: Any, budget: int,
                  temperature: float, seed: int) -> tuple[list[Any], dict[str, int]]:
    """The single-shot arm paired with the agent's (common random numbers): each episode's opening completion is a
    single-shot sample (the single-shot prompt's ids, the same sampling); an opening cut at its call's cap (192 tokens,
    finish `length`) is sampled on, from its own ids, to the single-shot budget `budget`, so every response is a
    single-shot draw under that budget. Judged by `verifier` as a single-shot response. Returns the records (task id,
    sample) and the pairing's checks, each of which must be 0: `other_context` (an opening whose context is not the
    single-shot prompt's ids) and `verdict_differs` (an uncut opening whose verdict here is not its first render's)."""
    from posttrain.eval.harness import regrade
    from posttrain.eval.records import SampleRecord
    from posttrain.models.prompting import PromptRenderer
    from posttrain.tasks.suites import Suite
    from posttrain.types import FinishReason, SamplingParams

    by_id = {t.id: t for t in tasks}
    renderer = PromptRenderer()
    prompt_ids = dict(zip(by_id, renderer.token_ids(renderer.render_all(tasks), engine) or []))
    checks = {"other_context": 0, "verdict_differs": 0, "continued": 0}
    rows: list[tuple[Any, list[int], bool | None]] = []  # (episode, sampled ids, the first render passed, if uncut)
    cut: list[tuple[int, list[int]]] = []
    for eps in episodes:
        for ep in eps:
            first = ep.turns[0]
            ids = list(first.completion.token_ids)
            checks["other_context"] += list(first.context_ids) != prompt_ids.get(ep.task_id)
            render = next((r.output for c, r in zip(first.calls, first.results) if c.name == "render"), None)
            if first.completion.finish_reason is FinishReason.LENGTH and len(ids) < budget:
                cut.append((len(rows), list(first.context_ids) + ids))
                rows.append((ep, ids, None))
            else:
                rows.append((ep, ids, render is not None and render.endswith("passes")))
    if cut:  # sampled on, each from its own ids, to the budget
        checks["continued"] = len(cut)
        for i, context in cut:
            ep, ids, _ = rows[i]
            params = SamplingParams(n=1, temperature=temperature, max_tokens=budget - len(ids), seed=seed + i)
            more = engine.generate([context], renderer.sampling(params))[0][0]
            rows[i] = (ep, ids + list(more.token_ids), None)
    samples: dict[str, int] = {}
    records = []
    for ep, ids, _ in rows:
        j = samples[ep.task_id] = samples.get(ep.task_id, -1) + 1
        records.append(SampleRecord(task_id=ep.task_id, response=engine.tokenizer.decode(ids), score=0.0, passed=False,
                                    sample=j, tokens_out=len(ids)))
    records = regrade(Suite("paired-single", [by_id[t] for t in samples], verifier), records)
    for (_, _, first_passed), r in zip(rows, records):
        checks["verdict_differs"] += first_passed is not None and r.ok and first_passed != r.passed
    return records, checks


def arms(engine: Any, tasks: list[Any], verifier: Any, spec: Any, temperature: float, samples: int, seed: int) -> dict:
    """Both arms on `tasks`: pass rates, per-task rates, mean sampled tokens, and the agent's episode figures."""
    from posttrain.agent.cad_tools import sampled_token_budget
    from posttrain.eval.harness import EvalSpec
    from posttrain.eval.run import run_eval
    from posttrain.tasks.suites import Suite

    budget = equal_budget(sampled_token_budget(spec), spec)
    n = 1 if temperature == 0 else samples
    t0 = time.perf_counter()
    single = run_eval(
        engine,
        Suite("single", list(tasks), verifier),
        EvalSpec(
            model="in-process", suite="single", n=n, temperature=temperature, max_tokens=budget, seed=seed, batch=len(tasks)
        ),
    )
    t1 = time.perf_counter()
    agent = run_eval(
        engine,
        Suite("agent", list(tasks), None, agent=spec),
        EvalSpec(model="in-process", suite="agent", n=n, temperature=temperature, max_tokens=spec.max_tokens, seed=seed),
    )
    t2 = time.perf_counter()
    assert agent.episodes is not None
    over = over_budget(agent.episodes, budget)
    if over:
        raise RuntimeError(f"{len(over)} episodes sampled more than the budget {budget}: {over[:3]}")
    paired, checks = paired_single(engine, agent.episodes, tasks, verifier, budget, temperature, seed)
    if checks["other_context"]:
        raise RuntimeError(f"{checks['other_context']} openings did not see the single-shot prompt: no pairing")
    t3 = time.perf_counter()
    a, b, p = per_task(single.records, tasks), per_task(agent.records, tasks), per_task(paired, tasks)
    return {
        "single": sum(p) / len(p),
        "agent": sum(b) / len(b),
        "single_unpaired": sum(a) / len(a),
        "single_per_task": p,
        "agent_per_task": b,
        "single_unpaired_per_task": a,
        "pairing": checks,
        "single_tokens": sum(r.tokens_out or 0 for r in paired) / len(paired),
        "single_unpaired_tokens": sum(r.tokens_out or 0 for r in single.records) / len(single.records),
        "agent_tokens": sum(r.tokens_out or 0 for r in agent.records) / len(agent.records),
        "single_invalid": invalid(paired),
        "single_unpaired_invalid": invalid(single.records),
        "agent_invalid": invalid(agent.records),
        "single_errors": sum(not r.ok for r in paired) + sum(not r.ok for r in single.records),
        "agent_errors": sum(not r.ok for r in agent.records),
        "leaks": observation_leaks(agent.episodes, tasks),
        "episodes": corrections(agent.episodes),
        "budget": budget,
        "n": n,
        "seconds": [round(t1 - t0, 1), round(t2 - t1, 1), round(t3 - t2, 1)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--samples", type=int, default=4, help="sampled responses per part and arm, per seed (T=1)")
    ap.add_argument("--size", type=int, default=200, help="held-out parts drawn (the trainer's eval.size)")
    ap.add_argument("--turns", type=int, default=1, help="render rounds of an episode before its submit")
    ap.add_argument("--half", choices=("reporting", "selection"), default="reporting")
    ap.add_argument("--base-seed", type=int, default=0)
    ap.add_argument("--draw-seed", type=int, default=0, help="the run seed the held-out parts are drawn with")
    ap.add_argument("--no-greedy", action="store_true")
    ap.add_argument(
        "--model",
        default=None,
        help="a checkpoint to measure instead of the base (a run's best/ after RL "
        "of the agent form, say); the base is still named in the output",
    )
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from posttrain.agent.cad_tools import sampled_token_budget
    from posttrain.config import BaseModelConfig, EvalConfig
    from posttrain.eval.stats import paired_bootstrap_ci
    from posttrain.recipes.builtin import ensure_base
    from posttrain.recipes.quickstart import _engine_for
    from posttrain.rl.build import build_held_out
    from posttrain.tasks.domains import load_domain

    print(f"machine: {os.cpu_count()} cpus; load at start: {os.popen('uptime').read().strip()}", flush=True)
    t_start = time.perf_counter()
    base = ensure_base(
        BaseModelConfig(family="cad_agent:parts", seed=args.base_seed),
        on_eval=lambda s, a: print(f"base step {s}: single-shot greedy {a:.3f}", flush=True),
    )
    print(
        f"base {base.path.name}: single-shot greedy {base.accuracy:.3f} at step {base.steps} (in band: {base.in_band}, "
        f"by kind {base.by_kind}; {'cached' if base.cached else f'built in {base.seconds:.0f} s'})",
        flush=True,
    )
    single_domain = load_domain("cad:parts", level=1, brief=True)
    agent_domain = load_domain("cad_agent:parts", level=1, brief=True, turns=args.turns)
    selection, reporting = build_held_out(EvalConfig(size=args.size), [single_domain], args.draw_seed)
    tasks = (reporting if args.half == "reporting" else selection)[0].tasks
    verifier, spec = single_domain.verifier, agent_domain.agent
    engine = _engine_for(args.model or str(base.path))
    budget = sampled_token_budget(spec)
    print(
        f"{len(tasks)} {args.half} parts; budget {spec.max_steps} x {spec.max_tokens} = "
        f"{budget} sampled tokens per task and arm",
        flush=True,
    )

    def show(name: str, r: dict) -> None:
        ci = paired_bootstrap_ci(r["single_per_task"], r["agent_per_task"])
        r["gain"], r["gain_ci"] = 100 * (r["agent"] - r["single"]), [100 * ci.lo, 100 * ci.hi]
        r["gain_unpaired"] = 100 * (r["agent"] - r["single_unpaired"])
        print(
            f"{name}: single-shot {r['single']:.3f} ({r['single_tokens']:.0f} tokens), agent {r['agent']:.3f} "
            f"({r['agent_tokens']:.0f} tokens): {r['gain']:+.1f} pts [{r['gain_ci'][0]:+.1f}, {r['gain_ci'][1]:+.1f}]; "
            f"unpaired single-shot {r['single_unpaired']:.3f} ({r['single_unpaired_tokens']:.0f} tokens): "
            f"{r['gain_unpaired']:+.1f} pts; pairing {r['pairing']}; "
            f"first render passed {r['episodes']['first_passed'] / max(1, r['episodes']['episodes']):.3f}; "
            f"episodes {r['episodes']}; no valid solid {r['single_invalid']:.3f} / {r['agent_invalid']:.3f} "
            f"(unpaired single-shot {r['single_unpaired_invalid']:.3f}); "
            f"leaks {len(r['leaks'])}; errors {r['single_errors']}/{r['agent_errors']}; "
            f"{r['seconds']} s; load {os.popen('uptime').read().strip()}",
            flush=True,
        )

    rows: dict[str, dict] = {}
    if not args.no_greedy:
        rows["greedy"] = arms(engine, tasks, verifier, spec, 0.0, 1, 0)
        show("greedy", rows["greedy"])
    for seed in args.seeds:
        rows[str(seed)] = arms(engine, tasks, verifier, spec, 1.0, args.samples, seed)
        show(f"seed {seed} (T=1, {args.samples} a part)", rows[str(seed)])
    sampled = [rows[str(s)] for s in args.seeds]
    pooled = paired_bootstrap_ci(
        [statistics.mean(x) for x in zip(*(r["single_per_task"] for r in sampled))],
        [statistics.mean(x) for x in zip(*(r["agent_per_task"] for r in sampled))],
    )
    slim = {k: {f: v for f, v in r.items() if not f.endswith("_per_task")} for k, r in rows.items()}
    print(
        json.dumps(
            {
                "observe_gain": statistics.mean(r["gain"] for r in sampled),
                "observe_gain_ci": [100 * pooled.lo, 100 * pooled.hi],
                "observe_gain_per_seed": [r["gain"] for r in sampled],
                "single_shot_per_seed": [r["single"] for r in sampled],
                "observe_gain_unpaired": statistics.mean(r["gain_unpaired"] for r in sampled),
                "observe_gain_unpaired_per_seed": [r["gain_unpaired"] for r in sampled],
                "single_shot_unpaired_per_seed": [r["single_unpaired"] for r in sampled],
                "pairing_checks": {k: sum(r["pairing"][k] for r in rows.values()) for k in ("other_context",
                                                                                              "verdict_differs",
                                                                                              "continued")},
                "agent_per_seed": [r["agent"] for r in sampled],
                "observe_gain_greedy": rows["greedy"]["gain"] if "greedy" in rows else None,
                "correction_gain": statistics.mean(correction_gain(r["episodes"]) for r in sampled),
                "correction_gain_per_seed": [correction_gain(r["episodes"]) for r in sampled],
                "invalid_rate_greedy": (
                    {"single": rows["greedy"]["single_invalid"], "agent": rows["greedy"]["agent_invalid"],
                     "single_unpaired": rows["greedy"]["single_unpaired_invalid"]}
                    if "greedy" in rows else None
                ),
                "invalid_rate_sampled": {
                    "single": statistics.mean(r["single_invalid"] for r in sampled),
                    "agent": statistics.mean(r["agent_invalid"] for r in sampled),
                },
                "observation_leaks": sum(len(r["leaks"]) for r in rows.values()),
                "budget_tokens": budget,
                "turns": args.turns,
                "samples": args.samples,
                "half": args.half,
                "n_parts": len(tasks),
                "seeds": args.seeds,
                "base": base.path.name,
                "base_single_shot_greedy": base.accuracy,
                "base_steps": base.steps,
                "rows": slim,
                "seconds": round(time.perf_counter() - t_start),
                "load_at_end": os.popen("uptime").read().strip(),
            }
        )
    )


if __name__ == "__main__":
    main()
