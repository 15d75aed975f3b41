"""The `docs:reports` base family: its own cache key and context, pre-training batches that are the compact form's
oracle episodes (the decisive copies weighted), and a build through `ensure_base` measured by real episodes."""

from __future__ import annotations

import random

from posttrain.config import BaseModelConfig, load_config
from posttrain.models import load_model
from posttrain.models.tokenizer import char_tokenizer
from posttrain.recipes.builtin import (
    AGENT_DECISION_WEIGHT,
    DOCS_CONTEXT,
    _trace_batch,
    base_key,
    base_task_source,
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
    ids, weight = _trace_batch(tok, tasks, docs=True)
    assert ids.shape[0] == 3 and ids.shape[1] < 1000
    text = tok.decode([int(i) for i in ids[0]])
    assert '"name": "search"' in text and '"name": "submit"' in text and "tool_response" in text
    assert float(weight.max()) == AGENT_DECISION_WEIGHT
    win_ids, _ = _trace_batch(tok, tasks, random.Random(0), 120, docs=True)
    assert win_ids.shape[1] < ids.shape[1]


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
