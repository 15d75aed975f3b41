"""Where a built `agent:lookup` base fails, teacher-forced (no sandbox, seconds): on its stopping set's oracle episodes,
each call's copied value (the decision) predicted greedily, sorted by call kind into the right line's character, a
distractor line's, or another; the greedy accuracy on the other call tokens (the format); and the greedy accuracy of
the copy drills pre-training shows it (1 and 3 lines, 256 each, a fixed draw).

    PYTHONPATH=src python benchmarks/agent_base_diag.py /work/cache_agent_s5/base/agent-lookup-h3-s0-83aee05bf9

One JSON line per part. Does not cover: greedy episodes (what `benchmarks/agent_base.py` measures in the sandbox).
"""

from __future__ import annotations

import argparse
import json
import random
import re

import torch


def teacher_forced(model, tok, tasks) -> dict:
    """On `tasks`' oracle episodes: each call's copied value predicted greedily, counted by call kind as the right
    line's character, a distractor line's, or another; and the greedy accuracy on the other call tokens."""
    from posttrain.agent.lookup import oracle_calls, oracle_trace

    model.eval()
    stats: dict[str, dict[str, int]] = {}
    format_right = format_n = 0
    for t in tasks:
        decisions: list[bool] = []
        ids, mask = oracle_trace(t, tok, decisions)
        with torch.no_grad():
            pred = model(torch.tensor([ids]))[0, :-1].argmax(-1).tolist()  # [T-1]: pred[i - 1] is the guess of ids[i]
        calls = oracle_calls(t)
        firsts = [i for i, d in enumerate(decisions) if d and not decisions[i - 1]]  # each call's first copied token
        for n, i in enumerate(firsts):
            call = calls[n][0]
            seen = calls[n - 1][1] if n else ""  # the file the call copies from
            got, right = tok.decode([pred[i - 1]]), tok.decode([ids[i]])
            others = set(re.findall(r"(?:->|=) (\S)", seen)) - {right}
            kind = "first_read" if n == 0 else call.name
            row = stats.setdefault(kind, {"right": 0, "distractor": 0, "other": 0})
            row["right" if got == right else "distractor" if got in others else "other"] += 1
        for i in range(1, len(ids)):
            if mask[i] and not decisions[i]:
                format_n += 1
                format_right += pred[i - 1] == ids[i]
    return {"decisions": stats, "call_token_acc": round(format_right / format_n, 4), "tasks": len(tasks)}


def main() -> None:
    from posttrain.config import BaseModelConfig
    from posttrain.models import load_model
    from posttrain.models.tokenizer import char_tokenizer
    from posttrain.recipes.builtin import _copy_drills, drill_accuracy, stopping_set

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a base's directory (the cache entry)")
    ap.add_argument("--seed", type=int, default=0, help="the base's seed (its stopping set)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, _ = load_model(args.model)
    tok = char_tokenizer()
    tasks = stopping_set(BaseModelConfig(family="lookup", seed=args.seed))
    print(json.dumps(teacher_forced(model, tok, tasks)))
    for lines in (1, 3):
        ids, w = _copy_drills(tok, random.Random(123), 256, lines)
        print(json.dumps({"drill_lines": lines, "drill_copy_acc": round(drill_accuracy(model, ids, w), 4)}))


if __name__ == "__main__":
    main()
