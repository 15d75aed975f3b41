"""The agent runtime's figures, each beside a baseline measured the same way in the same run.

- ``agent_prefix_hit_rate``: the local engine's prefix-cache hit rate (prompt tokens found cached /
  prompt tokens looked up) over 50-turn transcripts, 4 episodes sharing one engine through
  ``agenerate``, token in / token out with the stable prefix. A random tiny model writes no valid
  call, so every turn's observation is a format error: a real observation in the token stream (what
  the cache sees does not depend on what the text says). Baseline: the same episodes on a fresh
  engine with a per-turn header before the prefix ("step k"), as agents that re-render their prompt
  each turn have.
- ``compaction_ratio``: context tokens processed (sum over model calls of the context length) over a
  300-step scripted episode with summarising compaction at a 4k-token budget, divided by the same
  episode with the linear history; the compacted context must never exceed the budget (checked).
- ``step_overhead_ms``: p50 over episodes of the runtime's own CPU time per step (this thread's CPU time
  minus what the scripted model's `agenerate` and the pure-Python tool's body used; everything runs on
  one thread), beside the wall figure the runtime records itself (wall time minus model, tool and
  verification time); baseline: a bare loop making the same model and tool calls with plain list
  concatenation (no policy, memory, validation or records), measured both ways.
- ``episode_start_ms``: p50 of session + task files ready (`ToolEnv.reset`), one episode at a time;
  baseline: ``Session(files=...)`` (an exec carrying the files, then a snapshot). Then 64 concurrent
  episodes of the demo tasks with scripted oracle agents must all finish solved (no error), and
  their start p50 under that concurrency is reported too.
The load average is printed at start and end: figures on a busy machine are provisional.

Run: ``nice -n 10 python benchmarks/agent.py``. The last line is one JSON object.
Goals (issue 14): prefix hit rate >= 0.9, compaction ratio <= 0.25, step overhead p50 <= 2 ms,
episode start p50 <= 20 ms with 64 concurrent episodes finishing without an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

import torch

from posttrain.agent import ContextPolicy, EpisodeStatus, ScriptedAgent, call, run_agent_task, tool
from posttrain.agent import format as fmt
from posttrain.agent.demo import demo_tasks
from posttrain.agent.env import FunctionEnv, ToolEnv
from posttrain.agent.models import EngineModel, Sampled
from posttrain.agent.scripted import oracle_agent
from posttrain.agent.tools import BUILTIN, ToolContext
from posttrain.engine.local.engine import LocalEngine
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.sandbox import Limits, Sandbox
from posttrain.sandbox.session import Session
from posttrain.types import SamplingParams

TOK = char_tokenizer()


@tool
def probe(n: int, tag: str = "x") -> str:
    """Report n numbered readings.

    Args:
        n: how many readings
        tag: a label
    """
    return readings(n, tag)


def readings(n: int, tag: str) -> str:
    return "".join(f"{tag} reading {i}: {i * 37 % 101}\n" for i in range(n))


def pure_env(i: int) -> FunctionEnv:
    return FunctionEnv(f"t{i}", f"Task {i}: take readings, then submit 7.", [probe, BUILTIN["recall"], BUILTIN["submit"]],
                       lambda a: a == "7", timeout_s=3600)


# ---- prefix hit rate


class HeaderEveryTurn(EngineModel):
    """The baseline: the prompt is re-rendered each turn with a step header in front (a changing first line)."""

    def __init__(self, engine: LocalEngine) -> None:
        super().__init__(engine)
        self.turn = 0

    async def sample(self, window, tools, params) -> Sampled:
        self.turn += 1
        ctx = [TOK.bos_id, *TOK.encode(f"step {self.turn} of 50\n", add_bos=False), *window.ids[1:]]
        (completion,), = await self.engine.agenerate([ctx], params)
        return Sampled(completion, ctx, len(ctx))


def tiny_engine(seed: int = 0) -> LocalEngine:
    cfg = ModelConfig(vocab_size=TOK.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384)
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    return LocalEngine(model, TOK, seed=seed, prefix_cache_tokens=1 << 17)


def prefix_hit_rate(episodes: int, turns: int, baseline: bool) -> tuple[float, int]:
    engine = tiny_engine()
    params = SamplingParams(temperature=1.0, max_tokens=16)

    async def main():
        models = [HeaderEveryTurn(engine) if baseline else engine for _ in range(episodes)]
        return await asyncio.gather(*(run_agent_task(m, pure_env(i), None, turns, params=params,
                                                     max_format_errors=None) for i, m in enumerate(models)))

    try:
        eps = asyncio.run(main())
    finally:
        engine.close()
    assert all(e.steps == turns for e in eps), [e.status for e in eps]
    return engine.prefix.hit_rate, max(len(t.context_ids) for e in eps for t in e.turns)


# ---- compaction


def scripted_episode(policy: ContextPolicy, steps: int):
    agent = ScriptedAgent([call("probe", n=6, tag=f"s{i}") for i in range(steps)] + [call("submit", answer="7")])
    return asyncio.run(run_agent_task(agent, pure_env(0), None, steps + 1, policy, max_format_errors=None))


def compaction(steps: int, budget: int) -> dict:
    policy = ContextPolicy(budget_tokens=budget, compact_at=0.75, keep_turns=2)
    compact = scripted_episode(policy, steps)
    linear = scripted_episode(ContextPolicy(), steps)
    assert compact.status is EpisodeStatus.SOLVED and linear.status is EpisodeStatus.SOLVED
    room = {"act": 512, "summary": policy.summary_max_tokens}
    peak = max(len(t.context_ids) + room[t.kind] for t in compact.turns)
    assert peak <= budget, f"context {peak} over the {budget}-token budget"
    return {"compaction_ratio": round(compact.tokens_in / linear.tokens_in, 4),
            "compacted_tokens_in": compact.tokens_in, "linear_tokens_in": linear.tokens_in,
            "compacted_peak_context_plus_reply": peak, "linear_peak_context": max(len(t.context_ids) for t in linear.turns),
            "compactions": sum(t.kind == "summary" for t in compact.turns),
            "segments": len(compact.to_trajectory().segments())}


# ---- step overhead


class CPU:
    """CPU seconds of this thread spent inside the model and the tool (everything here runs on one thread)."""

    inside = 0.0


class TimedAgent(ScriptedAgent):
    async def agenerate(self, prompts, params):
        t = time.thread_time()
        try:
            return await super().agenerate(prompts, params)
        finally:
            CPU.inside += time.thread_time() - t


@tool(name="probe")
def timed_probe(n: int, tag: str = "x") -> str:
    """Report n numbered readings.

    Args:
        n: how many readings
        tag: a label
    """
    t = time.thread_time()
    out = readings(n, tag)
    CPU.inside += time.thread_time() - t
    return out


def timed_env(i: int) -> FunctionEnv:
    return FunctionEnv(f"t{i}", f"Task {i}: take readings, then submit 7.",
                       [timed_probe, BUILTIN["recall"], BUILTIN["submit"]], lambda a: a == "7", timeout_s=3600)


def step_overhead(episodes: int, steps: int) -> dict:
    """Per step: wall ms (what the runtime records) and CPU ms of this thread outside model and tool, p50 over
    episodes, for the runtime and for the bare loop. CPU time hardly depends on how busy the machine is."""
    wall, cpu, model_tool, bare_wall, bare_cpu = [], [], [], [], []

    async def ours(agent, i):
        CPU.inside = 0.0
        t = time.thread_time()
        ep = await run_agent_task(agent, timed_env(i), None, steps + 1, max_format_errors=None)
        return ep, time.thread_time() - t - CPU.inside

    async def bare(agent):
        CPU.inside = 0.0
        t = time.thread_time()
        overhead_wall = await bare_loop(agent, steps + 1)
        return overhead_wall, time.thread_time() - t - CPU.inside

    for i in range(episodes):  # interleaved, so background load hits both alike
        script = [call("probe", n=4, tag=f"e{i}s{k}") for k in range(steps)] + [call("submit", answer="7")]
        ep, c = asyncio.run(ours(TimedAgent(script), i))
        wall.append(ep.times.overhead_s / ep.steps * 1e3)
        cpu.append(c / ep.steps * 1e3)
        model_tool.append((ep.times.model_s + ep.times.tools_s) / ep.steps * 1e3)
        w, c = asyncio.run(bare(TimedAgent(script)))
        bare_wall.append(w)
        bare_cpu.append(c / (steps + 1) * 1e3)
    med = statistics.median
    # the headline is the CPU figure: it counts as overhead what the wall figure files under model and tool time
    # (the context copy handed to the engine, argument validation) and hardly depends on the machine's load
    return {"step_overhead_ms": round(med(cpu), 3), "step_overhead_p90_ms": round(sorted(cpu)[int(0.9 * len(cpu))], 3),
            "step_overhead_wall_ms": round(med(wall), 3), "bare_loop_overhead_ms": round(med(bare_wall), 3),
            "bare_loop_overhead_cpu_ms": round(med(bare_cpu), 3), "overhead_vs_bare": round(med(wall) / med(bare_wall), 3),
            "overhead_cpu_vs_bare": round(med(cpu) / med(bare_cpu), 3),
            "model_and_tool_ms_per_step": round(med(model_tool), 3)}


async def bare_loop(agent: ScriptedAgent, steps: int) -> float:
    """The same calls without the runtime: render, sample, parse, call, append. Returns overhead ms per step."""
    t0 = time.perf_counter()
    inside = 0.0
    ctx = TOK.encode(fmt.render_prefix([t.schema() for t in (probe, BUILTIN["recall"], BUILTIN["submit"])]))
    ctx += TOK.encode(fmt.render_task("Task: take readings, then submit 7."), add_bos=False)
    tools = {"probe": timed_probe, "submit": BUILTIN["submit"]}
    tctx = ToolContext(None)
    params = SamplingParams(temperature=0.0, max_tokens=512, stop=fmt.STOP)
    for _ in range(steps):
        t1 = time.perf_counter()
        (c,), = await agent.agenerate([list(ctx)], params)
        t2 = time.perf_counter()
        parsed = fmt.parse_call(c.text)
        assert parsed.call is not None
        t3 = time.perf_counter()
        r = await tools[parsed.call.name].run(tctx, parsed.call)
        t4 = time.perf_counter()
        inside += (t2 - t1) + (t4 - t3)
        ctx += c.token_ids + TOK.encode(fmt.render_observation(parsed.call.name, r.output), add_bos=False)
        if r.ends_episode:
            break
    return (time.perf_counter() - t0 - inside) / steps * 1e3


# ---- episode start


def episode_start(rounds: int, concurrent: int) -> dict:
    task = demo_tasks()[0]
    with Sandbox(Limits(wall_s=30, cpu_s=30, memory_mb=512, pids=64, disk_mb=64)) as sb:
        Session(sb).close()  # the fork-server is up

        async def one_start():
            env = ToolEnv(sb, task)
            t0 = time.perf_counter()
            await env.reset(None)
            dt = time.perf_counter() - t0
            await env.close()
            return dt * 1e3

        ours, base = [], []
        for _ in range(rounds):  # interleaved, so background load hits both alike
            ours.append(asyncio.run(one_start()))
            t0 = time.perf_counter()
            s = Session(sb, files=dict(task.files))
            base.append((time.perf_counter() - t0) * 1e3)
            s.close()

        async def many():
            tasks = [demo_tasks()[i % 3] for i in range(concurrent)]
            return await asyncio.gather(*(run_agent_task(oracle_agent(t.solution), t, sandbox=sb) for t in tasks))

        t0 = time.perf_counter()
        eps = asyncio.run(many())
        wall = time.perf_counter() - t0
    bad = [(e.task_id, e.status.value, e.error) for e in eps if e.status is not EpisodeStatus.SOLVED]
    return {"episode_start_ms": round(statistics.median(ours), 2),
            "session_ctor_with_files_ms": round(statistics.median(base), 2),
            "start_vs_ctor": round(statistics.median(ours) / statistics.median(base), 3),
            f"concurrent_{concurrent}_start_p50_ms": round(statistics.median(e.times.setup_s * 1e3 for e in eps), 2),
            f"concurrent_{concurrent}_solved": sum(e.status is EpisodeStatus.SOLVED for e in eps),
            f"concurrent_{concurrent}_errors": len(bad), f"concurrent_{concurrent}_wall_s": round(wall, 2),
            "concurrent_failures": bad[:3]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--budget", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--concurrent", type=int, default=64)
    ap.add_argument("--parts", default="prefix,compaction,overhead,start",
                    help="which figures to measure (comma-separated), e.g. to run them in separate processes")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    torch.set_num_threads(1)
    load0 = os.getloadavg()
    out: dict = {"cpus": os.cpu_count(), "load_avg_start": [round(x, 2) for x in load0]}

    if "prefix" in parts:
        prefix_part(args, out)
    if "compaction" in parts:
        comp = compaction(args.steps, args.budget)
        print(f"compaction over a {args.steps}-step episode at a {args.budget}-token budget: "
              f"{comp['compacted_tokens_in']} / {comp['linear_tokens_in']} context tokens = {comp['compaction_ratio']} "
              f"({comp['compactions']} compactions; peak context + reply {comp['compacted_peak_context_plus_reply']})")
        out.update(comp)
    if "overhead" in parts:
        overhead_part(out)
    if "start" in parts:
        start_part(args, out)
    out["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))


def prefix_part(args, out: dict) -> None:
    hit, peak = prefix_hit_rate(args.episodes, args.turns, baseline=False)
    base_hit, _ = prefix_hit_rate(args.episodes, args.turns, baseline=True)
    print(f"prefix hit rate over {args.episodes} x {args.turns}-turn transcripts: {hit:.3f} "
          f"(per-turn header baseline {base_hit:.3f}; {hit / max(base_hit, 1e-9):.1f}x); peak context {peak} tokens")
    out.update(agent_prefix_hit_rate=round(hit, 4), baseline_prefix_hit_rate=round(base_hit, 4),
               prefix_peak_context=peak, prefix_episodes=args.episodes, prefix_turns=args.turns)


def overhead_part(out: dict) -> None:
    r = step_overhead(episodes=30, steps=20)
    print(f"step overhead p50 {r['step_overhead_ms']} ms CPU, {r['step_overhead_wall_ms']} ms wall (bare loop "
          f"{r['bare_loop_overhead_cpu_ms']} ms CPU, {r['bare_loop_overhead_ms']} ms wall: {r['overhead_cpu_vs_bare']}x / "
          f"{r['overhead_vs_bare']}x); model + tool {r['model_and_tool_ms_per_step']} ms/step")
    out.update(r)


def start_part(args, out: dict) -> None:
    start = episode_start(args.rounds, args.concurrent)
    print(f"episode start p50 {start['episode_start_ms']} ms (Session(files=...) {start['session_ctor_with_files_ms']} ms); "
          f"{args.concurrent} concurrent episodes: {start[f'concurrent_{args.concurrent}_solved']} solved, "
          f"{start[f'concurrent_{args.concurrent}_errors']} not, start p50 "
          f"{start[f'concurrent_{args.concurrent}_start_p50_ms']} ms")
    out.update(start)


if __name__ == "__main__":
    main()
