"""`run_agent_task`: one agent episode, from an empty workspace to a verdict. The same function trains, evaluates and runs agents.

The loop: open the env (workspace and task files), build the context (the stable prefix of system
text and tool schemas, then the task), then per step: apply the context policy (masking,
compaction), ask the model, parse its call (a malformed one is a format-error observation, counted;
too many in a row end the episode), run the call in the sandbox, append the real output to the
context, until the model submits, the step or time budget runs out, or the context cannot fit.
Then the env's verifier judges the workspace structurally (hidden tests), whatever ended the
episode, and the episode is returned with its status, verdict, tokens, cost and time per phase.
With an `Opening` (`spec.py`) the context instead opens with the task's prompt alone, the first reply is a bare
answer sampled as a single-turn one (to EOS) and run as the opening tool's call, and the system text and tool listing
follow its observation; a task that gives that first attempt (`AgentTask.opening`, a correction drill) has it run the
same way without a model call (a "given" turn, context of the next, never trained), and scores 0 unless it passes
(the given attempt's partial credit is not the model's).

Token in, token out: a turn's context is the previous context's ids, the sampled ids and the
observation's ids, concatenated (`context.ContextWindow`); nothing already in the context is
re-tokenised. When the policy rewrites history the turn says so (`rewrote`) and the learner's
trajectory starts a new segment there.

Failure is data: a tool that fails is an observation; a sandbox or endpoint failure ends the
episode as env_error (masked in training, never scored 0), a workspace lost with the Ray sandbox
worker that held it included (`SessionLost`: at reset, in a tool, or as the verifier's SANDBOX_ERROR);
a verifier that fails is an ERROR verdict and also an env_error episode.
`make_env` picks the env for a task (`AgentTask` -> `ToolEnv`, a Harbor `TerminalTask` -> `TerminalEnv`,
an `Env` as it is).
Does not cover: the model adapters (`models.py`, `openai_chat.py`), tools (`tools.py`), the
policies (`context.py`), many episodes at once (`rollouter.py`, the CLI).

>>> episode = asyncio.run(run_agent_task(engine, AgentTask(...), sandbox=sandbox, max_steps=20))  # doctest: +SKIP
>>> episode.status, episode.verdict.passed, episode.to_trajectory().segments()
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from posttrain.agent import format as fmt
from posttrain.agent.context import SUMMARY_REQUEST, ContextPolicy, ContextWindow, Entry
from posttrain.agent.env import AgentTask, Env, ToolEnv
from posttrain.agent.episode import AgentTurn, Episode, EpisodeStatus, PhaseTimes, ToolCall
from posttrain.agent.models import AgentModel, Sampled, as_agent_model
from posttrain.agent.recall import Memory
from posttrain.agent.spec import Opening
from posttrain.agent.terminal import TerminalEnv, is_terminal_task
from posttrain.agent.tools import Tool
from posttrain.agent.traces import answer_ids
from posttrain.engine.base import ContextLengthError
from posttrain.pricing import Price
from posttrain.types import Completion, FinishReason, SamplingParams, Verdict, VerdictStatus

if TYPE_CHECKING:
    from posttrain.sandbox.workspace import Workspaces

DEFAULT_PARAMS = SamplingParams(temperature=0.0, max_tokens=512)

TurnHook = Callable[[AgentTurn], None]


async def run_agent_task(
    model: object,
    task: object,
    tools: list[Tool] | None = None,
    max_steps: int = 30,
    context_policy: ContextPolicy | None = None,
    *,
    sandbox: Workspaces | None = None,
    params: SamplingParams | None = None,
    max_format_errors: int | None = 3,
    timeout_s: float | None = None,
    system: str = fmt.SYSTEM,
    price: Price | None = None,
    on_turn: TurnHook | None = None,
    tool_listing: fmt.Listing = "json",
    opening: Opening | None = None,
) -> Episode:
    """Run one episode of `model` (an `Engine` with a tokenizer, or an `AgentModel`) on `task` (an `AgentTask`,
    a `TerminalTask` or any `Env`; tasks need `sandbox`). `tools` default to the env's. `max_format_errors`:
    consecutive malformed calls that end the episode (None: no cap). `timeout_s`: the agent's wall-clock budget
    (default: the env's). `tool_listing`: how an engine's prefix lists the tools (`format.render_prefix`).
    `opening`: the episode opens with a bare single-turn answer run as that tool's call (`spec.Opening`)."""
    t_start = time.perf_counter()
    policy = context_policy or ContextPolicy()
    agent: AgentModel = as_agent_model(model, price, tool_listing)
    if opening is not None and agent.native_tools:
        raise ValueError("an episode with an opening answer needs a text model (the runtime runs its bare reply as a call)")
    base = params or DEFAULT_PARAMS
    act_params = base if agent.native_tools else dataclasses.replace(base, stop=tuple(dict.fromkeys(base.stop + fmt.STOP)))
    env = make_env(task, sandbox, tools)
    given = getattr(env, "opening", None)  # a first attempt the task gives (`AgentTask.opening`, via `ToolEnv`)
    if given is not None and opening is None:
        raise ValueError(f"task {env.task_id!r} gives a first attempt (AgentTask.opening): run it with the spec's Opening")
    memory = Memory()
    ep = Episode(env.task_id, [], EpisodeStatus.FAILED, times=PhaseTimes())
    try:
        if not await _open(env, memory, ep):
            return ep
        deadline = t_start + (timeout_s if timeout_s is not None else env.timeout_s)
        loop = _Loop(agent, env, policy, act_params, memory, ep, deadline, max_format_errors, on_turn)
        if opening is None:
            window = ContextWindow(agent.codec, agent.prefix(env.tools, system), agent.codec.entry("task", ep.instruction))
        else:  # the prompt as a single-turn answer sees it; the listing comes after the opening call's observation
            loop.opening = opening
            loop.given = given
            loop.opening_params = dataclasses.replace(base, stop=tuple(x for x in base.stop if x not in fmt.STOP))
            loop.listing = agent.codec.entry("listing", fmt.render_prefix([t.schema() for t in env.tools], system,
                                                                          tool_listing))
            window = ContextWindow(agent.codec, agent.codec.entry("prefix", ep.instruction),
                                   Entry("task", ep.instruction, [], 0))
        status = await loop.run(window, max_steps)
        ep.status = status if status is EpisodeStatus.ENV_ERROR else await _judge(env, ep, status, drill=given is not None)
        return ep
    finally:
        try:
            await env.close()
        finally:
            memory.close()
            ep.times.total_s = time.perf_counter() - t_start


async def _open(env: Env, memory: Memory, ep: Episode) -> bool:
    """Reset the env (its workspace and task files) and give recall the task and its documents; False (the
    episode an env_error) when the workspace cannot open."""
    try:
        t0 = time.perf_counter()
        ep.instruction = await env.reset(memory)
        ep.times.setup_s = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - a workspace that cannot open is the environment's failure
        ep.status, ep.error = EpisodeStatus.ENV_ERROR, f"could not open the workspace: {type(exc).__name__}: {exc}"
        return False
    for name, text in env.documents.items():
        memory.add(f"document {name}", text)
    memory.add("task", ep.instruction)
    return True


async def _judge(env: Env, ep: Episode, status: EpisodeStatus, drill: bool = False) -> EpisodeStatus:
    """The env's verdict on the workspace, whatever ended the act loop (`status`): SOLVED when it passed, an
    env_error when the verifier failed, else `status`. A `drill` (the task gave the first attempt) that did not pass
    scores 0: the given attempt's partial credit is not the model's, and keeping it would pay an episode for doing
    nothing (or for garbling its calls) more than for a correction that fell short."""
    t0 = time.perf_counter()
    verdict = await _verify(env)
    if drill and verdict.status is VerdictStatus.OK and not verdict.passed and verdict.score > 0:
        verdict = dataclasses.replace(verdict, score=0.0, info={**verdict.info, "partial_score": verdict.score},
                                      details=f"a drill that did not pass scores 0 (partial {verdict.score:.3f}); "
                                              f"{verdict.details}")
    ep.times.verification_s = time.perf_counter() - t0
    ep.verdict = verdict
    if verdict.status is VerdictStatus.ERROR:  # the verifier failed: the environment's fault, masked
        ep.error = ep.error or f"verification failed: {verdict.details[:300]}"
        return EpisodeStatus.ENV_ERROR
    return EpisodeStatus.SOLVED if verdict.passed else status


def make_env(task: object, sandbox: Workspaces | None, tools: list[Tool] | None = None) -> Env:
    """The env for `task`: an `Env` as given, an `AgentTask` in a `ToolEnv`, a Harbor `TerminalTask` in a `TerminalEnv`."""
    if isinstance(task, Env):
        return task
    if sandbox is None:
        raise ValueError("make_env: a task (not an Env) needs a sandbox to run in")
    if isinstance(task, AgentTask):
        return ToolEnv(sandbox, task, tools)
    if is_terminal_task(task):
        return TerminalEnv(sandbox, task, tools)
    raise TypeError(f"no env for a {type(task).__name__}: give an Env, an AgentTask or a TerminalTask")


async def _verify(env: object) -> Verdict:
    try:
        return await env.verify()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - a verifier's crash is an ERROR verdict, never a 0
        return Verdict(0.0, False, VerdictStatus.ERROR, "agent", f"the verifier raised {type(exc).__name__}: {exc}")


def _calls_of(sampled: Sampled) -> tuple[list[ToolCall], str]:
    """A sampled reply's tool calls (parsed from its text unless the model returned them), and why it holds
    no valid call ("" when it does)."""
    calls, error = sampled.calls, ""
    if calls is None:
        parsed = fmt.parse_call(sampled.completion.text)
        calls, error = ([parsed.call] if parsed.call is not None else []), parsed.error
    elif sampled.format_error:
        error = sampled.format_error
    elif not calls:
        error = "no tool call: call a tool (submit when done)"
    return calls, error


class _Loop:
    """The per-episode state of the act loop (one object so the steps stay small functions)."""

    def __init__(self, agent: AgentModel, env, policy: ContextPolicy, params: SamplingParams, memory: Memory,
                 ep: Episode, deadline: float, max_format_errors: int | None, on_turn: TurnHook | None) -> None:
        self.agent, self.env, self.policy, self.params = agent, env, policy, params
        self.memory, self.ep, self.deadline = memory, ep, deadline
        self.max_format_errors, self.on_turn = max_format_errors, on_turn
        self.codec = agent.codec
        self.opening: Opening | None = None  # set by `run_agent_task` for an episode with an opening answer
        self.given: str | None = None  # the opening answer the task gives (`AgentTask.opening`): run, never sampled
        self.opening_params = params
        self.listing: Entry | None = None

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    async def run(self, w: ContextWindow, max_steps: int) -> EpisodeStatus:
        """The act loop; returns how it ended (FAILED when the model submitted: the verdict decides)."""
        consecutive = 0
        step = 0
        while True:
            stopped = await self.prepare(w, step, max_steps)
            if stopped is not None:
                return stopped
            rewrote, w.dirty = w.dirty, False
            opening = self.opening if step == 0 else None
            given = self.given if opening is not None else None
            if given is not None:
                sampled = self.given_answer(w, given)
            else:
                sampled = await self.sample(w, self.params if opening is None else self.opening_params)
            if isinstance(sampled, EpisodeStatus):
                return sampled
            step += 1
            c = sampled.completion
            turn = AgentTurn(sampled.context_ids, c, rewrote=rewrote, context_tokens=sampled.context_tokens,
                             kind="act" if given is None else "given",
                             trains=given is None and (opening is None or opening.trains))  # a given turn never trains
            # an opening reply is a bare answer, run as the opening tool's call (never a format error)
            calls, error = _calls_of(sampled) if opening is None else ([ToolCall(opening.tool, {opening.argument: c.text})], "")
            reply = Entry("assistant", c.text, list(c.token_ids), len(c.token_ids) or max(1, len(c.text) // 4), step,
                          calls=list(calls))
            observations: list[Entry] = []
            ended: EpisodeStatus | None = None
            if error:
                consecutive += 1
                ended = self.malformed(error, consecutive, step, turn, observations)
            else:
                consecutive = 0
                for call in calls:
                    ended = await self.act(call, step, turn, observations)
                    if ended is not None:
                        break
                if opening is not None and ended is None and self.listing is not None:
                    observations.append(self.listing)  # the tools, told once the opening answer has been seen
            turn.calls = list(calls)
            self.record(w, turn, reply, observations)
            if ended is not None:
                return ended

    async def prepare(self, w: ContextWindow, step: int, max_steps: int) -> EpisodeStatus | None:
        """Before a model call: the step and time budgets, then the context policy (masking, compaction) and
        whether the context and a reply fit; a status when the episode must end instead."""
        max_tokens = self.params.max_tokens
        if step >= max_steps:
            return EpisodeStatus.MAX_STEPS
        if self.remaining() <= 0:
            return EpisodeStatus.TIMEOUT
        self.policy.mask(w)
        if self.policy.wants_compaction(w, max_tokens):
            done = await self.compact(w, step)
            if done is not None:
                return done
        if not self.policy.fits(w, max_tokens):
            self.ep.error = f"the context ({w.tokens} tokens) and a reply ({max_tokens}) exceed the budget"
            return EpisodeStatus.CONTEXT_EXHAUSTED
        return None

    def malformed(self, error: str, consecutive: int, step: int, turn: AgentTurn,
                  observations: list[Entry]) -> EpisodeStatus | None:
        """A reply without a valid call: counted, answered with the error; FORMAT_ERRORS after too many in a row."""
        self.ep.format_errors += 1
        turn.format_error = error
        observations.append(self.codec.entry("error", error, step))
        if self.max_format_errors is not None and consecutive >= self.max_format_errors:
            self.ep.error = f"{consecutive} malformed calls in a row (last: {error})"
            return EpisodeStatus.FORMAT_ERRORS
        return None

    def record(self, w: ContextWindow, turn: AgentTurn, reply: Entry, observations: list[Entry]) -> None:
        """The reply and its observations appended to the context; the turn to the episode (and `on_turn`)."""
        w.append(reply)
        for o in observations:
            w.append(o)
        turn.observation_ids = [t for o in observations for t in o.ids]
        turn.observation = "".join(self.codec_text(o) for o in observations)
        self.ep.turns.append(turn)
        if self.on_turn is not None:
            self.on_turn(turn)

    def codec_text(self, o: Entry) -> str:
        return o.content if o.kind != "observation" else f"[{o.name}] {o.content}"

    async def act(self, call: ToolCall, step: int, turn: AgentTurn, observations: list[Entry]) -> EpisodeStatus | None:
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(max(0.001, self.remaining()) + 1.0):  # no extra task, unlike wait_for
                result = await self.env.step(call)
        except TimeoutError:
            self.ep.times.tools_s += time.perf_counter() - t0
            self.ep.error = f"the agent's time ran out during {call.name}"
            return EpisodeStatus.TIMEOUT
        self.ep.times.tools_s += time.perf_counter() - t0
        turn.results.append(result)
        self.memory.add(f"step {step}: {call.name}", json.dumps(call.arguments)[:2000] + "\n" + result.output)
        text, _ = self.policy.observation(result.output)
        observations.append(self.codec.entry("observation", text, step, call.name, call.id))
        observations[-1].images = list(result.images)
        if result.env_error:
            self.ep.error = f"{call.name}: {result.output}"
            return EpisodeStatus.ENV_ERROR
        if result.ends_episode:
            self.ep.submitted = str(call.arguments.get("answer", ""))
            return EpisodeStatus.FAILED  # finished; the verdict decides between solved and failed
        return None

    def given_answer(self, w: ContextWindow, text: str) -> Sampled:
        """The task's first attempt as if sampled (its ids as a bare answer that stopped on EOS), with no model call:
        its turn is "given", so it is context of the next turn and never trains."""
        ids = answer_ids(text, self.codec.tokenizer)  # type: ignore[attr-defined]  # an opening needs a text model
        return Sampled(Completion(ids, text, [0.0] * len(ids), FinishReason.STOP), list(w.ids), len(w.ids))

    async def sample(self, w: ContextWindow, params: SamplingParams):
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(max(0.001, self.remaining())):
                sampled = await self.agent.sample(w, self.env.tools, params)
        except TimeoutError:
            self.ep.error = "the agent's time ran out while the model was sampling"
            return EpisodeStatus.TIMEOUT
        except ContextLengthError as exc:  # the model's own window is full (no policy budget stopped it first)
            self.ep.error = str(exc)
            return EpisodeStatus.CONTEXT_EXHAUSTED
        except Exception as exc:  # noqa: BLE001 - an endpoint or engine failure is the environment's, not the model's
            self.ep.error = f"the model failed: {type(exc).__name__}: {exc}"
            return EpisodeStatus.ENV_ERROR
        finally:
            self.ep.times.model_s += time.perf_counter() - t0
        self.ep.tokens_in += sampled.context_tokens
        out = sampled.completion_tokens
        self.ep.tokens_out += len(sampled.completion.token_ids) if out is None else out
        self.ep.cost_usd += sampled.cost_usd
        return sampled

    async def compact(self, w: ContextWindow, step: int) -> EpisodeStatus | None:
        """Summarise and restart the view; a status when the episode must end instead."""
        p = self.policy
        max_tokens = self.params.max_tokens
        summary: Entry | None = None
        if p.summarizer == "model":
            request = self.codec.entry("note", SUMMARY_REQUEST, step)
            if p.budget_tokens is None or w.tokens + request.n_tokens + p.summary_max_tokens <= p.budget_tokens:
                w.append(request)
                rewrote, w.dirty = w.dirty, False
                params = dataclasses.replace(self.params, max_tokens=p.summary_max_tokens, stop=())
                sampled = await self.sample(w, params)
                if isinstance(sampled, EpisodeStatus):
                    return sampled
                turn = AgentTurn(sampled.context_ids, sampled.completion, kind="summary", rewrote=rewrote,
                                 context_tokens=sampled.context_tokens)
                self.ep.turns.append(turn)
                if self.on_turn is not None:
                    self.on_turn(turn)
                summary = self.codec.summary(sampled.completion.text, list(sampled.completion.token_ids), step)
        if summary is None:  # extractive: no model call (or no room left for one)
            summary = self.codec.entry("summary", p.extractive_summary(w), step)
        view = p.compacted(w, summary, max_tokens)
        if view is None:
            self.ep.error = "the context cannot fit even after compaction"
            return EpisodeStatus.CONTEXT_EXHAUSTED
        w.replace(view)
        return None
