"""The brief generate-observe-correct form of `cad_agent:parts` (the built-in model's): the episode opens as a
single-shot answer does (the same prompt ids; the first attempt a bare program, to EOS), the workspace's model is
graded at the end whatever ended the episode, its oracle episodes are the runtime's episodes token for token, the
render tool's one-line observation is the one pre-training computes, an observation never leaks the target, and the
sampled-token budget the benchmark equalises is the spec's."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from posttrain.agent import EpisodeStatus, run_agent_task
from posttrain.agent import format as fmt
from posttrain.agent.cad_tools import (
    BRIEF_MAX_TOKENS,
    PLANTED,
    brief_agent_spec,
    cad_brief_task,
    correction_steps,
    correction_trace,
    drilled,
    leaked_target,
    planted_error,
    sampled_token_budget,
)
from posttrain.agent.episode import Episode
from posttrain.agent.runtime import make_env
from posttrain.agent.scripted import ScriptedAgent, call
from posttrain.agent.traces import episode_trace
from posttrain.models.tokenizer import char_tokenizer
from posttrain.rewards.cad import CadVerifier
from posttrain.rewards.cad_parts import brief_scad, part_from_dict, part_solid
from posttrain.rewards.cad_render import brief_observation
from posttrain.tasks.cad import PartsSource
from posttrain.tasks.domains import load_domain
from posttrain.tasks.jsonl import TaskFileError
from posttrain.types import SamplingParams, ToolCall

SOURCE = PartsSource(level=1, brief=True)


def run(agent, task, sandbox, spec):
    return asyncio.run(
        run_agent_task(
            agent,
            spec.load(task),
            None,
            spec.max_steps,
            sandbox=sandbox,
            system=spec.system,
            tool_listing=spec.tool_listing,
            max_format_errors=spec.max_format_errors,
            opening=spec.opening,
        )
    )


def scripted(steps, tok=None):
    """A scripted model that plays an oracle episode of the brief form: the opening program bare (ended by EOS, as a
    model's single-turn answer is), then the calls."""
    tok = tok or char_tokenizer()
    (first, _), *rest = steps
    return ScriptedAgent([first.arguments["program"], *(c for c, _ in rest)], tokenizer=tok, eos_id=tok.eos_id)


def test_planted_mistakes_fail_and_the_observation_names_what_differs():
    rng = random.Random(0)
    kinds, corrected = set(), 0
    for task in SOURCE.take(60, "train", seed=2):
        part = part_from_dict(task.meta["target_part"])
        target = part_solid(part)
        assert brief_observation(target, target, 0.9) == "IoU 1.00, passes"
        kind, wrong = planted_error(part, rng)
        kinds.add(kind)
        assert wrong != part
        steps, clean = correction_steps(task, rng, clean=0.0)
        assert steps[1][0] == (ToolCall("submit", {}) if clean else ToolCall("render", {"program": task.answer}))
        if not clean:
            corrected += 1
            seen = steps[0][1]
            assert seen.startswith("IoU ") and "needs 0.9" in seen and "holes" in seen, seen
    assert kinds == set(PLANTED) and corrected >= 55


@pytest.mark.slow
def test_oracle_episodes_are_the_runtime_episodes_token_for_token(sandbox):
    tok = char_tokenizer()
    verifier = CadVerifier()
    spec = brief_agent_spec(verifier)
    for k, task in enumerate(SOURCE.take(6, "train", seed=5)):
        steps, clean = correction_steps(task, random.Random(k), clean=0.5)
        ep = run(scripted(steps, tok), task, sandbox, spec)
        assert ep.status is EpisodeStatus.SOLVED, (ep.error, [r.output for t in ep.turns for r in t.results])
        # the real render tool (OpenSCAD's mesh in the sandbox) says what pre-training said (the part's exact solid)
        assert [r.output for t in ep.turns for r in t.results] == [o for _, o in steps]
        ids, weight = correction_trace(task, tok, random.Random(k))
        view = ep.to_trajectory().token_view()
        assert view.ids == ids and view.mask == [w > 0 or (not clean and m) for w, m in zip(weight, view.mask)]
        assert (min(weight[i] for i, m in enumerate(view.mask) if m) == 0.0) == (not clean)
        # planted: the trace of the earlier form (prefix and task first) or an opening without its EOS differs
        old = dataclasses.replace(spec, opening=None, tools=cad_brief_task(task, None).tools)
        assert episode_trace(old, task.prompt, steps, tok)[0] != view.ids
        opening_end = len(ep.turns[0].context_ids) + len(steps[0][0].arguments["program"])
        assert view.ids.count(tok.eos_id) == 1 and view.ids[opening_end] == tok.eos_id


@pytest.mark.slow
def test_the_episode_opens_exactly_as_single_shot_and_its_first_attempt_is_a_single_shot_program(sandbox, engine):
    from posttrain.models.prompting import PromptRenderer

    tok = char_tokenizer()
    task = SOURCE.take(1, "held_out", seed=6)[0]
    spec = brief_agent_spec(CadVerifier())
    steps, _ = correction_steps(task, random.Random(0), clean=1.0)
    agent = scripted(steps, tok)
    ep = run(agent, task, sandbox, spec)
    single = PromptRenderer().encode(PromptRenderer().render(task), tok)  # what single-shot samples after
    assert ep.turns[0].context_ids == single
    assert ep.turns[0].completion.token_ids == tok.encode(task.answer, add_bos=False) + [tok.eos_id]
    first, second = (params for _, params in agent.calls)
    assert "</tool_call>" not in first.stop and "</tool_call>" in second.stop  # the opening is no call
    # the listing comes after the first observation, never before the first attempt
    assert "Tools:" not in tok.decode(ep.turns[0].context_ids) and "Tools:" in tok.decode(ep.turns[1].context_ids)
    # the real engine: the opening's context is the single-shot prompt too, and its reply stops at EOS or its room
    ep = asyncio.run(run_agent_task(engine, spec.load(task), None, spec.max_steps, sandbox=sandbox, system=spec.system,
                                    tool_listing=spec.tool_listing, max_format_errors=spec.max_format_errors,
                                    opening=spec.opening, params=SamplingParams(max_tokens=spec.max_tokens)))
    assert ep.turns[0].context_ids == PromptRenderer().encode(task.prompt, engine.tokenizer)
    first = ep.turns[0].completion
    assert len(first.token_ids) == spec.max_tokens or first.token_ids[-1] == engine.tokenizer.eos_id


@pytest.mark.slow
def test_the_workspace_model_is_graded_whatever_ended_the_episode(sandbox):
    task = next(t for t in SOURCE.take(20, "held_out", seed=2) if "cylinder" in (t.answer or ""))
    spec = brief_agent_spec(CadVerifier())
    wrong = task.answer.replace("cylinder(", "translate([0,0,0])cylinder(", 1).replace(",r=", ",r=0.5+", 1)
    tok = char_tokenizer()

    def episode(*actions):
        return run(ScriptedAgent(list(actions), tokenizer=tok, eos_id=tok.eos_id), task, sandbox, spec)

    kept = episode(task.answer, call("submit"))  # submit() keeps the program rendered last
    assert kept.passed and kept.submitted == ""
    garbled = episode(task.answer, '<tool_call>{"nam": "submitogume(')  # a garbled call after a passing first render
    assert garbled.turns[1].format_error and garbled.passed  # graded on what it built
    broken = episode(task.answer, call("render", program=wrong))  # the last render is what counts, pass or fail
    assert broken.turns[1].results[0].output != "IoU 1.00, passes" and not broken.passed
    fixed = episode(wrong, call("render", program=task.answer))
    assert fixed.passed and fixed.submitted is None
    # planted: the same episodes judged on the argument of submit (the earlier form) would fail the kept pass
    task_form = dataclasses.replace(spec.load(task), answer_file=None)
    judged = asyncio.run(run_agent_task(ScriptedAgent([task.answer, call("submit")], tokenizer=tok, eos_id=tok.eos_id),
                                        task_form, None, spec.max_steps, sandbox=sandbox, system=spec.system,
                                        tool_listing=spec.tool_listing, opening=spec.opening))
    assert not judged.passed


def test_the_benchmark_counts_graded_programs_without_a_valid_solid(sandbox):
    """`cad_invalid_rate`'s rule on real episodes: a wrong solid is still a valid one; a program OpenSCAD rejects,
    and an episode that never wrote a model, are not; a verifier failure is left out, never counted either way."""
    from types import SimpleNamespace

    from benchmark_module import load_benchmark
    from posttrain.rewards.cad import made_valid_solid

    bench = load_benchmark("cad_observe")
    task = next(t for t in SOURCE.take(20, "held_out", seed=2) if "cylinder" in (t.answer or ""))
    spec = brief_agent_spec(CadVerifier())
    wrong = task.answer.replace(",r=", ",r=0.5+", 1)
    tok = char_tokenizer()

    def episode(*actions, opening=spec.opening):
        return run(ScriptedAgent(list(actions), tokenizer=tok, eos_id=tok.eos_id), task, sandbox,
                   dataclasses.replace(spec, opening=opening))

    eps = [episode(task.answer, call("submit")), episode(wrong, call("submit")),
           episode(task.answer, call("render", program="cube([1, 2, 3]")),  # the last render does not parse
           episode(call("submit"), opening=None)]  # never wrote model.scad
    assert [e.passed for e in eps] == [True, False, False, False]
    assert [made_valid_solid(e.verdict.info) for e in eps] == [True, True, False, False]
    records = [SimpleNamespace(ok=e.verdict.ok, info=e.verdict.info) for e in eps]
    assert bench.invalid(records) == 0.5
    errored = SimpleNamespace(ok=False, info={})  # the verifier failed: not the program's invalidity
    assert bench.invalid([*records, errored]) == 0.5 and bench.invalid([errored]) == 0.0


def test_a_drill_s_attempt_is_drawn_by_task_id_fails_and_the_domain_checks_its_share():
    tasks = SOURCE.take(40, "train", seed=3)
    given = [drilled(t, 1.0) for t in tasks]
    assert given == [drilled(t, 1.0) for t in tasks]  # the same attempt for a task in every run
    assert sum(g is not None for g in given) >= 36 and all(g != t.answer for g, t in zip(given, tasks))
    half = [drilled(t, 0.5) is not None for t in tasks]
    assert 10 <= sum(half) <= 30 and not any(drilled(t, 0.0) for t in tasks)
    spec = load_domain("cad_agent:parts", level=1, brief=True, turns=1, planted=1.0).agent
    assert spec.load(tasks[0]).opening == given[0]
    for bad in (1.5, -0.1, True, "all"):
        with pytest.raises(TaskFileError, match="planted must be a number"):
            load_domain("cad_agent:parts", level=1, brief=True, planted=bad)
    with pytest.raises(TaskFileError, match="planted needs brief"):
        load_domain("cad_agent:parts", level=1, planted=0.5)


@pytest.mark.slow
def test_a_correction_drill_runs_its_given_attempt_unsampled_and_trains_only_the_correction(sandbox):
    tok = char_tokenizer()
    spec = brief_agent_spec(CadVerifier(), planted=1.0)
    task = next(t for t in SOURCE.take(10, "train", seed=5) if drilled(t, 1.0) is not None)
    given = drilled(task, 1.0)
    agent = ScriptedAgent([call("render", program=task.answer)], tokenizer=tok, eos_id=tok.eos_id)
    # as the agent rollouter runs it: the task's env, made first (the attempt reaches the runtime through it)
    ep = asyncio.run(run_agent_task(agent, make_env(spec.load(task), sandbox), None, spec.max_steps, system=spec.system,
                                    tool_listing=spec.tool_listing, max_format_errors=spec.max_format_errors,
                                    opening=spec.opening))
    assert ep.passed and [t.kind for t in ep.turns] == ["given", "act"] and ep.steps == 1
    assert len(agent.calls) == 1 and ep.tokens_out == len(ep.turns[1].completion.token_ids)  # one model call
    seen = ep.turns[0].results[0].output
    assert "needs" in seen  # the planted attempt was rendered and failed
    traj = ep.to_trajectory()
    assert len(traj.turns) == 1  # the given attempt is context, never a trained turn
    view = traj.token_view()
    # token for token the pre-training trace of that correction; only the correcting call is sampled
    steps = [(ToolCall("render", {"program": given}), seen),
             (ToolCall("render", {"program": task.answer}), "IoU 1.00, passes")]
    ids, mask = episode_trace(dataclasses.replace(spec, tools=cad_brief_task(task, None).tools), task.prompt, steps, tok)
    start = len(traj.turns[0].context_ids)
    assert view.ids == ids and view.mask == [m and i >= start for i, m in enumerate(mask)]
    assert tok.decode(view.ids[:start]).count(given) == 1 and any(mask[:start])  # the attempt was a sampled span
    # the planted mistake fails: submitting it at once, or garbling the call, fails the episode and earns nothing,
    # though the verifier gives the given attempt partial credit (kept, a policy would learn to do nothing: seed 2's
    # collapse, benchmarks/RESULTS.md, fifteenth session)
    for action in (call("submit"), '<tool_call>{"nam": "subm'):
        kept = run(ScriptedAgent([action], tokenizer=tok, eos_id=tok.eos_id), task, sandbox, spec)
        assert kept.verdict.ok and not kept.passed and kept.turns[0].kind == "given"
        assert kept.reward == 0.0 and kept.verdict.info["partial_score"] > 0.5
    assert ep.reward == ep.verdict.score > 0.9 and "partial_score" not in ep.verdict.info  # a correction keeps its score
    # a task that gives an attempt needs the spec's opening: a one-line error, not a silent ordinary episode
    plain = dataclasses.replace(spec, opening=None)
    with pytest.raises(ValueError, match="gives a first attempt"):
        run(ScriptedAgent([call("submit")]), task, sandbox, plain)


@pytest.mark.slow
def test_without_train_opening_the_model_s_own_attempt_is_context_and_only_the_calls_after_it_train(sandbox):
    tok = char_tokenizer()
    task = SOURCE.take(1, "train", seed=5)[0]
    wrong = brief_scad(planted_error(part_from_dict(task.meta["target_part"]), random.Random(1))[1])
    views = {}
    for trains in (True, False):
        spec = load_domain("cad_agent:parts", level=1, brief=True, turns=1, train_opening=trains).agent
        assert spec.opening.trains is trains and spec.max_steps == 2
        # the model's own (sampled) first attempt is wrong; its call corrects it
        ep = run(ScriptedAgent([wrong, call("render", program=task.answer)], tokenizer=tok, eos_id=tok.eos_id),
                 task, sandbox, spec)
        assert ep.passed and [t.kind for t in ep.turns] == ["act", "act"] and ep.steps == 2  # both sampled
        assert ep.tokens_out == sum(len(t.completion.token_ids) for t in ep.turns)  # the budget counts both
        assert [t.trains for t in ep.turns] == [trains, True] and ep.to_dict()["turns"][0]["trains"] is trains
        views[trains] = ep.to_trajectory().token_view()
        back = Episode.from_dict(ep.to_dict(ids=True))  # a stored episode reads back with what trains
        assert [(t.trains, t.rewrote, t.context_tokens) for t in back.turns] == \
            [(t.trains, t.rewrote, t.context_tokens) for t in ep.turns]
        assert back.to_trajectory().token_view() == views[trains]
    opening = len(ep.turns[0].completion.token_ids)
    correction = len(ep.turns[1].completion.token_ids)
    assert views[True].ids == views[False].ids  # the same tokens; only the learner's mask differs
    assert sum(views[True].mask) == opening + correction and sum(views[False].mask) == correction
    start = len(ep.turns[1].context_ids)
    assert views[False].mask == [m and i >= start for i, m in enumerate(views[True].mask)]
    for bad in ("no", 1):
        with pytest.raises(TaskFileError, match="train_opening must be true or false"):
            load_domain("cad_agent:parts", level=1, brief=True, train_opening=bad)
    with pytest.raises(TaskFileError, match="train_opening = false needs brief"):
        load_domain("cad_agent:parts", level=1, train_opening=False)


@pytest.mark.slow
def test_an_episode_that_wrote_no_model_fails_and_says_so(sandbox):
    task = SOURCE.take(1, "held_out", seed=1)[0]
    spec = dataclasses.replace(brief_agent_spec(CadVerifier()), opening=None)  # planted: no opening render
    ep = run(ScriptedAgent([call("submit")]), task, sandbox, spec)
    assert ep.verdict.ok and not ep.passed and "never wrote model.scad" in ep.verdict.details


@pytest.mark.slow
def test_a_broken_program_is_no_solid_and_a_wrong_submission_fails(sandbox):
    task = SOURCE.take(1, "held_out", seed=1)[0]
    spec = brief_agent_spec(CadVerifier())
    tok = char_tokenizer()
    ep = run(ScriptedAgent(["cube([1,2", call("submit")], tokenizer=tok, eos_id=tok.eos_id), task, sandbox, spec)
    assert ep.turns[0].results[0].output == "no valid solid"
    assert ep.status is EpisodeStatus.FAILED and ep.verdict.ok and not ep.passed


def test_a_program_openscad_only_warns_about_renders_as_the_verifier_judges_it(sandbox):
    # the gold with its hole's call garbled: OpenSCAD warns, drops the call and renders the bare block; the verifier
    # fails it (warnings are errors), so the render tool must not show the solid as passing, or as any solid
    task = next(t for t in SOURCE.take(20, "held_out", seed=2) if "cylinder" in (t.answer or ""))
    garbled = task.answer.replace("cylinder(", "cyr(", 1)
    spec = brief_agent_spec(CadVerifier())
    ep = run(ScriptedAgent([garbled, call("submit")]), task, sandbox, spec)
    assert ep.turns[0].results[0].output == "no valid solid"
    assert ep.verdict.ok and not ep.passed
    lenient = brief_agent_spec(CadVerifier(hard_warnings=False))  # the verifier's leniency, the tool's too
    ep = run(ScriptedAgent([garbled, call("submit")]), task, sandbox, lenient)
    assert ep.turns[0].results[0].output.startswith("IoU ")


def test_an_observation_that_leaks_the_target_is_caught():
    rng = random.Random(1)
    holed = [t for t in SOURCE.take(80, "train", seed=3) if len(t.meta["target_part"]["features"]) == 2]
    for task in holed[:30]:
        steps, _ = correction_steps(task, rng, clean=0.0)
        (render, seen), _ = steps
        assert leaked_target(seen, task, render.arguments["program"]) is None, seen
    # planted leaks: the gold program, and the hole's place beside an attempt that has no hole
    task = holed[0]
    part = part_from_dict(task.meta["target_part"])
    hole = part.features[1]
    bare = brief_scad(type(part)(part.features[:1]))
    seen = brief_observation(part_solid(type(part)(part.features[:1])), part_solid(part), 0.9)
    assert leaked_target(seen, task, bare) is None
    assert leaked_target(seen + f"; the hole is at x={hole.at[0]:g}, y={hole.at[1]:g}", task, bare) is not None
    assert leaked_target(seen + "; try " + task.answer, task, bare) == "the gold program"


def test_the_episode_budget_is_the_spec_s_and_the_domain_samples_within_it():
    d = load_domain("cad_agent:parts", level=1, brief=True, turns=1)
    assert d.agent.max_steps == 2 and d.agent.max_tokens == BRIEF_MAX_TOKENS == d.sampling.max_tokens
    assert sampled_token_budget(d.agent) == 2 * BRIEF_MAX_TOKENS
    assert sampled_token_budget(load_domain("cad_agent:parts", level=1, brief=True, turns=2).agent) == 3 * BRIEF_MAX_TOKENS
    assert "</tool_call>" in d.sampling.stop


def test_the_benchmark_refuses_unequal_budgets_and_counts_episodes_over_budget():
    from benchmark_module import load_benchmark

    bench = load_benchmark("cad_observe")
    spec = load_domain("cad_agent:parts", level=1, brief=True, turns=1).agent
    assert bench.equal_budget(2 * BRIEF_MAX_TOKENS, spec) == 2 * BRIEF_MAX_TOKENS
    with pytest.raises(ValueError, match="unequal budgets"):  # planted: the single-shot arm given one call's room
        bench.equal_budget(BRIEF_MAX_TOKENS, spec)

    class Done:
        def __init__(self, n):
            self.completion = type("C", (), {"token_ids": [0] * n})()

    class Ep:
        def __init__(self, task_id, *lengths):
            self.task_id, self.turns = task_id, [Done(n) for n in lengths]

    assert bench.over_budget([[Ep("a", 144, 144)], [Ep("b", 100)]], 288) == []
    assert bench.over_budget([[Ep("a", 144, 145)], [Ep("b", 100)]], 288) == ["a"]  # planted: one token over


@pytest.mark.slow
def test_the_benchmark_arms_run_on_a_tiny_model(engine):
    from benchmark_module import load_benchmark

    bench = load_benchmark("cad_observe")
    d = load_domain("cad_agent:parts", level=1, brief=True, turns=1)
    tasks = SOURCE.take(2, "held_out", seed=4)
    r = bench.arms(engine, tasks, CadVerifier(), d.agent, 1.0, 2, 1)
    assert r["n"] == 2 and len(r["single_per_task"]) == len(r["agent_per_task"]) == 2
    assert r["budget"] == 2 * BRIEF_MAX_TOKENS and r["single_tokens"] <= r["budget"] and r["agent_tokens"] <= r["budget"]
    assert r["episodes"]["episodes"] == 4 and r["leaks"] == []
    assert {r["single_invalid"], r["agent_invalid"]} <= {0.0, 0.25, 0.5, 0.75, 1.0}  # shares of 4 graded programs
    # the paired single-shot arm is the episodes' openings: the same prompt ids, the same verdicts as first renders
    assert r["pairing"]["other_context"] == 0 and r["pairing"]["verdict_differs"] == 0
    assert r["single_unpaired_tokens"] <= r["budget"] and len(r["single_unpaired_per_task"]) == 2


@pytest.mark.slow
def test_the_paired_single_shot_arm_is_the_openings_and_its_checks_catch_a_broken_pairing(sandbox):
    """`observe_gain`'s single-shot arm is each episode's own opening judged as a single-shot response (common random
    numbers); an opening cut at its call's cap is sampled on to the budget; planted: an opening that saw another
    prompt, and a first render whose verdict is not the program's, are each counted."""
    from types import SimpleNamespace

    from benchmark_module import load_benchmark
    from posttrain.types import Completion, FinishReason

    bench = load_benchmark("cad_observe")
    tok = char_tokenizer()
    spec = brief_agent_spec(CadVerifier())
    budget = sampled_token_budget(spec)
    tasks = SOURCE.take(2, "held_out", seed=7)
    wrong = tasks[1].answer.replace("cube([", "cube([2*", 1)  # twice as long: IoU 0.5
    asked = []

    def generate(prompts, params):  # the engine's continuation of a cut opening: the rest of the gold program
        asked.append((prompts, params))
        return [[Completion(tok.encode(tasks[0].answer[40:], add_bos=False), "", [], FinishReason.STOP)]]

    engine = SimpleNamespace(tokenizer=tok, generate=generate, encode=lambda texts: [tok.encode(t) for t in texts])

    def episode(task, first, *calls):
        return run(ScriptedAgent([first, *calls], tokenizer=tok, eos_id=tok.eos_id), task, sandbox, spec)

    eps = [[episode(tasks[0], tasks[0].answer, call("submit")), episode(tasks[0], wrong, call("submit"))],
           [episode(tasks[1], wrong, call("render", program=tasks[1].answer))]]
    records, checks = bench.paired_single(engine, eps, tasks, CadVerifier(), budget, 1.0, 3)
    assert checks == {"other_context": 0, "verdict_differs": 0, "continued": 0} and asked == []
    assert [(r.task_id, r.sample, r.passed) for r in records] == [(tasks[0].id, 0, True), (tasks[0].id, 1, False),
                                                                  (tasks[1].id, 0, False)]
    assert [r.response for r in records] == [tasks[0].answer, wrong, wrong]  # the openings, not the corrections
    assert bench.per_task(records, tasks) == [0.5, 0.0]
    # an opening cut at its cap: sampled on from its own ids, within the budget, and judged whole
    cut = eps[0][0].turns[0]
    head = tok.encode(tasks[0].answer[:40], add_bos=False)
    eps[0][0].turns[0] = dataclasses.replace(cut, completion=Completion(head, tasks[0].answer[:40], [], FinishReason.LENGTH))
    records, checks = bench.paired_single(engine, eps, tasks, CadVerifier(), budget, 1.0, 3)
    assert checks["continued"] == 1 and records[0].passed and records[0].response == tasks[0].answer
    (prompts, params), = asked
    assert prompts == [cut.context_ids + head] and params.max_tokens == budget - len(head)
    # planted: an opening that saw another prompt, and a first render that says passes for a failing program
    eps[0][0].turns[0] = dataclasses.replace(cut, context_ids=cut.context_ids[:-1])
    first = eps[1][0].turns[0]
    eps[1][0].turns[0] = dataclasses.replace(first, results=[dataclasses.replace(first.results[0],
                                                                                 output="IoU 1.00, passes")])
    _, checks = bench.paired_single(engine, eps, tasks, CadVerifier(), budget, 1.0, 3)
    assert checks == {"other_context": 1, "verdict_differs": 1, "continued": 0}


def test_the_benchmark_counts_a_leaking_observation():
    from benchmark_module import load_benchmark
    bench = load_benchmark("cad_observe")
    task = next(t for t in SOURCE.take(40, "train", seed=3) if len(t.meta["target_part"]["features"]) == 2)
    part = part_from_dict(task.meta["target_part"])
    bare = brief_scad(type(part)(part.features[:1]))
    honest = brief_observation(part_solid(type(part)(part.features[:1])), part_solid(part), 0.9)
    hole = part.features[1]

    def episode(output):
        turn = type("T", (), {"calls": [call("render", program=bare)], "results": [type("R", (), {"output": output})()]})()
        return type("E", (), {"task_id": task.id, "turns": [turn]})()

    assert bench.observation_leaks([[episode(honest)]], [task]) == []
    leaky = honest + f"; a hole of radius {hole.r:g} at ({hole.at[0]:g}, {hole.at[1]:g})"  # planted: the render names it
    assert len(bench.observation_leaks([[episode(leaky)]], [task])) == 1


def test_the_correcting_base_family_learns_programs_and_episodes():
    from posttrain.config import BaseModelConfig
    from posttrain.recipes import builtin

    cfg = BaseModelConfig(family="cad_agent:parts")
    assert builtin.is_cad(cfg) and builtin.is_cad_agent(cfg) and cfg.kind_floor == 0.15 and cfg.batch_size == 32
    assert builtin.base_key(cfg).startswith("cad-agent-parts-l1-s0-")
    assert builtin.base_key(BaseModelConfig(family="cad:parts")).startswith("cad-parts-l1-s0-")
    tok = char_tokenizer()
    tasks = PartsSource(level=1, brief=True).take(6, "train", seed=1)
    ids, weight = builtin._correction_batch(tok, tasks, random.Random(0))
    assert ids.shape[0] == 6 and weight.shape == (6, ids.shape[1] - 1)
    assert ids.shape[1] <= builtin.CAD_AGENT_CONTEXT
    assert builtin._fresh_model(cfg, tok.vocab_size, False).config.max_position_embeddings == 1024
    # a mistaken first attempt has no loss; the submitted gold program does
    rng = random.Random(0)
    for t in tasks:
        state = rng.getstate()
        steps, clean = correction_steps(t, rng)
        rng.setstate(state)
        row, w = correction_trace(t, tok, rng)
        text = tok.decode([i for i, x in zip(row[1:], w[1:]) if x > 0])
        # clean: the opening program (as single-shot learns it) and submit(); else only the gold's render
        assert text.startswith(t.answer) == clean and text.count(t.answer) == 1, (clean, text)
        assert text.endswith(fmt.render_call(ToolCall("submit", {}) if clean else ToolCall("render", {"program": t.answer})))


def test_every_oracle_call_fits_one_reply():
    tok = char_tokenizer()
    from posttrain.agent import format as fmt

    longest = 0
    for task in SOURCE.take(400, "train", seed=7):
        steps, _ = correction_steps(task, random.Random(0), clean=0.0)
        longest = max(longest, *(len(tok.encode(fmt.render_call(c), add_bos=False)) for c, _ in steps))
    assert longest <= BRIEF_MAX_TOKENS - 16, longest


@pytest.mark.slow
def test_the_observation_passes_exactly_when_the_verifier_does():
    from posttrain.rewards.base import score_sync
    from posttrain.rewards.cad_parts import feature_regions

    rng = random.Random(4)
    tasks, wrongs = [], []
    for task in SOURCE.take(40, "train", seed=9):
        for _ in range(2):  # mistakes near the threshold too: a hole moved a little passes the IoU, not its feature's
            tasks.append(task)
            wrongs.append(planted_error(part_from_dict(task.meta["target_part"]), rng)[1])
    verdicts = score_sync(CadVerifier(), tasks, [brief_scad(w) for w in wrongs])
    assert all(v.ok for v in verdicts)

    def passes(regions: bool) -> list[bool]:
        out = []
        for t, w in zip(tasks, wrongs):
            part = part_from_dict(t.meta["target_part"])
            seen = brief_observation(part_solid(w), part_solid(part), 0.9, feature_regions(part) if regions else None)
            out.append(seen.endswith("passes"))
        return out

    assert [v.passed for v in verdicts] == passes(True)
    assert any(v.passed for v in verdicts) and not all(v.passed for v in verdicts)
    # planted: the line judged by the whole solid's IoU alone (the first version) passes some the verifier fails
    assert [v.passed for v in verdicts] != passes(False)


def test_the_benchmark_counts_corrections_broken_passes_and_format_errors():
    from benchmark_module import load_benchmark
    bench = load_benchmark("cad_observe")

    def ep(first, passed, submitted=None, format_errors=0):
        turn = type("T", (), {"calls": [call("render", program="x")], "results": [type("R", (), {"output": first})()]})()
        return type("E", (), {"turns": [turn], "passed": passed, "submitted": submitted, "format_errors": format_errors})()

    got = bench.corrections([[ep("IoU 1.00, passes", True, ""), ep("IoU 0.5, needs 0.9", True)],
                             [ep("IoU 1.00, passes", False), ep("no valid solid", False, None, 1)]])
    assert got == {"episodes": 4, "first_passed": 2, "first_failed": 2, "corrected": 1, "broke_a_pass": 1,
                   "no_submit": 3, "format_error": 1}
    assert bench.correction_gain(got) == 0.0  # a correction and a broken pass cancel
    assert bench.correction_gain({**got, "broke_a_pass": 0}) == 25.0 and bench.correction_gain({**got, "corrected": 0}) == -25.0
