"""`posttrain serve` throughput with concurrent clients, as ratios measured in one run.

Same model (random weights, the built-in model's shape: ~1M parameters), same requests:
- `batching_speedup`: output tokens/s of 16 concurrent clients (32 requests, one prompt
  each, n=1, 16 new tokens, T=1) when the server runs them in one continuous batch
  (`--max-concurrency 64`) against the same server taking them one at a time
  (`--max-concurrency 1`);
- `ttft_fraction`: time to the first streamed chunk of a 64-token completion divided by the
  time to its last (live streaming makes it small; a buffered stream would be ~1);
- `http_efficiency`: output tokens/s of a GRPO-shaped batch (16 prompts x n=8, 16 new tokens)
  sent through `OpenAIEngine` over HTTP, divided by the same batch on `LocalEngine` directly
  (1.0 = the HTTP path costs nothing);
- p50 / p95 request latency in both server modes.
Each figure is the median of `--rounds` (>= 3) rounds; the variants are interleaved per round.

Run: ``nice -n 5 python benchmarks/serve.py [--rounds 3]``. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from posttrain.engine.local import LocalEngine
from posttrain.engine.remote.openai_engine import OpenAIEngine
from posttrain.engine.serve.server import ServeConfig, ServerThread, create_app
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.types import SamplingParams

NEW_TOKENS = 16


def build_engine(seed: int = 0) -> LocalEngine:
    tok = char_tokenizer()
    cfg = ModelConfig(
        vocab_size=tok.vocab_size, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128, tie_word_embeddings=True,
    )
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    # no cross-request prefix cache: rounds repeat their prompts, and the figures are about serving
    return LocalEngine(model.eval(), tok, seed=seed, prefix_cache_tokens=0)


def prompts(k: int) -> list[str]:
    return [f"{(37 * i) % 100}+{(11 * i) % 100}=" for i in range(k)]


def clients_round(engine: LocalEngine, max_concurrency: int, requests: int, clients: int) -> dict[str, float]:
    app = create_app(engine, ServeConfig("bench", max_concurrency=max_concurrency))
    with ServerThread(app) as server:
        client = OpenAIEngine(server.url + "/v1", "bench", max_concurrency=clients)
        client.generate(prompts(4), SamplingParams(max_tokens=4))  # warm-up
        start = time.perf_counter()
        before = client.usage.completion_tokens
        lat0 = len(client.usage.latencies_s)
        client.generate(prompts(requests), SamplingParams(max_tokens=NEW_TOKENS, temperature=1.0))
        seconds = time.perf_counter() - start
        lat = sorted(client.usage.latencies_s[lat0:])
        calls = app.state.service.batcher.stats.engine_calls
        return {
            "tok_s": (client.usage.completion_tokens - before) / seconds,
            "p50_s": lat[len(lat) // 2],
            "p95_s": lat[int(0.95 * (len(lat) - 1))],
            "engine_calls": calls,
        }


def grpo_round(engine: LocalEngine) -> tuple[float, float]:
    params = SamplingParams(n=8, max_tokens=NEW_TOKENS, temperature=1.0)
    batch = prompts(16)
    engine.generate(prompts(2), SamplingParams(max_tokens=4))  # warm-up, as the HTTP arm gets
    start = time.perf_counter()
    groups = engine.generate(batch, params)
    local = sum(len(c.token_ids) for g in groups for c in g) / (time.perf_counter() - start)
    with ServerThread(create_app(engine, ServeConfig("bench"))) as server:
        client = OpenAIEngine(server.url + "/v1", "bench", max_concurrency=16)
        client.generate(prompts(2), SamplingParams(max_tokens=4))  # warm-up
        start = time.perf_counter()
        groups = client.generate(batch, params)
        remote = sum(len(c.token_ids) for g in groups for c in g) / (time.perf_counter() - start)
    return local, remote


def ttft_round(engine: LocalEngine) -> float:
    import httpx

    with ServerThread(create_app(engine, ServeConfig("bench"))) as server:
        body = {"model": "bench", "prompt": "12+34=", "max_tokens": 64, "ignore_eos": True, "stream": True}
        httpx.post(server.url + "/v1/completions", json={**body, "stream": False, "max_tokens": 4}, timeout=60)  # warm-up
        start, first = time.perf_counter(), None
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and first is None:
                    first = time.perf_counter() - start
        return first / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 avoids OpenMP spinning on a shared machine)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    engine = build_engine()
    batched, serial, local, remote, ttft = [], [], [], [], []
    for r in range(args.rounds):
        batched.append(clients_round(engine, 64, args.requests, args.clients))
        serial.append(clients_round(engine, 1, args.requests, args.clients))
        lo, re = grpo_round(engine)
        local.append(lo)
        remote.append(re)
        ttft.append(ttft_round(engine))
        print(
            f"round {r}: batched {batched[-1]['tok_s']:.0f} tok/s ({batched[-1]['engine_calls']} engine calls), "
            f"one-at-a-time {serial[-1]['tok_s']:.0f} tok/s ({serial[-1]['engine_calls']} calls); "
            f"GRPO batch local {lo:.0f} tok/s, over HTTP {re:.0f} tok/s; first chunk at {ttft[-1]:.1%} of a stream",
            flush=True,
        )

    def med(rows, key):
        return statistics.median(row[key] for row in rows)

    result = {
        "batching_speedup": med(batched, "tok_s") / med(serial, "tok_s"),
        "http_efficiency": statistics.median(remote) / statistics.median(local),
        "ttft_fraction": statistics.median(ttft),
        "batched_tok_s": med(batched, "tok_s"),
        "one_at_a_time_tok_s": med(serial, "tok_s"),
        "batched_p50_s": med(batched, "p50_s"),
        "batched_p95_s": med(batched, "p95_s"),
        "one_at_a_time_p50_s": med(serial, "p50_s"),
        "one_at_a_time_p95_s": med(serial, "p95_s"),
        "grpo_local_tok_s": statistics.median(local),
        "grpo_http_tok_s": statistics.median(remote),
        "clients": args.clients,
        "requests": args.requests,
        "new_tokens": NEW_TOKENS,
        "rounds": args.rounds,
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}))


if __name__ == "__main__":
    main()
