"""Long context: the `docs:reports` domain's grader, the engine's prefill and decode at growing lengths, and the
learner's memory with activation checkpointing. Last line: one JSON object.

Parts (each can be run alone with `--parts`):
- domain (cheap, quality figures): `--tasks` held-out tasks at each of three report lengths (`--lengths`, characters),
  every question kind, distractors at level 3; each task's gold response through the suite's own verifier
  (`docs_gold_frac`, must be 1.0) and the empty response (`docs_null_passed`, must be 0), in the single-turn form
  and the agent form's verifier specs; a flag-everything answer (`P2`) on the `none` class
  (`docs_flagger_none_passed`, must be 0); the oracle's tool calls through real agent episodes in the sandbox on a
  sample (`docs_agent_oracle_frac`); the time to generate a report of over 1M characters.
- engine (speed, indicative on a shared machine): benchmarks/engine.py's 10M random Llama (`fast.random_model`),
  one thread, fp32, prefix cache off; one prompt of L random tokens, then `--decode` sampled tokens (T=1), streamed:
  prefill seconds = time to the first token, decode seconds/token = the rest over the tokens after the first, both
  in the process's CPU time (one thread: its compute; on a machine shared by other jobs wall time swung 2x between
  runs of the same length), wall time beside them. Full
  attention (the engine's context raised to L) and a sliding window with 4 sinks (`--window`). Each (mode, L) runs
  in its own process, whose peak RSS (VmHWM) is reported with its growth over the process before the request.
  `prefill_scaling_window` = (prefill s/token at the longest windowed length) / (at 8k); the same for full
  attention beside it (`prefill_scaling_full`): the baseline measured in the same run. Each forward's CPU time
  is also recorded (the model's `forward` wrapped in the child), so the cost of the tokens at a position is read
  off one process: `prefill_marginal_scaling_window` = CPU us/token of the chunks in the last 4,096 tokens
  before L ÷ those before 8,192, both in the longest windowed run (the whole-prompt average at 8k includes the
  window's first 4k tokens, whose chunks attend over fewer keys: benchmarks/RESULTS.md, second pass).
- learner: one `Learner.update` (GRPO loss, one row of `--seq` tokens, the second half sampled) on benchmarks/
  engine.py's 1M shape, with and without `rl.activation_checkpointing`, each in its own process; peak RSS growth
  during the update (VmHWM reset through /proc/self/clear_refs just before it) and the gradients compared
  (`learner_ckpt_mem_ratio`, `learner_grad_max_rel_diff`). Children run with `MALLOC_MMAP_THRESHOLD_=65536`, so
  resident memory follows the live tensors (with glibc's growing default, freed activations stayed resident: a
  first run at 8k measured 608 vs 360 MB, 0.59, where the live tensors differ far more).
- llamacpp (`--parts llamacpp`, needs `pip install 'posttrain[llamacpp]'`, a 10-25 minute build of llama.cpp):
  the prefill of the same `--llamacpp-length` prompt on the same 10M weights (GGUF f32) in llama.cpp, one thread,
  f32 KV cache, flash attention off, beside the engine's full-attention and windowed prefill of that prompt, each
  in its own process and in CPU seconds: `prefill_vs_llamacpp_32k` = posttrain's tokens/s ÷ llama.cpp's.
- base (`--parts base`): the `docs:reports` base of the RL recipe (`quickstart.DOCS_OVERRIDES`, `examples/docs.toml`:
  the easy level, one-figure lookups in the compact agent form) for each `--base-seeds`, through `ensure_base` (cached
  per machine); its held-out episode success at every band check, steps and seconds.
- rl (`--parts rl`): per `--rl-seeds`, the recipe's run (`run_quickstart`: base, GRPO over whole episodes, `best/` on
  the selection half) and `docs_rl_gain` (greedy held-out episode success, base -> `best/`, reporting half, points;
  `--select` measures the selection half, for recipe trials). Then, for the base and `best/` (`--figures 1`): agent
  greedy success at each `--curve-lengths` (the same questions, reports padded; the first length fits the
  8,192-position context, the last is 100x it) with `diagnose` (searched the oracle's words, a hit holding the answer,
  a figure of the hit submitted), the single-turn form with the report cut to the context beside it (first and last
  length), `retrieval_hold` (accuracy at the last length ÷ at the first, both forms) and the `none` class's
  `false_positive_rate` (audit questions on consistent reports answered with anything but none).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve()


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


# ---- domain


def domain(args) -> dict:
    from posttrain.agent import run_agent_task
    from posttrain.agent.reports import SPEC, agent_task_of, oracle_calls
    from posttrain.agent.scripted import ScriptedAgent, call
    from posttrain.rewards.base import safe_verify
    from posttrain.sandbox import Limits, Sandbox
    from posttrain.tasks.domains import load_domain
    from posttrain.tasks.reports import ReportOptions, generate_report
    from posttrain.tasks.validate import validate_suite

    total = checks = passed = null_passed = flagger = none_tasks = 0
    kinds: collections.Counter = collections.Counter()
    chars: dict[int, float] = {}
    per_length: dict[str, dict] = {}
    oracle_ok = oracle_n = 0
    sandbox = Sandbox(Limits(wall_s=20, cpu_s=20, memory_mb=512, pids=64, output_bytes=1 << 20, disk_mb=128))
    try:
        for length in args.lengths:
            for form in ("prompt", "agent"):
                d = load_domain("docs:reports", form=form, length=length, distractors=3, limit=args.tasks)
                suite = d.suite()
                report = validate_suite(suite)
                checks += report.total
                total += report.total if form == "prompt" else 0
                passed += report.passed
                null_passed += len(report.null_failures)  # passed, or not judged: both count against the suite
                if form == "prompt":
                    kinds.update(t.meta["kind"] for t in suite.tasks)
                    chars[length] = sum(t.meta["chars"] for t in suite.tasks) / len(suite.tasks)
                    for t in suite.tasks:
                        if t.meta["kind"] == "none":
                            none_tasks += 1
                            flagger += safe_verify(d.verifier, t, "<answer>P2</answer>").passed
                else:
                    sample = suite.tasks[: args.episodes] if length <= 100_000 else []
                    for t in sample:
                        ep = asyncio.run(run_agent_task(ScriptedAgent(oracle_calls(t)), agent_task_of(t), None,
                                                        SPEC.max_steps, sandbox=sandbox, system=SPEC.system))
                        noop = asyncio.run(run_agent_task(ScriptedAgent([call("submit", answer="")]), agent_task_of(t),
                                                          None, 2, sandbox=sandbox, system=SPEC.system))
                        oracle_n += 1
                        oracle_ok += ep.passed and not noop.passed
                per_length[f"{form}_{length}"] = {"tasks": report.total, "gold_passed": report.passed,
                                                  "null_failures": len(report.null_failures)}
                print(f"domain {form} length {length}: {report.passed}/{report.total} gold full marks, "
                      f"{len(report.null_failures)} null passes/unjudged ({report.seconds:.1f} s)", flush=True)
    finally:
        sandbox.close()
    t0 = time.perf_counter()
    big = generate_report(0, ReportOptions(length=1_000_000, distractors=3))
    gen_s = time.perf_counter() - t0
    out = {
        "docs_tasks": total, "docs_checks": checks, "docs_gold_frac": passed / checks, "docs_null_passed": null_passed,
        "docs_kinds": dict(kinds), "docs_mean_chars": {str(k): round(v) for k, v in chars.items()},
        "docs_flagger_none_passed": flagger, "docs_none_tasks": none_tasks,
        "docs_agent_oracle_frac": oracle_ok / oracle_n if oracle_n else None, "docs_agent_oracle_episodes": oracle_n,
        "docs_1m_report_chars": len(big.text), "docs_1m_report_gen_s": round(gen_s, 3), "docs_per_length": per_length,
    }
    print(f"domain: gold {passed}/{checks} (both forms), null passes {null_passed}, flagger on none {flagger}/{none_tasks}, "
          f"agent oracle {oracle_ok}/{oracle_n}, kinds {dict(kinds)}", flush=True)
    return out


# ---- engine


def engine_child(mode: str, length: int, decode: int, window: int, progress: str = "") -> dict:
    from fast import random_model

    from posttrain.engine import LocalEngine, WindowSpec
    from posttrain.models import char_tokenizer
    from posttrain.types import SamplingParams

    torch.set_num_threads(1)
    model, tok = random_model("10m"), char_tokenizer()
    spec = WindowSpec(window=window, sinks=4) if mode == "window" else None
    engine = LocalEngine(model, tok, prefix_cache_tokens=0, sliding_window=spec,
                         max_context=None if spec else length + decode + 2)
    rng = random.Random(length)
    warm = [rng.randrange(3, 100) for _ in range(64)]
    engine.generate([warm], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    prompt = [rng.randrange(3, 100) for _ in range(length)]
    calls: list[tuple[int, float]] = []  # (tokens, CPU s) of each forward: the prefill's chunks, then decode steps
    forward = model.forward
    # each forward's record also goes to a file as it happens: a run cut short by the time limit still tells
    # the cost of the tokens at the positions it reached
    sink = open(progress, "a", buffering=1) if progress else None

    def timed(*a, **k):
        c = time.process_time()
        out = forward(*a, **k)
        calls.append((int((a[0] if a else k["input_ids"]).shape[1]), time.process_time() - c))
        if sink is not None:
            sink.write(f"{mode} {length} {calls[-1][0]} {calls[-1][1]:.4f}\n")
        return out

    model.forward = timed  # instance attribute: the engine calls the module, which calls this
    base_kb = _status_kb("VmRSS")
    _reset_peak()
    wall, cpu = [], []
    w0, c0 = time.perf_counter(), time.process_time()
    # sampled, not greedy: a lone greedy stream decodes 16 tokens per C call (`ModelRunner.greedy_run`), whose deltas
    # arrive together, so per-token times could not be read off the stream
    for _ in engine.stream([prompt], SamplingParams(temperature=1.0, seed=0, max_tokens=decode, ignore_eos=True)):
        wall.append(time.perf_counter())
        cpu.append(time.process_time())
    peak_kb = _status_kb("VmHWM")
    n = max(1, len(cpu) - 1)
    return {"mode": mode, "length": length, "prefill_s": wall[0] - w0, "prefill_cpu_s": cpu[0] - c0,
            "prefill_cpu_s_per_token": (cpu[0] - c0) / length, "decode_cpu_s_per_token": (cpu[-1] - cpu[0]) / n,
            "decode_s_per_token": (wall[-1] - wall[0]) / n, "tokens": len(cpu), "peak_rss_mb": peak_kb / 1024,
            "rss_growth_mb": (peak_kb - base_kb) / 1024,
            "marginal_us_per_token": {str(at): marginal(calls, length, at) for at in (8192, length) if at <= length}}


def marginal(calls: list[tuple[int, float]], length: int, at: int, span: int = 4096) -> float | None:
    """CPU us per prompt token of the prefill forwards whose tokens end in (at - span, at]: the cost of the
    tokens at that position, read in one process (the whole-prompt average at 8k also holds the window's
    first 4k tokens, which attend over fewer keys)."""
    done, tokens, seconds = 0, 0, 0.0
    for t, s in calls:
        if done >= length:
            break  # decode steps
        done += t
        if at - span < done <= at:
            tokens, seconds = tokens + t, seconds + s
    return 1e6 * seconds / tokens if tokens else None


def run_child(argv: list[str], timeout: float) -> dict | None:
    cmd = [sys.executable, str(HERE), *argv]
    # a fixed mmap threshold: glibc then returns every large freed block at once, so resident memory follows the
    # live tensors (its default threshold grows after the first frees, and freed activations stay resident)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"  {' '.join(argv)}: over {timeout:.0f} s, not measured", flush=True)
        return None
    if r.returncode != 0:
        print(f"  {' '.join(argv)} failed: {r.stderr[-800:]}", flush=True)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def engine(args) -> dict:
    rows = []
    for mode, lengths in (("window", args.window_lengths), ("full", args.full_lengths)):
        for length in lengths:
            got = run_child(["--child", "engine", "--mode", mode, "--length", str(length), "--decode", str(args.decode),
                             "--window", str(args.window), "--progress", args.progress], args.child_timeout)
            if got is None:
                continue
            rows.append(got)
            print(f"  marginal CPU us/token (forwards ending in the 4,096 tokens before): {got['marginal_us_per_token']}")
            print(f"engine {mode:6s} L={length:7d}: prefill {got['prefill_cpu_s']:8.2f} CPU s "
                  f"({1e6 * got['prefill_cpu_s_per_token']:7.1f} us/token; wall {got['prefill_s']:.2f} s), decode "
                  f"{1e3 * got['decode_cpu_s_per_token']:7.2f} CPU ms/token (wall {1e3 * got['decode_s_per_token']:.2f}),"
                  f" peak RSS {got['peak_rss_mb']:7.0f} MB (+{got['rss_growth_mb']:.0f})", flush=True)

    def per_token(mode: str, length: int) -> float | None:
        return next((r["prefill_cpu_s_per_token"] for r in rows if r["mode"] == mode and r["length"] == length), None)

    out: dict = {"engine_rows": rows}
    for mode in ("window", "full"):
        measured = sorted(r["length"] for r in rows if r["mode"] == mode)
        at8k = per_token(mode, 8192)
        if measured and at8k:
            longest = measured[-1]
            out[f"prefill_scaling_{mode}"] = per_token(mode, longest) / at8k
            out[f"prefill_scaling_{mode}_at"] = longest
    # the same ratio from the cost of the tokens at each position, both read in the longest windowed process
    longest = max((r for r in rows if r["mode"] == "window"), key=lambda r: r["length"], default=None)
    if longest is not None and longest["length"] > 8192:
        m = longest["marginal_us_per_token"]
        if m.get("8192") and m.get(str(longest["length"])):
            out["prefill_marginal_scaling_window"] = m[str(longest["length"])] / m["8192"]
    r128 = next((r for r in rows if r["length"] >= 131072), None)
    out["prefill_128k_s"] = r128["prefill_cpu_s"] if r128 else None
    out["prefill_128k_peak_rss_mb"] = r128["peak_rss_mb"] if r128 else None
    return out


# ---- llama.cpp's prefill on the same weights


def llamacpp_child(length: int, directory: str) -> dict:
    """llama.cpp's prefill of the engine child's full-attention prompt of `length` tokens, on the same 10M weights
    (GGUF f32), one thread, f32 KV cache, flash attention off (llama.cpp's f32 graph: benchmarks/llamacpp.py
    checks its greedy tokens and logits against posttrain's). The prompt goes in as `llama_decode` calls of
    n_batch tokens (llama.cpp splits each into its n_ubatch); CPU time of this process (one thread)."""
    from fast import random_model
    from llamacpp import LlamaCpp, quiet_llama_cpp

    from posttrain.models import char_tokenizer
    from posttrain.models.gguf_export import export_gguf

    quiet_llama_cpp()
    model, tok = random_model("10m"), char_tokenizer()
    path = export_gguf(model, tok, Path(directory) / "10m-f32.gguf", "f32")
    lc = LlamaCpp(path, length + 64, "f32", "off")
    rng = random.Random(length)  # engine_child's draws: its 64-token warm-up prompt, then the prompt
    warm = [rng.randrange(3, 100) for _ in range(64)]
    prompt = [rng.randrange(3, 100) for _ in range(length)]
    lc.reset()
    lc._decode(warm)  # warm-up, untimed: pages in the mmapped weights
    lc.reset()
    n_batch = 2048  # llama_context_default_params' n_batch: the most tokens one llama_decode call takes
    _reset_peak()
    w0, c0 = time.perf_counter(), time.process_time()
    for lo in range(0, length, n_batch):
        logits = lc._decode(prompt[lo:lo + n_batch])
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    first = int(logits.argmax())
    lc.close()
    return {"length": length, "prefill_cpu_s": cpu, "prefill_s": wall, "prefill_cpu_s_per_token": cpu / length,
            "first_token_greedy": first, "peak_rss_mb": _status_kb("VmHWM") / 1024}


def llamacpp(args) -> dict:
    """Prefill tokens/s at `--llamacpp-length`: posttrain's engine (full attention, and the sliding window beside it)
    ÷ llama.cpp's, each in its own process, CPU time of one thread on both sides."""
    length = args.llamacpp_length
    with tempfile.TemporaryDirectory() as d:
        lc = run_child(["--child", "llamacpp", "--length", str(length), "--dir", d], args.child_timeout)
    ours = {mode: run_child(["--child", "engine", "--mode", mode, "--length", str(length), "--decode", "2",
                             "--window", str(args.window)], args.child_timeout) for mode in ("full", "window")}
    if lc is None or ours["full"] is None:
        return {"prefill_vs_llamacpp_not_measured": "a child failed or ran over its time limit (printed above)"}
    out = {f"llamacpp_prefill_{length}_cpu_s": round(lc["prefill_cpu_s"], 2),
           f"posttrain_full_prefill_{length}_cpu_s": round(ours["full"]["prefill_cpu_s"], 2),
           f"prefill_vs_llamacpp_{length // 1024}k": round(lc["prefill_cpu_s"] / ours["full"]["prefill_cpu_s"], 3)}
    if ours["window"] is not None:
        out[f"posttrain_window_prefill_{length}_cpu_s"] = round(ours["window"]["prefill_cpu_s"], 2)
        out[f"prefill_window_vs_llamacpp_{length // 1024}k"] = round(lc["prefill_cpu_s"] / ours["window"]["prefill_cpu_s"], 3)
    print(f"prefill {length} tokens, CPU s of one thread: llama.cpp {lc['prefill_cpu_s']:.1f} (wall {lc['prefill_s']:.1f}), "
          f"posttrain full attention {ours['full']['prefill_cpu_s']:.1f}"
          + (f", sliding window {ours['window']['prefill_cpu_s']:.1f}" if ours["window"] else "")
          + f"; posttrain tokens/s ÷ llama.cpp's (full attention): {out[f'prefill_vs_llamacpp_{length // 1024}k']}",
          flush=True)
    return out


# ---- learner


def learner_child(ckpt: bool, seq: int, grads_path: str) -> dict:
    from fast import random_model

    from posttrain.config import RLConfig
    from posttrain.models.logprobs import chunked_logprobs
    from posttrain.rl.learner import Learner
    from posttrain.rl.train_batch import TrainBatch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = random_model("1m").train()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (1, seq), generator=g)  # [1, T]
    mask = torch.zeros(1, seq - 1)  # [1, T-1]: the second half is the sampled completion
    mask[:, seq // 2:] = 1.0
    with torch.no_grad():
        old = chunked_logprobs(model, ids)[0] * mask  # behaviour = current policy: ratio 1
    learner = Learner(model, RLConfig(activation_checkpointing=ckpt), max_tokens=seq)
    batch = TrainBatch(ids, mask, old, torch.ones(1))
    base_kb = _status_kb("VmRSS")
    _reset_peak()
    t0 = time.perf_counter()
    learner.update(batch)
    seconds = time.perf_counter() - t0
    peak_kb = _status_kb("VmHWM")
    torch.save({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, grads_path)
    return {"ckpt": ckpt, "seq": seq, "update_s": seconds, "peak_growth_mb": (peak_kb - base_kb) / 1024,
            "peak_rss_mb": peak_kb / 1024, "params": sum(p.numel() for p in model.parameters())}


def learner(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        res = {}
        for ckpt in (False, True):
            path = str(Path(tmp) / f"g{int(ckpt)}.pt")
            got = run_child(["--child", "learner", "--ckpt", str(int(ckpt)), "--seq", str(args.seq), "--grads", path],
                            args.child_timeout)
            if got is None:
                return {"learner_ckpt_mem_ratio": None}
            res[ckpt] = (got, torch.load(path))
            print(f"learner ckpt={ckpt}: update {got['update_s']:.1f} s, peak growth {got['peak_growth_mb']:.0f} MB "
                  f"(peak RSS {got['peak_rss_mb']:.0f} MB), {got['params']} parameters", flush=True)
        (plain, g0), (ckpt_run, g1) = res[False], res[True]
        rel = max(float((g0[n] - g1[n]).abs().max() / g0[n].abs().max().clamp_min(1e-30)) for n in g0)
        return {"learner_seq": args.seq, "learner_params": plain["params"],
                "learner_peak_mb_plain": plain["peak_growth_mb"], "learner_peak_mb_ckpt": ckpt_run["peak_growth_mb"],
                "learner_ckpt_mem_ratio": ckpt_run["peak_growth_mb"] / plain["peak_growth_mb"],
                "learner_update_s_plain": plain["update_s"], "learner_update_s_ckpt": ckpt_run["update_s"],
                "learner_grad_max_rel_diff": rel, "learner_grads_equal": rel < 1e-4}


# ---- base and RL (the built-in model on the easy level, compact agent form)


def docs_base(args) -> dict:
    """Build (or find cached) the `docs:reports` base of the recipe (`quickstart.DOCS_OVERRIDES`) for each base seed."""
    from posttrain.config import load_config
    from posttrain.recipes.builtin import DOCS_CONTEXT, ensure_base
    from posttrain.recipes.quickstart import DOCS_OVERRIDES

    rows = []
    for seed in args.base_seeds:
        cfg = load_config(None, [*DOCS_OVERRIDES, f"model.base.seed={seed}", *args.set]).model.base
        t0 = time.perf_counter()

        def on_eval(step: int, acc: float, seed=seed, t0=t0) -> None:
            print(json.dumps({"base_seed": seed, "step": step, "held_out_episode_success": round(acc, 4),
                              "s": round(time.perf_counter() - t0, 1), "load": round(os.getloadavg()[0], 2)}), flush=True)

        b = ensure_base(cfg, on_eval=on_eval)
        rows.append({"base_seed": seed, "path": str(b.path), "steps": b.steps, "held_out_episode_success": b.accuracy,
                     "in_band": b.in_band, "band": [cfg.target_low, cfg.target_high], "seconds": round(b.seconds, 1),
                     "cached": b.cached, "context": cfg.context or DOCS_CONTEXT})
        print(f"docs base seed {seed}: held-out episode success {b.accuracy:.3f} after {b.steps} steps "
              f"({'in' if b.in_band else 'OUT OF'} band), {b.seconds:.0f} s" + (" (cached)" if b.cached else ""), flush=True)
    return {"docs_base": rows}


def at_length(tasks: list, length: int, kinds: tuple = ()) -> list:
    """The same (report, question) pairs as `tasks` with their reports padded to `length` characters (from 6,000 up
    the questions and answers do not change); `kinds`: ask that kind about each report instead."""
    from dataclasses import replace

    from posttrain.tasks.report_questions import ReportSource

    out = []
    for t in tasks:
        m = t.meta
        source = ReportSource(length=length, hops=max(int(m["hops"]), 2 if kinds else 1), distractors=m["distractors"],
                              kinds=kinds or (m["kind"],), form="agent", compact=bool(m.get("compact")))
        out.append(replace(source).make(int(m["report_seed"]), (kinds or (m["kind"],))[0]))
    return out


def single_turn_truncated(task, tokenizer, budget: int):
    """`task` in the single-turn form (the whole report in the prompt), the report cut at its end so that the prompt
    holds at most `budget` tokens: what a model with that context sees of a longer report."""
    from posttrain.rewards.registry import make_verifier  # noqa: F401 - the spec travels in meta
    from posttrain.tasks.report_questions import ReportSource

    m = task.meta
    prompt_task = ReportSource(length=m["length"], hops=int(m["hops"]), distractors=m["distractors"],
                               kinds=(m["kind"],), form="prompt").make(int(m["report_seed"]), m["kind"])
    head, rest = prompt_task.prompt.split("<document>\n", 1)
    doc, tail = rest.split("</document>", 1)
    room = budget - len(tokenizer.encode(head + "<document>\n" + "</document>" + tail))
    if len(tokenizer.encode(doc)) > room:
        doc = doc[: max(0, room)]
    from dataclasses import replace

    return replace(prompt_task, prompt=head + "<document>\n" + doc + "</document>" + tail)


def agent_success(engine, tasks, spec, sandboxes) -> tuple[float, list]:
    from posttrain.eval.episodes import evaluate_agent
    from posttrain.types import SamplingParams

    run = evaluate_agent(engine, tasks, spec, sandboxes.workspaces, sandboxes=sandboxes,
                         params=SamplingParams(temperature=0.0, max_tokens=spec.max_tokens, stop=("</tool_call>",)))
    eps = [e[0] for e in run.episodes]
    return sum(e.passed for e in eps) / max(1, len(eps)), eps


def diagnose(tasks, eps) -> dict:
    """Where greedy episodes go wrong: counts of episodes that searched, searched the oracle's words, got a line that
    holds the answer, submitted, submitted a figure printed on the line they got, and passed."""
    import re

    from posttrain.agent.reports import oracle_calls

    out = collections.Counter()
    for task, ep in zip(tasks, eps):
        searches = [r for t in ep.turns for r in t.results if r.call.name == "search"]
        hit = searches[0].output if searches else ""
        out["searched"] += bool(searches)
        out["query_as_oracle"] += bool(searches) and searches[0].call.arguments.get("query") == \
            oracle_calls(task)[0].arguments.get("query")
        out["hit_holds_answer"] += bool(searches) and f"{int(task.answer):,}" in hit if task.answer.isdigit() else 0
        out["submitted"] += ep.submitted is not None
        figures = set(re.findall(r"(?<!\w)\d[\d,]*\d|(?<!\w)\d", hit.split(": ", 1)[-1]))  # not T10, FY2024, P3
        said = re.findall(r"\d[\d,]*", ep.submitted or "")  # the last number is the answer (`FY2024 1,234`)
        out["submitted_a_figure_of_the_hit"] += bool(said) and said[-1] in figures
        out["passed"] += ep.passed
        out["env_error"] += ep.status.value == "env_error"
    return {"episodes": len(eps), **out}


def figures_of(engine, tasks, spec, sandboxes, args) -> dict:
    """Agent greedy success at each length (`--curve-lengths`), the single-turn truncated form's accuracy at the
    fitting and the longest length, and the `none` class's false positives (a label submitted where the answer is
    none), for one model on the reporting tasks."""
    from posttrain.eval.accuracy import evaluate_accuracy
    from posttrain.eval.episodes import check_env_errors
    from posttrain.rewards.registry import PerTask

    tok = engine.tokenizer
    context = engine.model.config.max_position_embeddings
    out: dict = {"agent": {}, "single_turn": {}}
    for length in args.curve_lengths:
        t0 = time.perf_counter()
        these = at_length(tasks, length)
        acc, eps = agent_success(engine, these, spec, sandboxes)
        out["agent"][str(length)] = round(acc, 4)
        out.setdefault("diagnosis", {})[str(length)] = diagnose(these, eps)
        check_env_errors(eps, 0.1, f"episodes at length {length}")
        print(f"  agent length {length}: {acc:.3f} ({time.perf_counter() - t0:.0f} s) "
              f"{out['diagnosis'][str(length)]}", flush=True)
    for length in (args.curve_lengths[0], args.curve_lengths[-1]):
        t0 = time.perf_counter()
        st = [single_turn_truncated(t, tok, context - 64) for t in at_length(tasks[: args.single_turn_tasks], length)]
        acc = evaluate_accuracy(engine, st, PerTask(), max_tokens=48).accuracy
        out["single_turn"][str(length)] = round(acc, 4)
        print(f"  single-turn truncated length {length}: {acc:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    none_tasks = at_length(tasks[: args.none_tasks], args.curve_lengths[0], kinds=("none",))
    acc, eps = agent_success(engine, none_tasks, spec, sandboxes)
    flagged = sum(1 for e in eps if e.submitted is not None and e.submitted.strip().lower() != "none")
    out["none"] = {"tasks": len(eps), "passed": round(acc, 4), "submitted": sum(e.submitted is not None for e in eps),
                   "false_positive_rate": round(flagged / max(1, len(eps)), 4)}
    print(f"  none class: {flagged}/{len(eps)} flagged something", flush=True)
    return out


def docs_rl(args) -> dict:
    """Per seed: the recipe's RL run (`run_quickstart` of `DOCS_OVERRIDES`: base, GRPO, best/ on the selection
    half, greedy before/after on the reporting half), then the length figures of the base and of best/."""
    from posttrain.config import load_config
    from posttrain.recipes.quickstart import DOCS_OVERRIDES, run_quickstart

    runs = args.runs or tempfile.mkdtemp(prefix="docs-rl-")
    rows = []
    for seed in args.rl_seeds:
        sets = [*DOCS_OVERRIDES, f"seed={seed}", f"model.base.seed={args.base_seeds[0]}", f"run_dir='{runs}'",
                f"name='docs-s{seed}'", "tensorboard=false", *args.set]
        seen: dict = {}

        def prepare(trainer, seen=seen) -> None:
            if args.select:
                trainer.reporting = trainer.held_out  # recipe trials: measure the half best/ is chosen on
            seen.update(trainer=trainer, tasks=list(trainer.reporting), spec=trainer.domains[0].agent)
            if args.figures_only:
                raise _FiguresOnly

        t0 = time.perf_counter()
        if args.figures_only:  # the length figures of a base and a trained model already on disk, no RL run
            try:
                run_quickstart(load_config(None, sets), prepare=prepare)
            except _FiguresOnly:
                pass
            row = {"seed": seed, "half": "selection" if args.select else "reporting"}
            _length_figures(row, seen, [("base", seen["trainer"].cfg.model.path), ("best", args.figures_only)], args)
            rows.append(row)
            continue
        r = run_quickstart(load_config(None, sets), pass1_samples=args.pass1_samples, prepare=prepare,
                           on_phase=lambda msg, seed=seed: print(f"seed {seed}: {msg} (load {os.getloadavg()[0]:.1f})",
                                                                 flush=True),
                           on_step=lambda st: print(json.dumps({"step": st.step, **{k: round(v, 4) for k, v in
                                                                st.metrics.items() if isinstance(v, float)}}), flush=True))
        row = {"seed": seed, "half": "selection" if args.select else "reporting", "n": r.n_held_out,
               "greedy_before": r.greedy_before, "greedy_after": r.greedy_after,
               "docs_rl_gain_points": round(100 * (r.greedy_after - r.greedy_before), 1),
               "pass1_before": r.pass1_before, "pass1_after": r.pass1_after, "greedy_final": r.greedy_final,
               "best_step": r.best_step, "steps": r.steps, "rl_seconds": round(r.train_seconds, 1),
               "base_in_band": r.base_in_band, "run_dir": r.run_dir}
        print(f"seed {seed}: greedy {r.greedy_before:.3f} -> {r.greedy_after:.3f} ({row['docs_rl_gain_points']:+.1f} "
              f"points) on {r.n_held_out} {row['half']} tasks, best step {r.best_step}, {r.train_seconds:.0f} s", flush=True)
        if args.figures:
            trainer = seen["trainer"]
            _length_figures(row, seen, [("base", trainer.cfg.model.path),
                                        ("best", trainer.best_model_dir() or trainer.run_dir / "final")], args)
        row["wall_seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
    out: dict = {"docs_rl": rows}
    if not args.figures_only:
        out |= {"docs_rl_gain": min(r["docs_rl_gain_points"] for r in rows),
                "docs_rl_gain_mean": round(sum(r["docs_rl_gain_points"] for r in rows) / len(rows), 1)}
    for name in ("base", "best"):
        holds = [hold(r[f"figures_{name}"], args) for r in rows if f"figures_{name}" in r]
        if holds:
            out[f"retrieval_hold_{name}"] = holds
    if all("figures_best" in r for r in rows):
        out["false_positive_rate"] = {n: [r[f"figures_{n}"]["none"]["false_positive_rate"] for r in rows]
                                      for n in ("base", "best")}
    return out


class _FiguresOnly(Exception):
    """Stops `run_quickstart` once its trainer is built (`--figures-only`: its tasks and spec, no training)."""


def _length_figures(row: dict, seen: dict, models: list, args) -> None:
    """`figures_of` for each (name, weights path) in `models`, on a sandbox pool of their own (the run's pool is
    closed with its trainer), into `row["figures_<name>"]`."""
    from posttrain.engine.build import build_engine
    from posttrain.models.io import load_model
    from posttrain.rl.build import build_sandboxes

    sandboxes = build_sandboxes(seen["trainer"].cfg)
    try:
        for name, path in models:
            print(f"seed {row['seed']}: length figures of {name} ({path})", flush=True)
            model, tok = load_model(path)
            row[f"figures_{name}"] = figures_of(build_engine(None, model, tok), seen["tasks"][: args.figure_tasks],
                                                seen["spec"], sandboxes, args)
    finally:
        sandboxes.close()


def hold(fig: dict, args) -> dict:
    """`retrieval_hold`: accuracy at the longest length ÷ at the first (the one that fits), agent and single-turn."""
    fit, far = str(args.curve_lengths[0]), str(args.curve_lengths[-1])

    def ratio(d: dict) -> float | None:
        return round(d[far] / d[fit], 4) if d.get(fit) else None

    return {"agent": ratio(fig["agent"]), "single_turn": ratio(fig["single_turn"]), "fit": fit, "far": far}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="domain,engine,learner")
    ap.add_argument("--tasks", type=int, default=170, help="held-out tasks per length (and per form)")
    ap.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=[3000, 30000, 300000])
    ap.add_argument("--episodes", type=int, default=20, help="oracle agent episodes per length (lengths <= 100k)")
    ap.add_argument("--window-lengths", type=_ints, default=[8192, 16384, 32768])
    ap.add_argument("--full-lengths", type=_ints, default=[2048, 4096, 8192, 16384])
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--decode", type=int, default=17)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--child-timeout", type=float, default=900.0)
    ap.add_argument("--child", choices=["engine", "learner", "llamacpp"])
    ap.add_argument("--llamacpp-length", type=int, default=32768, help="prompt tokens of the llama.cpp prefill part")
    ap.add_argument("--dir", default="", help="(llamacpp child) where the GGUF file is written")
    ap.add_argument("--mode", choices=["full", "window"], default="full")
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--ckpt", type=int, default=0)
    ap.add_argument("--grads", default="")
    ap.add_argument("--progress", default="", help="append each engine forward's tokens and CPU s to this file")
    ap.add_argument("--base-seeds", type=_ints, default=[0], help="(base, rl) docs base seeds; rl uses the first")
    ap.add_argument("--rl-seeds", type=_ints, default=[1])
    ap.add_argument("--select", action="store_true", help="(rl) measure on the selection half (recipe trials)")
    ap.add_argument("--figures-only", default="", help="(rl) no training: the length figures of the base and this "
                    "trained model (a run's best/), on the seed's tasks")
    ap.add_argument("--set", action="append", default=[], help="(base, rl) config overrides, KEY=VALUE")
    ap.add_argument("--runs", default="", help="(rl) where the runs go (default: a temporary directory)")
    ap.add_argument("--pass1-samples", type=int, default=2)
    ap.add_argument("--figures", type=int, default=1, help="(rl) 0: the gain only, no length figures")
    ap.add_argument("--figure-tasks", type=int, default=50, help="(rl) reporting tasks in the length figures")
    ap.add_argument("--single-turn-tasks", type=int, default=25)
    ap.add_argument("--none-tasks", type=int, default=50)
    ap.add_argument("--curve-lengths", type=_ints, default=[6000, 60000, 819200],
                    help="(rl) report lengths of the effective-length curve: the first fits the context, the last is "
                         "100x it (8,192 positions)")
    args = ap.parse_args()
    if args.child == "engine":
        print(json.dumps(engine_child(args.mode, args.length, args.decode, args.window, args.progress)))
        return
    if args.child == "learner":
        print(json.dumps(learner_child(bool(args.ckpt), args.seq, args.grads)))
        return
    if args.child == "llamacpp":
        print(json.dumps(llamacpp_child(args.length, args.dir)))
        return
    parts = set(args.parts.split(","))
    load = os.getloadavg()
    t0 = time.time()
    out: dict = {"machine": f"{os.cpu_count()} CPUs", "load_start": [round(x, 2) for x in load]}
    if "domain" in parts:
        out.update(domain(args))
    if "learner" in parts:
        out.update(learner(args))
    if "engine" in parts:
        out.update(engine(args))
    if "llamacpp" in parts:
        out.update(llamacpp(args))
    if "base" in parts or "rl" in parts:
        torch.set_num_threads(1)
    if "base" in parts:
        out.update(docs_base(args))
    if "rl" in parts:
        out.update(docs_rl(args))
    out["load_end"] = [round(x, 2) for x in os.getloadavg()]
    out["seconds"] = round(time.time() - t0, 1)
    out["not_measured"] = ([] if "llamacpp" in parts else ["prefill vs llama.cpp (`--parts llamacpp`: needs "
                                                           "pip install 'posttrain[llamacpp]', a 10-25 min build)"]) + (
        [] if "rl" in parts else ["docs_rl_gain, retrieval_hold, false_positive_rate (`--parts base,rl`)"])
    if "engine" in parts and out.get("prefill_128k_s") is None:
        out["not_measured"].append("prefill at 128k (too slow on the shared 2-core machine); scaling is taken at the "
                                   "longest length measured")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
