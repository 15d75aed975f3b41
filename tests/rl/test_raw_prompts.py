"""The built-in quickstart path keeps its raw prompts byte for byte: with `model.prompt_format = "auto"` on a
checkpoint without a chat template (the built-in base is one), rollouts and evaluations send exactly what the
code before chat templates sent (rollouts: `engine.encode([task.prompt])`, evaluation: `task.prompt` as text) with
the sampling parameters untouched, so the quickstart's figures cannot move."""

from __future__ import annotations

from posttrain.config import load_config
from posttrain.engine.mock import MockEngine
from posttrain.eval.training import evaluate_in_training
from posttrain.models.io import load_model
from posttrain.rl.build import build_domains, build_held_out, build_prompt_renderer, build_rollouter, sampling_params
from posttrain.rl.rollout import run_sync
from posttrain.sandbox.sandboxes import local_sandboxes
from posttrain.store import RunStore


def test_quickstart_prompts_are_the_raw_prompts_before_chat_templates(tiny_model_dir, tmp_path):
    # the quickstart's own config (the defaults), pointed at a template-less checkpoint as the quickstart points at its base
    cfg = load_config(None, [f"model.path='{tiny_model_dir}'", f"run_dir='{tmp_path}'"])
    _, tokenizer = load_model(tiny_model_dir)
    renderer = build_prompt_renderer(cfg.model, tokenizer)
    assert renderer.mode == "raw" and renderer.system_prompt is None and renderer.end_of_turn == ()
    domains = build_domains(cfg)
    params = sampling_params(cfg, domains)
    tasks = domains[0].held_out(32, seed=0)

    engine = MockEngine(["1"], tokenizer=tokenizer, cycle=True)
    run_sync(build_rollouter(cfg, engine, domains, params, local_sandboxes()), tasks, 2)
    (prompts, used), = engine.calls
    assert prompts == [tokenizer.encode(t.prompt) for t in tasks]  # the ids the engine encoded before: BOS + chars
    assert [bytes(tokenizer.decode(p), "utf-8") for p in prompts] == [t.prompt.encode() for t in tasks]
    assert used.stop_token_ids == params.stop_token_ids == () and used.stop == params.stop

    selection, _ = build_held_out(cfg.eval, domains, cfg.seed)
    engine = MockEngine(["1"], tokenizer=tokenizer, cycle=True)
    with RunStore(tmp_path / "run.sqlite") as store:
        evaluate_in_training(engine, selection[0], "held_out", store, 0, params.max_tokens, renderer)
    (prompts, used), = engine.calls
    assert prompts == [t.prompt for t in selection[0].tasks] and used.stop_token_ids == ()  # text, as before
