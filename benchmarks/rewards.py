"""Reward verifiers: what concurrency, caching and isolation buy or cost, each against a baseline in the same run.

  - judge: 64 responses graded by `LLMJudge` (concurrency 8) against a local fake OpenAI-compatible server
    that answers after --latency seconds, vs the same judge with concurrency 1 (one request at a time);
    and a second pass over the same responses (all cache hits);
  - rubric: a rubric of a judge part and a math part, whose parts run concurrently, vs scoring the same parts
    one after the other;
  - render: `svg_render` in its isolated worker process vs rendering in-process (`isolate=False`), per item;
  - math: `math` equivalence items per second on mixed right/wrong answers.

Each figure is the median of --runs runs. The last line is one JSON object with the headline ratios.

    nice -n 5 python benchmarks/rewards.py [--runs 3] [--latency 0.25]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from posttrain.rewards import make_verifier, score_sync
from posttrain.rewards.judge import LLMJudge
from posttrain.types import Task


def fake_server(latency: float) -> tuple[multiprocessing.Process, str]:
    """The fake judge runs in its own process: in this one, its threads would compete with the client for the GIL."""
    ready = multiprocessing.get_context("fork").Queue()
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(latency, ready), daemon=True)
    proc.start()
    return proc, f"http://127.0.0.1:{ready.get(timeout=30)}/v1"


def _serve(latency: float, ready) -> None:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(latency)
            data = json.dumps({"choices": [{"message": {"content": "Looks right.\nScore: 8/10"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.request_queue_size = 128
    ready.put(httpd.server_address[1])
    httpd.serve_forever(poll_interval=0.05)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_of(runs: int, fn) -> float:
    return statistics.median(timed(fn) for _ in range(runs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.25)
    ap.add_argument("--items", type=int, default=64)
    args = ap.parse_args()
    httpd, url = fake_server(args.latency)
    n = args.items
    tasks = [Task(id=f"t{i}", prompt=f"What is {i}/2?", answer=f"{i}/2") for i in range(n)]
    responses = [f"\\boxed{{{i / 2 if i % 3 else i + 1}}}" for i in range(n)]

    def judge(concurrency: int, salt: str) -> LLMJudge:  # a salt per run keeps the cache out of the timing
        return LLMJudge(base_url=url, model=f"fake-{salt}", concurrency=concurrency)

    counter = iter(range(10**6))
    seq = median_of(args.runs, lambda: score_sync(judge(1, f"s{next(counter)}"), tasks, responses))
    par = median_of(args.runs, lambda: score_sync(judge(8, f"p{next(counter)}"), tasks, responses))
    warm = judge(8, "warm")
    score_sync(warm, tasks, responses)
    cached = median_of(args.runs, lambda: score_sync(warm, tasks, responses))
    print(f"judge   {n} items, {args.latency * 1000:.0f} ms/request: concurrency 1 {seq:.3f} s, "
          f"concurrency 8 {par:.3f} s ({seq / par:.2f}x), cached {cached:.4f} s ({seq / cached:.0f}x)")

    math = make_verifier("math")
    math_s = median_of(args.runs, lambda: score_sync(math, tasks, responses))

    def rubric(salt: str):
        return make_verifier({"type": "rubric", "parts": [
            {"verifier": {"type": "judge", "base_url": url, "model": f"fake-r{salt}"}, "weight": 0.3, "role": "process"},
            {"verifier": "math", "weight": 0.7},
        ]})

    def parts_in_sequence() -> None:
        score_sync(judge(8, f"q{next(counter)}"), tasks, responses)
        score_sync(math, tasks, responses)

    seq_parts = median_of(args.runs, parts_in_sequence)
    together = median_of(args.runs, lambda: score_sync(rubric(str(next(counter))), tasks, responses))
    print(f"rubric  judge + math parts: in sequence {seq_parts:.3f} s, rubric (concurrent parts) {together:.3f} s "
          f"({seq_parts / together:.2f}x)")
    print(f"math    {n / math_s:.0f} items/s ({math_s / n * 1000:.2f} ms/item)")

    svg = ("<svg xmlns='http://www.w3.org/2000/svg' width='100' height='100'><rect x='{x}' y='20' width='60' "
           "height='60'/><circle cx='50' cy='50' r='15' fill='red'/></svg>")
    draw_tasks = [Task(id=f"d{i}", prompt="draw", answer=svg.format(x=20)) for i in range(32)]
    drawings = [svg.format(x=20 + i % 8) for i in range(32)]
    isolated = make_verifier({"type": "svg_render", "size": 128})
    inline = make_verifier({"type": "svg_render", "size": 128, "isolate": False})
    score_sync(isolated, draw_tasks[:1], drawings[:1])  # start the worker, render the target
    score_sync(inline, draw_tasks[:1], drawings[:1])
    iso_s = median_of(args.runs, lambda: score_sync(isolated, draw_tasks, drawings)) / len(drawings)
    inl_s = median_of(args.runs, lambda: score_sync(inline, draw_tasks, drawings)) / len(drawings)
    print(f"render  128x128 SSIM reward: isolated worker {iso_s * 1000:.2f} ms/item, in-process {inl_s * 1000:.2f} ms/item "
          f"(isolation costs {iso_s / inl_s:.2f}x)")
    isolated.close()
    httpd.terminate()
    print(json.dumps({
        "judge_concurrency_speedup": round(seq / par, 2),
        "judge_cache_speedup": round(seq / cached, 1),
        "rubric_concurrent_parts_speedup": round(seq_parts / together, 2),
        "math_items_per_s": round(n / math_s, 1),
        "render_isolated_ms": round(iso_s * 1000, 2),
        "render_isolation_overhead": round(iso_s / inl_s, 2),
    }))


if __name__ == "__main__":
    main()
