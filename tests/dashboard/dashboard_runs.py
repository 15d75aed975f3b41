"""A run store with everything the dashboard shows, the scheduler's tables made with raw SQL (issue 36 adds them to
the store's schema; the dashboard must read them when present)."""

from __future__ import annotations

import json
import math

from posttrain.store.run_store import EpisodeRow, RunStore, SampleRow
from posttrain.store.tokens import StepTokens, TokenRow

EVIL = '</pre><script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'

DOMAIN_TABLES = """
CREATE TABLE IF NOT EXISTS domains (step INTEGER, domain TEXT, metrics TEXT, PRIMARY KEY (step, domain));
CREATE TABLE IF NOT EXISTS failures (step INTEGER, domain TEXT, task_id TEXT, category TEXT, detail TEXT, response TEXT,
                                     prompt TEXT DEFAULT '', answer TEXT DEFAULT '');
"""


def step_metrics(step: int) -> dict[str, float]:
    return {"reward": round(0.1 + step / 100, 4), "pass_rate": round(step / 200, 4), "entropy": 0.5, "kl": 0.01 * step,
            "completion_tokens": 5.0, "clip_frac": 0.02, "grad_norm": 0.3, "groups_sampled": 2.0, "verifier_errors": 0.0}


PLANTED_GAP = (0, 1, 2, 3.0)  # group, sample, token, learner - sampler logprob: one token the overlay must mark


VOCAB: dict[str, int] = {}  # token texts -> ids, the same in every step and store


def token_row(g: int, j: int, text: str) -> TokenRow:
    """A completion's per-token record: one token per character, sampler and learner agreeing (gap 0.001) but for
    the planted token; group 1 was dropped (no learner values, nothing in the loss)."""
    n = len(text)
    sampler = [-0.1 - 0.01 * i for i in range(n)]
    learner = [x + 0.001 for x in sampler] if g == 0 else [math.nan] * n
    if (g, j) == PLANTED_GAP[:2]:
        learner[PLANTED_GAP[2]] = sampler[PLANTED_GAP[2]] + PLANTED_GAP[3]
    entropy = [0.2 + 0.1 * i for i in range(n)] if g == 0 else [math.nan] * n
    return TokenRow(g, j, list(text), sampler, learner, entropy, [g == 0] * n)


def write_step(store: RunStore, step: int, samples: bool = True) -> None:
    rows, tokens = [], None
    if samples:
        rows = [SampleRow(g, j, f"t{g}", EVIL if (g, j) == (0, 0) else f"{step}+{j}", 3, "stop", float(j % 2), j % 2,
                          "ok", "exact@abc", f"expected {g}", step - 1, 0.01, {"got": str(j)})
                for g in range(2) for j in range(4)]
        tokens = StepTokens.from_rows([token_row(r.group_idx, r.sample_idx, r.completion) for r in rows], VOCAB)
    store.log_step(step, step_metrics(step), [(0, "t0", [0.0, 1.0, 0.0, 1.0], True), (1, "t1", [0.0, 0.0, 0.0, 0.0], False)],
                   rows, tokens)


def make_run(path, steps: int = 20, name: str = "demo", domains: bool = True) -> RunStore:
    path.mkdir(parents=True, exist_ok=True)
    store = RunStore(path / "run.sqlite")
    store.set_info(config={"name": name, "train": {"steps": 100}, "rl": {"advantage": "grpo", "std_floor": 0.0}},
                   status="running", pid=0)
    for s in range(1, steps + 1):
        write_step(store, s)
    store.log_eval(0, "held_out", {"pass@1": 0.4}, {})
    store.log_eval(10, "held_out", {"pass@1": 0.45}, {})
    store.add_alert({"step": 7, "kind": "grad_norm_spike", "message": "step 7: gradient norm 40 is over 10 x its median"})
    store.log_episodes(3, [EpisodeRow(0, "hop", "ok", 1, 1.0, 2, 10, 6, 0.5, 0.0, {
        "task_id": "hop", "status": "ok", "instruction": "find the value",
        "turns": [{"kind": "tool", "text": "read a.txt", "sampled_tokens": 3, "policy_version": 2,
                   "calls": [{"name": "read", "arguments": {"path": "a.txt"}}], "results": [{"ok": True}],
                   "observation": "value=42"}, {"kind": "final", "text": "42", "sampled_tokens": 1, "policy_version": 2}],
        "verdict": {"status": "ok", "score": 1.0, "details": "matched"}})])
    if domains:
        store.db.executescript(DOMAIN_TABLES)
        with store.db:
            store.db.executemany("INSERT INTO domains VALUES (?, ?, ?)", [
                (s, d, json.dumps({"pass_rate": 0.3 if d == "add" else 0.7, "difficulty": 2, "share": 0.5,
                                   "informative_frac": 0.6, "seconds": 1.5, "tokens": 100, "failures": 1, "retired": 0}))
                for s in range(1, steps + 1) for d in ("add", "code")])
            store.db.executemany("INSERT INTO failures(step, domain, task_id, category, detail, response) VALUES "
                                 "(?, ?, ?, ?, ?, ?)", [(s, "code", f"c{s}", "timeout" if s % 2 else "wrong_answer",
                                                        f"detail {s}", EVIL) for s in range(1, 8)])
    return store
