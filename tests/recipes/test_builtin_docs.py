"""The `docs:reports` base family: its own cache key and context, pre-training batches that are the compact form's
oracle episodes (the decisive copies weighted), and a build through `ensure_base` measured by real episodes."""

from __future__ import annotations

import random

from posttrain.config import BaseModelConfig, load_config
from posttrain.models import load_model
from posttrain.models.tokenizer import char_tokenizer
from posttrain.recipes.builtin import (
    COPY_PHASE_ROWS,
    COPY_PHASE_STEPS,
    DOCS_CONTEXT,
    DOCS_DECISION_WEIGHT,
    REPEAT_ROWS,
    _docs_drills,
    _repeat_drills,
    _trace_batch,
    base_key,
    base_task_source,
    docs_batch,
    ensure_base,
)

TINY = dict(family="docs:reports", hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, batch_size=2,
            max_steps=2, eval_every=2, eval_size=16)


def test_the_family_has_its_own_key_band_and_easy_source():
    cfg = BaseModelConfig(family="docs:reports")
    assert base_key(cfg).startswith("docs-reports-h1-s0-") and cfg.digits == 1
    assert (cfg.target_low, cfg.target_high) == (0.20, 0.55)
    task = base_task_source(cfg).take(1, "train", seed=0)[0]
    assert task.meta["compact"] and task.meta["kind"] == "lookup" and task.meta["distractors"] == 0


def test_batches_are_compact_oracle_episodes_with_weighted_copies():
    tok = char_tokenizer()
    tasks = base_task_source(BaseModelConfig(family="docs:reports")).take(3, "train", seed=0)
    ids, weight, more = docs_batch(tok, tasks, random.Random(0), step=COPY_PHASE_STEPS + 4)  # a whole-episode step
    assert ids.shape[0] == 3 and ids.shape[1] < 1000
    text = tok.decode([int(i) for i in ids[0]])
    assert text.startswith("<system>")
    assert '"name": "search"' in text and '"name": "submit"' in text and "tool_response" in text
    assert float(weight.max()) == DOCS_DECISION_WEIGHT
    win_ids, _, _ = docs_batch(tok, tasks, random.Random(0), step=COPY_PHASE_STEPS + 2)
    assert win_ids.shape[1] < ids.shape[1]
    assert ids.shape == _trace_batch(tok, tasks, docs=True)[0].shape
    drill_ids, _, _ = docs_batch(tok, tasks, random.Random(0), step=COPY_PHASE_STEPS + 3)
    assert not tok.decode([int(i) for i in drill_ids[0]]).startswith("<system>")
    assert len(more) == 1 and more[0][0].shape[0] == REPEAT_ROWS  # repeat drills join every step
    assert docs_batch(tok, tasks, random.Random(0), step=COPY_PHASE_STEPS + 4, repeat_rows=0)[2] == ()
    copy_ids, _, copy_more = docs_batch(tok, tasks, random.Random(0), step=COPY_PHASE_STEPS)  # the copy phase
    assert copy_ids.shape[0] == COPY_PHASE_ROWS and copy_ids.shape[1] < 100 and copy_more == ()


def test_repeat_drills_train_only_the_copy_after_its_first_two_characters():
    tok = char_tokenizer()
    ids, weight = _repeat_drills(tok, random.Random(5), 16)
    for row in range(16):
        text = tok.decode([int(i) for i in ids[row] if int(i) != tok.pad_id])
        original, filler, copy = text.split("\n")
        trained = "".join(_trained_runs(tok, ids[row], weight[row]))
        assert copy == original and trained == original[2:] and 8 <= len(original) <= 40 and len(filler) <= 120


def _trained_runs(tok, ids, weight) -> list[str]:
    """The trained stretches of one drill row, as text."""
    runs, current = [], ""
    for j, w in enumerate(weight.tolist()):
        if w > 0:
            current += tok.decode([int(ids[j + 1])])
        elif current:
            runs.append(current)
            current = ""
    return runs + ([current] if current else [])


def test_drills_train_the_episode_copies_and_every_other_year_of_the_hit():
    import re

    from posttrain.agent.reports import oracle_steps

    tok = char_tokenizer()
    tasks = base_task_source(BaseModelConfig(family="docs:reports")).take(24, "train", seed=3)
    ids, weight = _docs_drills(tok, random.Random(0), tasks)
    assert float(weight.max()) == 1.0
    paragraphs = 0
    for row, task in enumerate(tasks):
        steps = oracle_steps(task)
        hit, answer = steps[0][1], steps[-1][0].arguments["answer"]
        runs = _trained_runs(tok, ids[row], weight[row])
        assert runs[:2] == [steps[0][0].arguments["query"], answer]
        years = set(re.findall(r"FY\d{4}", hit)) - {answer.split(" ")[0]}
        assert len(runs) == 2 + len(years) >= 3
        text = tok.decode([int(i) for i in ids[row]])
        asked = re.findall(r'"answer": "(FY\d{4}) ', text)[1:]
        assert set(asked) == years
        for year, figure in zip(asked, runs[2:]):  # the figure the hit gives that year, in either layout
            assert f"{year} {figure}" in hit or f"{figure} in {year}" in hit, (year, figure, hit)
        paragraphs += f" in {asked[0]}" in hit
    assert 0 < paragraphs < len(tasks)  # both layouts were drilled


def test_a_tiny_docs_base_builds_through_ensure_base(tmp_path):
    build = ensure_base(BaseModelConfig(**TINY, cache_dir=str(tmp_path)))
    assert build.path.name.startswith("docs-reports-h1-") and build.steps == 2 and 0.0 <= build.accuracy <= 1.0
    assert load_model(build.path)[0].config.max_position_embeddings == DOCS_CONTEXT
    assert ensure_base(BaseModelConfig(**TINY, cache_dir=str(tmp_path))).cached


def test_the_recipe_is_the_example():
    from pathlib import Path

    from posttrain.recipes.quickstart import DOCS_OVERRIDES

    example = load_config(Path(__file__).parents[2] / "examples" / "docs.toml", [])
    preset = load_config(None, DOCS_OVERRIDES)
    for section in ("tasks", "sampling", "rl", "train", "eval"):
        assert getattr(example, section) == getattr(preset, section), section
    assert example.model.base == preset.model.base
