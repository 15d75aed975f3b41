"""The brief generate-observe-correct form of `cad_agent:parts` (the built-in model's): its oracle episodes are the
runtime's episodes token for token, the render tool's one-line observation is the one pre-training computes, an
observation never leaks the target, and the sampled-token budget the benchmark equalises is the spec's."""

from __future__ import annotations

import asyncio
import random

import pytest

from posttrain.agent import EpisodeStatus, run_agent_task
from posttrain.agent.cad_tools import (
    BRIEF_MAX_TOKENS,
    PLANTED,
    brief_agent_spec,
    correction_steps,
    correction_trace,
    leaked_target,
    planted_error,
    sampled_token_budget,
)
from posttrain.agent.scripted import ScriptedAgent
from posttrain.models.tokenizer import char_tokenizer
from posttrain.rewards.cad import CadVerifier
from posttrain.rewards.cad_parts import brief_scad, part_from_dict, part_solid
from posttrain.rewards.cad_render import brief_observation
from posttrain.tasks.cad import PartsSource
from posttrain.tasks.domains import load_domain

SOURCE = PartsSource(level=1, brief=True)


def run(agent, task, sandbox, spec):
    return asyncio.run(run_agent_task(agent, spec.load(task), None, spec.max_steps, sandbox=sandbox, system=spec.system,
                                      tool_listing=spec.tool_listing, max_format_errors=spec.max_format_errors))


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
        assert steps[1][0].arguments["answer"] == task.answer
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
        ep = run(ScriptedAgent([c for c, _ in steps], tokenizer=tok), task, sandbox, spec)
        assert ep.status is EpisodeStatus.SOLVED, (ep.error, [r.output for t in ep.turns for r in t.results])
        # the real render tool (OpenSCAD's mesh in the sandbox) says what pre-training said (the part's exact solid)
        assert ep.turns[0].results[0].output == steps[0][1]
        ids, weight = correction_trace(task, tok, random.Random(k))
        view = ep.to_trajectory().token_view()
        assert view.ids == ids and view.mask == [w > 0 or (not clean and m) for w, m in zip(weight, view.mask)]
        assert (min(weight[i] for i, m in enumerate(view.mask) if m) == 0.0) == (not clean)


@pytest.mark.slow
def test_a_broken_program_is_no_solid_and_a_wrong_submission_fails(sandbox):
    from posttrain.agent.scripted import call

    task = SOURCE.take(1, "held_out", seed=1)[0]
    spec = brief_agent_spec(CadVerifier())
    ep = run(ScriptedAgent([call("render", program="cube([1,2"), call("submit", answer="cube(1);")]), task, sandbox, spec)
    assert ep.turns[0].results[0].output == "no valid solid"
    assert ep.status is EpisodeStatus.FAILED and ep.verdict.ok and not ep.passed


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
