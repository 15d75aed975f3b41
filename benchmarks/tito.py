"""Token in, token out over many `agent:lookup` episodes, cheaply: `tito_mismatches` through the real rollouter.

Every episode runs through `AgentRollouter` in the sandbox with a recording engine (`tests/_harness/tito.py`: `RecordingEngine`)
and is checked by `tito_mismatch` against what the engine was given and sampled. Three kinds of episodes:
- `reading`: a scripted agent that reads the chain (follows its key's line in each file, submits the value, and
  slips now and then: a wrong file, a malformed reply), sampling one character per token over a tokenizer with
  merged tokens (`models.tokenizer.merging_tokenizer`), so the ids it samples are never the text's canonical
  encoding and a runtime that re-encoded history would change them. Under the domain's linear context policy
  (one segment per episode asserted) and under compaction (every segment break must be an announced rewrite).
- `model`: the built-in model (random weights, or `--model DIR`), sampled at temperature 1, linear policy.
- the plant: every multi-turn `reading` episode under the linear policy again, with turn 1's context holding turn
  0's sampled text re-encoded (merged ids) and no rewrite announced, as the engine's own record says it was
  given; the check must report each one (`planted_caught` = `planted`).

    python benchmarks/tito.py                        # 1,024 reading + 256 compaction + 128 model episodes
    python benchmarks/tito.py --reading 2048 --model-episodes 0

Last line, one JSON object: `tito_mismatches` and `tito_episodes` (all kinds), per kind, `planted`,
`planted_caught`, episodes with several segments, seconds and the load.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import os
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))  # the shared test harnesses (`_harness`)

from posttrain.agent import format as fmt  # noqa: E402
from posttrain.engine.mock import MockEngine  # noqa: E402
from posttrain.types import Completion, FinishReason, SamplingParams  # noqa: E402

KEY = re.compile(r"Find the value of (\w+)\.")


class ReadingAgent(MockEngine):
    """Follows its key through the files it is shown; samples one character per token (never the canonical ids)."""

    def __init__(self, tokenizer, seed: int, slip: float) -> None:
        self.rng, self.slip = random.Random(seed), slip
        super().__init__(self.respond, tokenizer=tokenizer, max_concurrency=64)

    def respond(self, prompt) -> str:
        text = self.tokenizer.decode(prompt)
        if self.rng.random() < self.slip:
            # a malformed reply (a format-error observation follows), or a file that does not exist
            return self.rng.choice(['<tool_call>{"name": "read"', fmt.render_call(_call("read", path="zz"))])
        key = KEY.findall(text)[-1]
        seen = text.rsplit('<tool_response name="read">', 1)
        if len(seen) == 2:
            for line in seen[1].split("</tool_response>")[0].splitlines():
                if line.startswith(f"{key} -> "):
                    return fmt.render_call(_call("read", path=line.split(" -> ")[1]))
                if line.startswith(f"{key} = "):
                    return fmt.render_call(_call("submit", answer=line.split(" = ")[1]))
        return fmt.render_call(_call("read", path="start"))

    def _completion(self, prompt, params: SamplingParams) -> Completion:
        text = self._text(prompt)
        ids = [self.tokenizer.backend.token_to_id(ch) for ch in text][: params.max_tokens]
        cut = text.find(fmt.CALL_CLOSE)
        if cut >= 0:  # the stop string ends it, its tokens kept (as the engine keeps them)
            ids, text = ids[: cut + len(fmt.CALL_CLOSE)], text[:cut]
        return Completion(ids, text, [-0.5] * len(ids), FinishReason.STOP, self.policy_version)


def _call(name: str, **arguments: object):
    from posttrain.agent.episode import ToolCall

    return ToolCall(name, dict(arguments))


def plant(episode, calls, tokenizer):
    """A copy of `episode` and of the engine's record in which turn 1 onwards saw turn 0's sampled text re-encoded
    (merged ids), with no rewrite announced; None when the episode has one turn or nothing merges."""
    from _harness.tito import Call

    if len(episode.turns) < 2:
        return None
    ep = copy.deepcopy(episode)
    t0 = ep.turns[0]
    merged = tokenizer.encode(tokenizer.decode(t0.completion.token_ids), add_bos=False)
    if merged == t0.completion.token_ids:
        return None
    record = dict(calls)
    ctx = t0.context_ids + merged + t0.observation_ids
    for old, new in zip(episode.turns[1:], ep.turns[1:]):
        new.context_ids = ctx
        was = calls[id(old.completion)]
        record[id(new.completion)] = Call(tuple(ctx), was.sampled, was.logprobs)
        ctx = ctx + new.completion.token_ids + new.observation_ids
    record[id(t0.completion)] = calls[id(episode.turns[0].completion)]
    return ep, record


def run_kind(name, engine, spec, tasks, n, sandbox, params, tokenizer=None, planting=False) -> dict:
    from _harness.tito import RecordingEngine, tito_mismatch
    from posttrain.agent.rollouter import AgentRollouter

    rec = RecordingEngine(engine)
    rollouter = AgentRollouter(rec, sandbox, spec, params, seed=0)
    rewrites = spec.policy.rewrites_history
    out = {"episodes": 0, "mismatches": 0, "first": None, "multi_segment": 0, "turns": 0, "planted": 0,
           "planted_caught": 0, "solved": 0}
    t0 = time.perf_counter()
    for start in range(0, len(tasks), 16):
        groups = asyncio.run(rollouter.run(tasks[start:start + 16], n))
        for g in groups:
            for ep in g.episodes:
                why = tito_mismatch(ep, rec.calls, rewrites)
                out["episodes"] += 1
                out["turns"] += len(ep.turns)
                out["solved"] += ep.passed
                out["multi_segment"] += len(ep.to_trajectory().segments()) > 1
                if why is not None:
                    out["mismatches"] += 1
                    out["first"] = out["first"] or why
                if planting and (p := plant(ep, rec.calls, tokenizer)) is not None:
                    out["planted"] += 1
                    out["planted_caught"] += tito_mismatch(p[0], p[1], rewrites) is not None
        rec.calls.clear()  # completions of checked episodes may be freed: their ids must not be looked up again
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"{name}: {out['mismatches']}/{out['episodes']} mismatches, {out['turns']} turns, {out['solved']} solved, "
          f"{out['multi_segment']} with several segments, planted {out['planted_caught']}/{out['planted']} caught, "
          f"{out['seconds']}s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reading", type=int, default=1024, help="reading-agent episodes, linear policy (8 per task)")
    ap.add_argument("--compaction", type=int, default=256, help="reading-agent episodes under compaction")
    ap.add_argument("--model-episodes", type=int, default=128, help="built-in model episodes")
    ap.add_argument("--model", default=None, help="a model directory (default: the built-in model, random weights)")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--slip", type=float, default=0.1, help="share of the reading agent's replies that go wrong")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    from posttrain.agent.context import ContextPolicy
    from posttrain.agent.lookup import SPEC, LookupSource
    from posttrain.models.tokenizer import merging_tokenizer
    from posttrain.sandbox import Sandbox

    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    source = LookupSource()
    n = 8
    spec = dataclasses.replace(SPEC, max_steps=args.max_steps, max_format_errors=None)
    params = SamplingParams(temperature=1.0, max_tokens=SPEC.max_tokens, stop=(fmt.CALL_CLOSE,))
    tok = merging_tokenizer()
    kinds = {}
    sandbox = Sandbox()
    try:
        if args.reading:
            tasks = source.take(args.reading // n, "train", seed=11)
            kinds["reading"] = run_kind("reading", ReadingAgent(tok, 0, args.slip), spec, tasks, n, sandbox, params,
                                        tok, planting=True)
        if args.compaction:
            policy = ContextPolicy(budget_tokens=520, compact_at=0.6, compact_jitter=0.1, summarizer="extractive",
                                   summary_max_chars=120)
            tasks = source.take(args.compaction // n, "train", seed=12)
            kinds["compaction"] = run_kind("compaction", ReadingAgent(tok, 1, args.slip),
                                           dataclasses.replace(spec, policy=policy, max_steps=args.max_steps + 2),
                                           tasks, n, sandbox, params)
        if args.model_episodes:
            engine = built_in_engine(args.model)
            tasks = source.take(args.model_episodes // n, "train", seed=13)
            try:
                kinds["model"] = run_kind("model", engine, spec, tasks, n, sandbox, params)
            finally:
                engine.close()
    finally:
        sandbox.close()
    total = {k: sum(v[k] for v in kinds.values()) for k in ("episodes", "mismatches", "planted", "planted_caught")}
    print(json.dumps({"tito_mismatches": total["mismatches"], "tito_episodes": total["episodes"],
                      "planted": total["planted"], "planted_caught": total["planted_caught"], "kinds": kinds,
                      "max_steps": args.max_steps, "threads": args.threads, "load_start": load_start,
                      "load_end": os.getloadavg()}))


def built_in_engine(path: str | None):
    """The local engine over `path`, or over the built-in model's shape with random weights (seed 0)."""
    import torch

    from posttrain.config import BaseModelConfig
    from posttrain.engine.build import build_engine
    from posttrain.models.config import ModelConfig
    from posttrain.models.io import load_model
    from posttrain.models.llama import CausalLM
    from posttrain.models.tokenizer import char_tokenizer
    from posttrain.recipes.builtin import AGENT_CONTEXT

    if path is not None:
        model, tokenizer = load_model(path)
        return build_engine(None, model, tokenizer)
    b, tokenizer = BaseModelConfig(family="lookup"), char_tokenizer()
    model = CausalLM(ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=b.hidden_size,
                                 intermediate_size=b.intermediate_size, num_hidden_layers=b.num_layers,
                                 num_attention_heads=b.num_heads, num_key_value_heads=b.num_heads,
                                 max_position_embeddings=AGENT_CONTEXT, tie_word_embeddings=True))
    model.init_weights(torch.Generator().manual_seed(0))
    return build_engine(None, model, tokenizer)


if __name__ == "__main__":
    main()
