"""Speculative decoding measured on a model posttrain trained, on the work it was trained for.

The model: the built-in agent base (`model.base.family = "lookup"`, what `posttrain quickstart --agent`
starts from; built once per machine by posttrain's own pre-training and cached, 13-57 minutes the first
time). The work: held-out `agent:lookup` episodes, whole ones, through the same rollouter that trains and
evaluates agents, one episode at a time (the latency-bound regime speculation is for). Its replies copy file
names and values out of the observations in its context (input-grounded), so prompt lookup has something
to find; nothing is hand-set.

Both sides run the same episodes with the same engine settings, one intra-op thread, warm (one untimed
episode first), interleaved round by round; the only difference is `SpecConfig` (prompt lookup, k tokens
proposed). Timed: the engine's own calls (`agenerate`), so the sandbox's tool executions (the same on both
sides) do not dilute the ratio; the episodes' wall time is reported beside it. Greedy: every episode must be
token-identical with and without speculation (exactness; the distribution at T > 0 is proven by
tests/engine/test_spec_decode.py). Sampled: the agent recipe's temperature.

    python benchmarks/spec_trained.py [--tasks 24] [--rounds 3] [--k 4]

Does not cover: a draft model (`SpecConfig("draft")`): no draft model is trained by posttrain yet for this
base; the copier figures of benchmarks/engine.py are a synthetic upper bound, not this.
Last line: one JSON object with `spec_trained_speedup` (sampled), `spec_trained_greedy_speedup`,
acceptance, tokens per target forward, identity of the greedy episodes, and the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


class TimedEngine:
    """`engine`, with the seconds spent inside its `agenerate` calls and the tokens they returned counted."""

    def __init__(self, engine) -> None:
        self.engine, self.seconds, self.tokens = engine, 0.0, 0

    def __getattr__(self, name):  # encode, tokenizer, policy_version, max_context, ...
        return getattr(self.engine, name)

    async def agenerate(self, prompts, params):
        t0 = time.perf_counter()
        out = await self.engine.agenerate(prompts, params)
        self.seconds += time.perf_counter() - t0
        self.tokens += sum(len(c.token_ids) for group in out for c in group)
        return out


def spec_trained(n_tasks: int = 24, rounds: int = 3, k: int = 4, seed: int = 0, cache_dir: str | None = None,
                 temperature: float | None = None, ngram_min: int = 1) -> dict:
    import torch

    from posttrain.config import load_config
    from posttrain.engine import LocalEngine, SpecConfig
    from posttrain.eval.episodes import aevaluate_agent
    from posttrain.models import load_model
    from posttrain.recipes.builtin import ensure_base
    from posttrain.recipes.quickstart import AGENT_OVERRIDES
    from posttrain.rl.build import build_domains
    from posttrain.sandbox.sandboxes import current_sandboxes
    from posttrain.types import SamplingParams

    torch.set_num_threads(1)
    sets = [*AGENT_OVERRIDES, f"model.base.seed={seed}"]
    if cache_dir:
        sets.append(f"model.base.cache_dir='{cache_dir}'")
    cfg = load_config(None, sets)
    t0 = time.perf_counter()
    build = ensure_base(cfg.model.base)
    print(f"agent base: {build.path} ({'cached' if build.cached else f'built in {time.perf_counter() - t0:.0f} s'}, "
          f"held-out {build.accuracy:.3f})", flush=True)
    model, tok = load_model(build.path)
    (domain,) = build_domains(cfg)  # the quickstart's agent domain, as training builds it
    spec_cfg = domain.agent
    tasks = domain.evaluation(n_tasks + 1, 0)
    warm, tasks = tasks[:1], tasks[1:]
    sandbox = current_sandboxes().workspaces
    temperature = cfg.sampling.temperature if temperature is None else temperature
    out: dict = {"spec_trained_model": f"agent lookup base, seed {seed}",
                 "spec_trained_params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
                 "spec_trained_tasks": len(tasks), "spec_trained_k": k, "spec_trained_ngram_min": ngram_min,
                 "spec_trained_temperature": temperature}
    for label, temp in (("greedy", 0.0), ("sampled", temperature)):
        params = SamplingParams(temperature=temp, max_tokens=spec_cfg.max_tokens, stop=domain.sampling.stop, seed=0)
        engines = {kind: LocalEngine(model, tok, speculative=SpecConfig("ngram", k=k, ngram_max=4, ngram_min=ngram_min)
                                     if kind == "spec" else None) for kind in ("plain", "spec")}
        rates: dict[str, list[float]] = {"plain": [], "spec": []}
        walls: dict[str, list[float]] = {"plain": [], "spec": []}
        episodes: dict[str, list] = {}
        for eng in engines.values():  # warm: kernels loaded, caches sized
            asyncio.run(aevaluate_agent(eng, warm, spec_cfg, sandbox, params=params, seed=0, max_concurrency=1))
        for _ in range(rounds):
            for kind, eng in engines.items():
                timed = TimedEngine(eng)
                t = time.perf_counter()
                ev = asyncio.run(aevaluate_agent(timed, tasks, spec_cfg, sandbox, params=params, seed=0,
                                                 max_concurrency=1))
                walls[kind].append(time.perf_counter() - t)
                rates[kind].append(timed.tokens / timed.seconds)
                episodes[kind] = [[t.completion.token_ids for t in ep.turns] for eps in ev.episodes for ep in eps]
                out[f"spec_trained_{label}_success_{kind}"] = round(ev.summary.pass_at[1].value, 3)
        m = engines["spec"].metrics()
        plain, spec = statistics.median(rates["plain"]), statistics.median(rates["spec"])
        key = "spec_trained_speedup" if label == "sampled" else "spec_trained_greedy_speedup"
        out.update({
            key: round(spec / plain, 3),
            f"spec_trained_{label}_plain_tok_s": round(plain, 1), f"spec_trained_{label}_tok_s": round(spec, 1),
            f"spec_trained_{label}_plain_tok_s_runs": [round(r, 1) for r in rates["plain"]],
            f"spec_trained_{label}_tok_s_runs": [round(r, 1) for r in rates["spec"]],
            f"spec_trained_{label}_episode_wall_ratio": round(statistics.median(walls["spec"]) /
                                                              statistics.median(walls["plain"]), 3),
            f"spec_trained_{label}_acceptance": round(m["spec_acceptance_rate"], 3),
            f"spec_trained_{label}_tokens_per_forward": round(m["tokens_per_forward"], 2),
            f"spec_trained_{label}_tokens_per_episode": round(sum(len(x) for ep in episodes["plain"] for x in ep)
                                                               / max(len(episodes["plain"]), 1), 1),
        })
        if temp == 0.0:
            out["spec_trained_greedy_identical"] = episodes["plain"] == episodes["spec"]
        print(f"{label} (T={temp}): plain {plain:.0f} tok/s, speculative {spec:.0f} tok/s: {spec / plain:.2f}x "
              f"(acceptance {m['spec_acceptance_rate']:.2f}, {m['tokens_per_forward']:.2f} tokens per forward)",
              flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--ngram-min", type=int, default=1, help="shortest suffix n-gram prompt lookup matches")
    ap.add_argument("--seed", type=int, default=0, help="which built-in agent base (its build seed)")
    ap.add_argument("--cache-dir", default=None, help="model.base.cache_dir (default: the built-in cache)")
    args = ap.parse_args()
    load_start = os.getloadavg()
    out = spec_trained(args.tasks, args.rounds, args.k, args.seed, args.cache_dir, ngram_min=args.ngram_min)
    print(json.dumps({**out, "load_start": load_start, "load_end": os.getloadavg(), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
