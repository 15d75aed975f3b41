"""`run_agent_task`: a scripted model solving and failing tasks, every way an episode ends, token in / token out."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.agent import AgentTask, ContextPolicy, EpisodeStatus, ScriptedAgent, call, run_agent_task
from posttrain.agent.demo import demo_tasks
from posttrain.agent.episode import Episode, ToolCall, ToolResult
from posttrain.agent.scripted import noop_agent, oracle_agent
from posttrain.agent.tools import default_tools
from posttrain.engine.mock import MockEngine
from posttrain.models.tokenizer import char_tokenizer
from posttrain.types import RolloutStatus, Verdict, VerdictStatus

FIX = demo_tasks()[0]  # calc.add subtracts; hidden test_calc.py checks it


def run(agent, task=FIX, sandbox=None, **kw):
    return asyncio.run(run_agent_task(agent, task, sandbox=sandbox, **kw))


def test_oracle_solves_and_noop_fails_every_demo_task(sandbox):
    for task in demo_tasks():
        solved = run(oracle_agent(task.solution), task, sandbox)
        assert solved.status is EpisodeStatus.SOLVED and solved.passed and solved.reward == 1.0, solved.verdict
        failed = run(noop_agent(), task, sandbox)
        assert failed.status is EpisodeStatus.FAILED and not failed.passed and failed.reward == 0.0
        assert failed.verdict.ok  # a wrong answer is an OK verdict, never an error


def test_a_scripted_fix_through_the_tools(sandbox):
    agent = ScriptedAgent([call("run_tests"), call("read_file", path="calc.py"),
                           call("edit", path="calc.py", old="return a - b", new="return a + b"), call("run_tests"),
                           call("submit")])
    ep = run(agent, sandbox=sandbox)
    assert ep.status is EpisodeStatus.SOLVED and ep.steps == 5 and ep.submitted == ""
    assert "AssertionError" in ep.turns[0].observation and "[exit code 0]" in ep.turns[3].observation
    assert ep.tokens_in == sum(len(t.context_ids) for t in ep.turns)
    assert ep.tokens_out == sum(len(t.completion.token_ids) for t in ep.turns)
    t = ep.times
    assert t.tools_s > 0 and t.verification_s > 0 and t.setup_s > 0 and t.total_s >= t.tools_s + t.verification_s


def test_edited_tests_earn_nothing(sandbox):
    """The agent rewrites the visible test to pass; the hidden copy is written over it before judging."""
    agent = ScriptedAgent([call("write_file", path="test_calc.py", content="print('ok')\n"), call("run_tests")])
    ep = run(agent, sandbox=sandbox)
    assert "[exit code 0]" in ep.turns[1].observation  # the agent fooled its own visible test...
    assert ep.status is EpisodeStatus.FAILED and not ep.passed  # ...not the verifier


def test_a_planted_check_script_earns_nothing(sandbox):
    task = demo_tasks()[1]  # hidden .check.sh
    ep = run(ScriptedAgent([call("write_file", path=".check.sh", content="exit 0\n")]), task, sandbox)
    assert ep.status is EpisodeStatus.FAILED


def test_max_steps_still_verifies(sandbox):
    agent = ScriptedAgent([call("edit", path="calc.py", old="a - b", new="a + b")] + [call("bash", command="true")] * 5)
    ep = run(agent, sandbox=sandbox, max_steps=3)
    assert ep.steps == 3 and ep.status is EpisodeStatus.SOLVED  # the work was done: the tests say so
    ep = run(ScriptedAgent([call("bash", command="true")] * 5), sandbox=sandbox, max_steps=2)
    assert ep.status is EpisodeStatus.MAX_STEPS and ep.verdict.ok and not ep.passed
    assert ep.to_trajectory().status is RolloutStatus.TRUNCATED


def test_format_errors_are_observations_with_a_cap(sandbox):
    agent = ScriptedAgent(["I think", "<tool_call>{bad json", call("bash", command="true"), "a", "b", "c", "d"])
    ep = run(agent, sandbox=sandbox, max_format_errors=3)
    assert ep.status is EpisodeStatus.FORMAT_ERRORS and ep.format_errors == 5 and ep.steps == 6
    assert "no tool call" in ep.turns[0].format_error and "not valid JSON" in ep.turns[1].format_error
    assert "<error>" in char_tokenizer().decode(ep.turns[0].observation_ids)
    ep = run(ScriptedAgent(["x"] * 4 + [call("submit")]), sandbox=sandbox, max_format_errors=None)
    assert ep.status is EpisodeStatus.FAILED and ep.format_errors == 4


def test_unknown_tool_is_an_observation(sandbox):
    ep = run(ScriptedAgent([call("teleport", to="mars")]), sandbox=sandbox)
    assert "unknown tool 'teleport'" in ep.turns[0].observation and ep.status is EpisodeStatus.FAILED


def test_unknown_tool_names_are_one_metric(sandbox):
    """A model's garbled names (`sub7m-`, `sub900`, seen in a docs RL run) must not each become a metric name: calls
    naming no tool of the episode are counted under `tool/(unknown)`, before and after a store round trip."""
    from posttrain.agent.metrics import episode_metrics

    eps = [run(ScriptedAgent([call("sub7m-"), call("bash", command="true"), call("sub900"), call("submit")]),
               sandbox=sandbox, max_format_errors=None)]
    assert [r.unknown_tool for r in eps[0].turns[0].results + eps[0].turns[1].results] == [True, False]
    for episodes in (eps, [Episode.from_dict(e.to_dict()) for e in eps]):
        m = episode_metrics(episodes)
        tools = {k: v for k, v in m.items() if k.startswith("tool/")}
        assert tools == {"tool/(unknown)": 0.5, "tool/bash": 0.25, "tool/submit": 0.25}, tools


def test_format_errors_by_the_turns_place_in_the_episode(sandbox):
    """A format that holds early and breaks late (the lookup base's sampled episodes: 0% malformed on the first turn,
    ~30% on the third, all from the fifth) shows in `format_error_rate/turn_<k>`; the overall rate alone hides where."""
    from posttrain.agent.metrics import episode_metrics, turn_bucket

    assert [turn_bucket(i) for i in (0, 1, 2, 3, 4, 7, 8, 199)] == ["1", "2", "3-4", "3-4", "5-8", "5-8", "9-16",
                                                                   "129-256"]
    good = call("bash", command="true")
    late = run(ScriptedAgent([good, good, "oops", good, "x", call("submit")]), sandbox=sandbox, max_format_errors=None)
    clean = run(ScriptedAgent([good, call("submit")]), sandbox=sandbox)
    m = episode_metrics([late, clean])
    by_turn = {k: v for k, v in m.items() if k.startswith("format_error_rate/")}
    assert by_turn == {"format_error_rate/turn_1": 0.0, "format_error_rate/turn_2": 0.0,
                       "format_error_rate/turn_3-4": 0.5, "format_error_rate/turn_5-8": 0.5}, by_turn
    assert m["format_error_rate"] == 2 / 8


@pytest.mark.slow
def test_timeout(sandbox):
    ep = run(ScriptedAgent([call("bash", command="sleep 3")] * 3), sandbox=sandbox, timeout_s=1.0)
    assert ep.status is EpisodeStatus.TIMEOUT and ep.verdict is not None


def test_token_in_token_out_identity(sandbox):
    """Each context is the previous one + its sampled ids + the observation's ids: nothing re-tokenised."""
    agent = ScriptedAgent([call("bash", command="printf 'a  b\\t\\n c'"), "oops", call("read_file", path="calc.py"),
                           call("submit")])
    ep = run(agent, sandbox=sandbox, max_format_errors=None)
    assert len(ep.turns) == 4
    for a, b in zip(ep.turns, ep.turns[1:]):
        assert not b.rewrote
        assert b.context_ids == a.context_ids + a.completion.token_ids + a.observation_ids
    traj = ep.to_trajectory(FIX.to_task())
    (view,) = traj.segments()
    last = ep.turns[-1]
    assert view.ids == last.context_ids + last.completion.token_ids
    assert sum(view.mask) == sum(len(t.completion.token_ids) for t in ep.turns)
    assert traj.verdict is ep.verdict and traj.task.id == FIX.id


def test_the_prefix_is_identical_across_tasks(sandbox):
    agent = MockEngine(lambda p: '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
                       tokenizer=char_tokenizer())
    a, b = (run(agent, t, sandbox) for t in demo_tasks()[:2])
    pa, pb = a.turns[0].context_ids, b.turns[0].context_ids
    n = next(i for i, (x, y) in enumerate(zip(pa, pb)) if x != y)
    assert char_tokenizer().decode(pa[:n]).endswith("</system>\n<task>\n")


@pytest.mark.slow
def test_many_episodes_share_one_engine(sandbox):
    engine = MockEngine(lambda p: '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
                        tokenizer=char_tokenizer())

    async def many():
        return await asyncio.gather(*(run_agent_task(engine, t, sandbox=sandbox) for t in demo_tasks() * 4))

    eps = asyncio.run(many())
    assert len(eps) == 12 and all(e.status is EpisodeStatus.FAILED for e in eps) and len(engine.calls) == 12


class BrokenEnv:
    """An env whose verifier raises, to show a verifier failure is an error, not a 0."""

    task_id = "broken"
    tools = default_tools()
    timeout_s = 10.0
    documents: dict = {}

    def __init__(self, fail_reset=False):
        self.fail_reset = fail_reset

    async def reset(self, memory):
        if self.fail_reset:
            raise OSError("no sandbox today")
        return "do nothing"

    async def step(self, call: ToolCall) -> ToolResult:
        return ToolResult(call, "ok", ends_episode=call.name == "submit")

    async def verify(self) -> Verdict:
        raise RuntimeError("verifier crashed")

    async def close(self):
        pass


def test_env_failures_are_env_errors_never_zero():
    ep = run(noop_agent(), BrokenEnv())
    assert ep.status is EpisodeStatus.ENV_ERROR and ep.verdict.status is VerdictStatus.ERROR and ep.reward is None
    assert "verifier crashed" in ep.error and not ep.to_trajectory().trainable
    ep = run(noop_agent(), BrokenEnv(fail_reset=True))
    assert ep.status is EpisodeStatus.ENV_ERROR and "no sandbox today" in ep.error and ep.turns == []


def test_a_failing_model_is_an_env_error(sandbox):
    def boom(prompt):
        raise ConnectionError("endpoint down")

    ep = run(MockEngine(boom, tokenizer=char_tokenizer()), sandbox=sandbox)
    assert ep.status is EpisodeStatus.ENV_ERROR and "endpoint down" in ep.error and ep.verdict is None


def test_an_engine_without_tokenizer_is_refused(sandbox):
    from posttrain.agent.models import AgentModelError

    with pytest.raises(AgentModelError, match="tokenizer"):
        run(MockEngine(["x"]), sandbox=sandbox)


def test_episode_round_trips_through_json(sandbox):
    ep = run(oracle_agent(FIX.solution), sandbox=sandbox)
    back = Episode.from_dict(ep.to_dict(ids=True))
    assert back.to_dict(ids=True) == ep.to_dict(ids=True)
    assert [t.context_ids for t in back.turns] == [t.context_ids for t in ep.turns]
    slim = ep.to_dict()
    assert "context_ids" not in slim["turns"][0] and slim["status"] == "solved"


def test_agent_task_to_task():
    t = AgentTask("x", "do it", meta={"family": "f"}).to_task()
    assert t.id == "x" and t.prompt == "do it" and t.meta == {"family": "f", "kind": "agent"}


def test_compaction_policy_in_the_loop(sandbox):
    policy = ContextPolicy(budget_tokens=4500, compact_at=0.8, keep_turns=1)
    agent = ScriptedAgent([call("bash", command="seq 1 120")] * 12)
    ep = run(agent, sandbox=sandbox, context_policy=policy, max_steps=14)
    summaries = [t for t in ep.turns if t.kind == "summary"]
    room = {"act": 512, "summary": policy.summary_max_tokens}  # what each kind of turn may sample
    assert summaries and all(len(t.context_ids) + room[t.kind] <= 4500 for t in ep.turns)
    after = ep.turns[ep.turns.index(summaries[0]) + 1]
    assert after.rewrote and "Summary: the task is in progress" in char_tokenizer().decode(after.context_ids)
    assert len(ep.to_trajectory().segments()) == 1 + sum(t.rewrote for t in ep.turns)


def test_an_opening_answer_is_run_as_the_opening_tool_s_call_and_the_listing_follows_it():
    from posttrain.agent.env import FunctionEnv
    from posttrain.agent.spec import Opening
    from posttrain.agent.tools import submit, tool

    @tool
    async def shout(text: str) -> str:
        """Say it louder.

        Args:
            text: what to say
        """
        return text.upper()

    tok = char_tokenizer()

    def env():
        return FunctionEnv("shout", "say hi\n", [shout, submit], lambda answer: answer == "HI")

    agent = ScriptedAgent(["hi", call("submit", answer="HI")], tokenizer=tok, eos_id=tok.eos_id)
    ep = run(agent, env(), opening=Opening("shout", "text"), max_steps=3)
    assert ep.passed and ep.turns[0].calls == [ToolCall("shout", {"text": "hi"})] and not ep.turns[0].format_error
    assert ep.turns[0].context_ids == tok.encode("say hi\n")  # the prompt alone: no system text, no listing
    assert ep.turns[0].completion.token_ids[-1] == tok.eos_id
    second = tok.decode(ep.turns[1].context_ids)
    assert second.startswith("say hi\nhi\n<tool_response") and "shout(text: string)" not in second  # json listing
    assert second.endswith("</system>\n") and '"name": "shout"' in second
    (_, first_params), (_, then) = agent.calls[:2]
    assert "</tool_call>" not in first_params.stop and "</tool_call>" in then.stop
    # planted: without the opening, the same first reply is a format error and nothing is run
    plain = run(ScriptedAgent(["hi", call("submit", answer="HI")], tokenizer=tok), env(), max_steps=3)
    assert plain.turns[0].format_error and not plain.turns[0].results
    # an opening needs a text model (its bare reply is parsed by no one else)
    with pytest.raises(ValueError, match="text model"):
        from posttrain.agent.openai_chat import ChatEndpointModel

        run(ChatEndpointModel("http://127.0.0.1:9/v1", "m"), env(), opening=Opening("shout", "text"))
