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
- p50 / p95 request latency in both server modes;
- `stream_ms_per_token_{16,128,512,2048}`: milliseconds per streamed token of one completion of that
  many tokens (ignore_eos, T=1) through `posttrain serve` on a small model with a 2176-token context
  (the stream's time less a 1-token stream's, over n - 1; shorter streams repeated to 2048 tokens in all);
  `stream_flatness` is the 2048-token figure over the 16-token one (1.0 = flat: streaming costs the same
  per token however long the output, issue 12 item 10).
  The same lengths are also measured on `LocalEngine.stream` directly, beside what re-decoding the
  whole output at every token (the old stream) would add per token at that length.
Each figure is the median of `--rounds` (>= 3) rounds; the variants are interleaved per round.

Run: ``nice -n 5 python benchmarks/serve.py [--rounds 3] [--stream-only]``. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx
import torch

from posttrain.engine.local import LocalEngine
from posttrain.engine.remote.openai_engine import OpenAIEngine
from posttrain.engine.serve.server import ServeConfig, ServerThread, create_app
from posttrain.models import CausalLM, ModelConfig, char_tokenizer
from posttrain.types import SamplingParams

NEW_TOKENS = 16
STREAM_LENGTHS = (16, 128, 512, 2048)


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


def build_long_engine(seed: int = 0) -> LocalEngine:
    """A small model whose context holds the longest stream (prompt + 2048 tokens); one layer of two heads,
    so that attending to 2048 keys (which a decode step must) adds little beside the per-token costs measured."""
    tok = char_tokenizer()
    cfg = ModelConfig(
        vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=96, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2176, tie_word_embeddings=True,
    )
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    return LocalEngine(model.eval(), tok, seed=seed, prefix_cache_tokens=0)


def stream_params(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=1.0, ignore_eos=True)


def sse_seconds(url: str, n: int) -> float:
    """One streamed completion of n tokens over HTTP, from sending the request to its last event."""
    body = {"model": "bench", "prompt": "12+34=", "max_tokens": n, "ignore_eos": True, "stream": True, "return_token_ids": True}
    tokens, start = 0, time.perf_counter()
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                tokens += len(json.loads(line.removeprefix("data: "))["choices"][0].get("token_ids") or [])
    assert tokens == n, f"streamed {tokens} tokens, asked for {n}"
    return time.perf_counter() - start


def sse_ms_per_token(url: str, n: int) -> float:
    """ms per streamed token over HTTP: (time of an n-token stream - time of a 1-token stream) / (n - 1), which
    cancels the request's fixed costs (and, unlike gaps between events, does not care how the client's
    reads group them). Short streams are repeated to 2048 tokens in all, so every length is timed as long."""
    reps = max(1, STREAM_LENGTHS[-1] // n)
    one = statistics.median(sse_seconds(url, 1) for _ in range(min(reps, 16)))
    each = sum(sse_seconds(url, n) for _ in range(reps)) / reps
    return 1000 * (each - one) / (n - 1)


def engine_ms_per_token(engine: LocalEngine, n: int) -> float:
    """The same on `LocalEngine.stream` in this process (no HTTP): the median gap between tokens (robust
    to the load spikes of a shared machine)."""
    times = [time.perf_counter() for d in engine.stream(["12+34="], stream_params(n)) if d.token_ids]
    assert len(times) == n
    return 1000 * statistics.median(b - a for a, b in zip(times, times[1:]))


def step_ms_per_token(engine: LocalEngine, n: int) -> float:
    """The same request not streamed (no text made until it ends): the median engine step, for reference."""
    engine.submit("12+34=", stream_params(n))
    gaps = []
    while engine.has_unfinished():
        start = time.perf_counter()
        engine.step()
        gaps.append(time.perf_counter() - start)
    return 1000 * statistics.median(gaps[1:])


def redecode_ms_per_token(engine: LocalEngine, n: int) -> float:
    """What the old stream added per token at this length: decoding the whole output so far, every token."""
    ids = engine.generate(["12+34="], stream_params(n))[0][0].token_ids
    start = time.perf_counter()
    for k in range(1, n + 1):
        engine.tokenizer.decode(ids[:k])
    return 1000 * (time.perf_counter() - start) / n


def stream_rounds(rounds: int) -> dict[str, float]:
    engine = build_long_engine()
    sse: dict[int, list[float]] = {n: [] for n in STREAM_LENGTHS}
    local: dict[int, list[float]] = {n: [] for n in STREAM_LENGTHS}
    redecode: dict[int, list[float]] = {n: [] for n in STREAM_LENGTHS}
    plain: dict[int, list[float]] = {n: [] for n in STREAM_LENGTHS}
    for r in range(rounds):
        for n in STREAM_LENGTHS:
            local[n].append(engine_ms_per_token(engine, n))
            plain[n].append(step_ms_per_token(engine, n))
            redecode[n].append(redecode_ms_per_token(engine, n))
        with ServerThread(create_app(engine, ServeConfig("bench"))) as server:
            sse_ms_per_token(server.url, 16)  # warm-up
            for n in STREAM_LENGTHS:
                sse[n].append(sse_ms_per_token(server.url, n))
        print(f"stream round {r}: "
              + ", ".join(f"{n} tokens {sse[n][-1]:.3f} ms/token (engine {local[n][-1]:.3f})" for n in STREAM_LENGTHS),
              flush=True)
    out: dict[str, float] = {}
    for n in STREAM_LENGTHS:
        out[f"stream_ms_per_token_{n}"] = statistics.median(sse[n])
        out[f"stream_engine_ms_per_token_{n}"] = statistics.median(local[n])
        out[f"redecode_ms_per_token_{n}"] = statistics.median(redecode[n])
        out[f"unstreamed_step_ms_{n}"] = statistics.median(plain[n])
        print(
            f"{n:>5} tokens: {out[f'stream_ms_per_token_{n}']:.3f} ms/token over SSE, "
            f"{out[f'stream_engine_ms_per_token_{n}']:.3f} on LocalEngine.stream "
            f"(median gap; an unstreamed step {out[f'unstreamed_step_ms_{n}']:.3f}); "
            f"re-decoding the whole output per token, as the old stream did, would add {out[f'redecode_ms_per_token_{n}']:.3f}",
            flush=True,
        )
    out["stream_flatness"] = out["stream_ms_per_token_2048"] / out["stream_ms_per_token_16"]
    out["stream_engine_flatness"] = out["stream_engine_ms_per_token_2048"] / out["stream_engine_ms_per_token_16"]
    return out


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
    ap.add_argument("--stream-only", action="store_true", help="only the streaming cost per token at 16..2048 tokens")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    streaming = stream_rounds(args.rounds)
    if args.stream_only:
        print(json.dumps({**{k: round(v, 4) for k, v in streaming.items()}, "rounds": args.rounds}))
        return
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
        **streaming,
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}))


if __name__ == "__main__":
    main()
