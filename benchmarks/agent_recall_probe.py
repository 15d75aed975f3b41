"""A cheap probe of key recall for the agent base: a fresh built-in model trained ONLY on the recipe's copy drills.

The agent base (`model.base.family = "lookup"`) must copy, from a file of several `key -> x` / `key = x` lines, the
value of the line whose key the instruction names. Whether a model of the recipe's shape can learn that match at all,
and how fast, is measured here on the drills alone (`builtin._copy_drills`, the recipe's model `_fresh_model`,
optimizer `_optimizer`, lr schedule `_lr_at` and step `_sgd_step`; config from `agent_base.agent_base_config`, so
`--set model.base.lr=...` or `model.base.num_layers=2` probe one change). Every `--every` steps it prints greedy
accuracy on a fixed draw of held-out drills (drawn from their own rng, never trained on) and, on the base's stopping
set, the teacher-forced decisions of oracle episodes (`agent_base_diag.teacher_forced`: the right line's value, a
distractor's, or another character). Those two are the numbers to select a change on; the RL run's reporting half is
never looked at.

    PYTHONPATH=src python benchmarks/agent_recall_probe.py --steps 600 --every 50
    PYTHONPATH=src python benchmarks/agent_recall_probe.py --steps 600 --set model.base.lr=1e-3
    PYTHONPATH=src python benchmarks/agent_recall_probe.py --steps 600 --batch 64 --mqar 32   # dense recall drills too

Last line, one JSON object: the final held-out drill accuracy, the decisions, steps, seconds and the load.
Does not cover: greedy episodes in the sandbox (`benchmarks/agent_base.py`), or the trace windows of pre-training.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))


def lines_at(step: int, lines: int, warm: list[tuple[int, int]]) -> int:
    """The drills' lines at `step` (1-based) under a curriculum `warm` of (lines, steps) stages, then `lines`."""
    for stage_lines, stage_steps in warm:
        if step <= stage_steps:
            return stage_lines
        step -= stage_steps
    return lines


def probe(cfg, steps: int, every: int, batch: int, lines: int, eval_n: int = 256, episodes: bool = True,
          near: float = 0.0, warm: list[tuple[int, int]] = (), mqar: int = 0, mqar_instruct: float = 0.3,
          mqar_pairs: tuple[int, int] = (3, 10), log=print, copy_steps: int = 0) -> dict:
    """Train `cfg`'s fresh base on `batch` drills of `lines` lines a step (after the curriculum `warm`, (lines, steps)
    stages; with distractor keys sharing a character at rate `near`), and `mqar` dense multi-query recall drills
    (`_recall_drills`, a share `mqar_instruct` of their queries in the instruction's form, `mqar_pairs` lines) in the
    same step, for `steps` steps; the held-out drill accuracy (on `lines`-line drills, with and without near keys;
    with `mqar`, on held-out recall drills whose queries are all lines, `mqar_line_acc`, or all instructions,
    `mqar_instr_acc`) and, with `episodes`, the stopping set's teacher-forced decisions, every `every` steps and at
    the end. The first `copy_steps` steps are the docs base's copy phase instead (`builtin.copy_phase_batch`)."""
    import torch

    from posttrain.models.tokenizer import char_tokenizer
    from posttrain.recipes.builtin import (
        _copy_drills,
        _fresh_model,
        _lr_at,
        _optimizer,
        _recall_drills,
        _sgd_step,
        copy_phase_batch,
        drill_accuracy,
        stopping_set,
    )

    torch.manual_seed(cfg.seed)
    tok = char_tokenizer()
    model = _fresh_model(cfg, tok.vocab_size, agent=True)
    opt = _optimizer(model, cfg)
    rng = random.Random(cfg.seed)
    held_ids, held_w = _copy_drills(tok, random.Random(f"recall-probe-held-out-{cfg.seed}"), eval_n, lines)
    near_ids, near_w = _copy_drills(tok, random.Random(f"recall-probe-near-{cfg.seed}"), eval_n, lines, near=1.0)
    if mqar:
        mq_rng = random.Random(f"recall-probe-mqar-{cfg.seed}")  # its own stream: the plain drills' draws unchanged
        mq_line = _recall_drills(tok, random.Random(f"recall-probe-mqar-line-{cfg.seed}"), eval_n // 2, mqar_pairs, 0.0)
        mq_instr = _recall_drills(tok, random.Random(f"recall-probe-mqar-instr-{cfg.seed}"), eval_n // 2, mqar_pairs, 1.0)
    tasks = stopping_set(cfg) if episodes else []
    t0 = time.perf_counter()
    row: dict = {}
    copy_rng = random.Random(f"recall-probe-copy-{cfg.seed}")  # its own stream: the drills' draws unchanged
    for step in range(1, steps + 1):
        if step <= copy_steps:
            _sgd_step(model, opt, *copy_phase_batch(tok, copy_rng), _lr_at(cfg, step))
        else:
            more = (_recall_drills(tok, mq_rng, mqar, mqar_pairs, mqar_instruct),) if mqar else ()
            _sgd_step(model, opt, *_copy_drills(tok, rng, batch, lines_at(step - copy_steps, lines, warm), near),
                      _lr_at(cfg, step), more)
        if step % every == 0 or step == steps:
            row = {"step": step, "drill_acc": round(drill_accuracy(model, held_ids, held_w), 4),
                   "near_drill_acc": round(drill_accuracy(model, near_ids, near_w), 4)}
            if mqar:
                row |= {"mqar_line_acc": round(drill_accuracy(model, *mq_line), 4),
                        "mqar_instr_acc": round(drill_accuracy(model, *mq_instr), 4)}
            if episodes:
                from agent_base_diag import teacher_forced

                tf = teacher_forced(model, tok, tasks)
                later = [tf["decisions"][k] for k in ("read", "submit") if k in tf["decisions"]]
                right, n = sum(r["right"] for r in later), sum(sum(r.values()) for r in later)
                row |= {"later_calls_right": round(right / max(n, 1), 4), "decisions": tf["decisions"],
                        "call_token_acc": tf["call_token_acc"]}
            row |= {"s": round(time.perf_counter() - t0, 1), "load": round(os.getloadavg()[0], 2)}
            log(json.dumps(row))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--batch", type=int, default=None, help="drills a step (default: the recipe's, 2 x batch_size)")
    ap.add_argument("--lines", type=int, default=3, help="lines of a drill's file (the recipe's tasks: 3)")
    ap.add_argument("--near", type=float, default=0.0, help="share of distractor keys sharing a character with the key")
    ap.add_argument("--warm", default="", help="a curriculum before --lines: LINES:STEPS stages, e.g. 1:100,2:100")
    ap.add_argument("--mqar", type=int, default=0, help="dense multi-query recall drills a step, beside --batch drills")
    ap.add_argument("--mqar-instruct", type=float, default=0.3, help="share of their queries in the instruction's form")
    ap.add_argument("--mqar-pairs", default="3:10", help="lines of their files, LO:HI")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-n", type=int, default=256, help="held-out drills per check")
    ap.add_argument("--no-episodes", action="store_true", help="skip the stopping set's teacher-forced decisions")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="config overrides of the recipe's base, KEY=VALUE")
    ap.add_argument("--copy-steps", type=int, default=0, help="a copy phase first: repeat drills alone (the docs base's)")
    args = ap.parse_args()
    import torch
    from agent_base import agent_base_config

    from posttrain.provenance import machine

    torch.set_num_threads(args.threads)
    cfg = agent_base_config(args.seed, args.set)
    batch = args.batch or 2 * cfg.batch_size
    pairs = tuple(int(x) for x in args.mqar_pairs.split(":"))
    warm = [tuple(int(x) for x in stage.split(":")) for stage in args.warm.split(",") if stage]
    print(json.dumps({"probe": "drills only", "lines": args.lines, "batch": batch, "lr": cfg.lr,
                      "layers": cfg.num_layers, "near": args.near, "warm": warm, "sets": args.set,
                      "mqar": args.mqar, "mqar_instruct": args.mqar_instruct, "mqar_pairs": pairs,
                      "copy_steps": args.copy_steps, "load_start": os.getloadavg()[0], "machine": machine()}), flush=True)
    t0 = time.perf_counter()
    last = probe(cfg, args.steps, args.every, batch, args.lines, args.eval_n, not args.no_episodes, args.near, warm,
                 args.mqar, args.mqar_instruct, pairs, log=lambda line: print(line, flush=True), copy_steps=args.copy_steps)
    print(json.dumps({"final_drill_acc": last["drill_acc"], "near_drill_acc": last["near_drill_acc"],
                      "later_calls_right": last.get("later_calls_right"),
                      "mqar_line_acc": last.get("mqar_line_acc"), "mqar_instr_acc": last.get("mqar_instr_acc"),
                      "steps": args.steps, "batch": batch,
                      "lines": args.lines, "near": args.near, "warm": warm, "sets": args.set,
                      "seconds": round(time.perf_counter() - t0, 1), "load_end": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
