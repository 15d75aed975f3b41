"""The `docs:reports` base's pre-training without its band checks (real episodes, about half of a build's time on the
shared 2 cores): the same model, optimizer, schedule and batches as `builtin.pretrain_base` for the family, with a
cheap teacher-forced check every `--every` steps (`docs_base_diag.teacher_forced`: per-token accuracy of the calls'
JSON, the search's words and the submitted year and figure, and how many whole copies are right) and the weights saved
there, so a run cut short still says what the base has learned and leaves weights for `docs_base_diag.py`.

    python benchmarks/docs_base_probe.py --steps 600 --every 50 --out /tmp/docs_probe [--decision-weight 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--tasks", type=int, default=32, help="held-out tasks of each teacher-forced check")
    ap.add_argument("--out", default="/tmp/docs_probe")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--decision-weight", type=float, default=None,
                    help="loss weight of the copied tokens (default: the recipe's, builtin.DOCS_DECISION_WEIGHT)")
    ap.add_argument("--lr", type=float, default=None, help="pre-training lr (default: the family's)")
    ap.add_argument("--layers", type=int, default=None, help="the model's layers (default: the family's)")
    ap.add_argument("--copy-steps", type=int, default=None, help="repeat drills alone first (default: builtin.COPY_PHASE_STEPS)")
    ap.add_argument("--repeat-rows", type=int, default=None, help="repeat drills a step (default: builtin.REPEAT_ROWS)")
    args = ap.parse_args()

    import torch
    from docs_base_diag import teacher_forced

    from posttrain.config import BaseModelConfig
    from posttrain.models.io import save_model
    from posttrain.models.tokenizer import char_tokenizer
    from posttrain.recipes import builtin as b

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    cfg = BaseModelConfig(family="docs:reports", seed=args.seed, **({"lr": args.lr} if args.lr else {}),
                          **({"num_layers": args.layers} if args.layers else {}))
    if args.repeat_rows is None:
        args.repeat_rows = b.REPEAT_ROWS
    tok = char_tokenizer()
    repeats = b._repeat_drills(tok, random.Random(1_000_003), 128)  # held-out repeat drills: the copy alone
    source = b.base_task_source(cfg)
    model = b._fresh_model(cfg, tok.vocab_size, True)
    opt = b._optimizer(model, cfg)
    rng = random.Random(cfg.seed)
    held_out = b.stopping_set(cfg, source)[: args.tasks]
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        tasks = [source.sample(rng) for _ in range(cfg.batch_size)]
        weight = b.DOCS_DECISION_WEIGHT if args.decision_weight is None else args.decision_weight
        copy_steps = b.COPY_PHASE_STEPS if args.copy_steps is None else args.copy_steps
        ids, w, more = b.docs_batch(tok, tasks, rng, step, weight, args.repeat_rows, copy_steps)
        b._sgd_step(model, opt, ids, w, b._lr_at(cfg, step), more)
        if step % args.every == 0 or step == args.steps:
            row = {"step": step, **teacher_forced(model, tok, held_out),
                   "repeat_copy": round(b.drill_accuracy(model, *repeats), 3), "s": round(time.perf_counter() - t0, 1),
                   "cpu_s": round(time.process_time(), 1), "load": round(os.getloadavg()[0], 2)}
            print(json.dumps(row), flush=True)
            save_model(model, tok, Path(args.out))


if __name__ == "__main__":
    main()
