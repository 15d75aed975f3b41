"""Post-train your own chat model, end to end on a tiny chat checkpoint built here (examples/chat_model.toml):
the training prompt, the evaluation prompt and the server's prompt of one task are token for token what
transformers' `apply_chat_template(..., add_generation_prompt=True)` gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chat_models import make_chat_model
from posttrain.cli.app import app
from posttrain.config import load_config
from posttrain.rl.build import build
from posttrain.rl.rollout import run_sync
from posttrain.types import MESSAGES_KEY

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "chat_model.toml"
runner = CliRunner()


def hf_ids(path, messages) -> list[int]:
    from transformers import AutoTokenizer

    out = AutoTokenizer.from_pretrained(str(path)).apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """examples/chat_model.toml with a tiny Qwen3-shaped chat checkpoint, two steps, through `posttrain train`."""
    root = tmp_path_factory.mktemp("chat")
    ckpt = make_chat_model(root / "ckpt", "qwen3")
    overrides = [f"model.path='{ckpt}'", f"run_dir='{root / 'runs'}'", f"tasks.source='{REPO / 'examples' / 'chat_tasks.jsonl'}'",
                 "sampling.n=2", "sampling.max_tokens=8", "train.steps=2", "train.prompts_per_step=2",
                 "eval.every=1", "eval.size=20", "train.checkpoint_every=0", "tensorboard=false"]
    res = runner.invoke(app, ["train", str(EXAMPLE), *[x for o in overrides for x in ("--set", o)]])
    assert res.exit_code == 0, res.output
    return load_config(EXAMPLE, overrides), ckpt


def _expected(cfg, task):
    convo = task.meta.get(MESSAGES_KEY) or [{"role": "user", "content": task.prompt}]
    return convo if convo[0]["role"] == "system" else [{"role": "system", "content": cfg.model.system_prompt}, *convo]


@pytest.mark.slow
def test_training_evaluation_and_server_prompts_are_apply_chat_template(trained):
    from posttrain.engine.serve.openai_protocol import ChatCompletionRequest
    from posttrain.engine.serve.openai_service import ServeConfig, Service
    from posttrain.eval.harness import EvalSpec, evaluate
    from posttrain.resolve import load_served_model, resolve_model
    from posttrain.tasks.suites import Suite

    cfg, ckpt = trained
    parts = build(cfg, store=False)
    tasks = parts.reporting[0].tasks
    kinds = {("system" if t.meta.get(MESSAGES_KEY, [{}])[0].get("role") == "system" else "turns")
             if MESSAGES_KEY in t.meta else "prompt" for t in tasks}
    assert kinds == {"prompt", "turns", "system"}  # plain prompts, few-shot turns and own system messages alike
    want = [hf_ids(ckpt, _expected(cfg, t)) for t in tasks]
    # training: the rollouter's context ids
    groups = run_sync(parts.rollouter, tasks, 1)
    assert [g.trajectories[0].turns[0].context_ids for g in groups] == want
    # `posttrain eval --model RUN`: the run's best/ (its template saved with it) and the run's own system prompt
    resolved = resolve_model(str(cfg.path))
    assert resolved.info["prompt_format"] == "chat" and Path(resolved.info["path"]).name == "best"
    seen = []
    generate = resolved.engine.agenerate

    async def spy(prompts, params):
        seen.append((prompts, params))
        return await generate(prompts, params)

    resolved.engine.agenerate = spy
    evaluate(resolved.engine, Suite("chat", tasks, parts.domains[0].verifier), EvalSpec("run", "chat", max_tokens=4,
                                                                                           batch=len(tasks)),
             renderer=resolved.renderer)
    assert [list(p) for p in seen[0][0]] == want
    im_end = parts.tokenizer.backend.token_to_id("<|im_end|>")
    assert im_end in seen[0][1].stop_token_ids  # the end of the turn stops a reply
    # `posttrain serve RUN`: a client sends the task's conversation; the run's system prompt goes first
    served = load_served_model(str(cfg.path))
    service = Service(served.engine, ServeConfig("m"), served.template, served.renderer)
    try:
        for task, ids in zip(tasks, want):
            convo = task.meta.get(MESSAGES_KEY) or [{"role": "user", "content": task.prompt}]
            req = ChatCompletionRequest(model="m", messages=convo)
            got, _ = service.chat_prompt(req)
            assert got == ids
        job = service.prepare(req, [got], 4, 4, 0)
        assert im_end in job.params.stop_token_ids
    finally:
        service.close()


def test_the_run_evaluates_on_its_own_terms_and_its_checkpoints_keep_the_template(trained, tmp_path):
    cfg, ckpt = trained
    template = json.loads((ckpt / "tokenizer_config.json").read_text())["chat_template"]
    for saved in ("best", "final"):
        assert json.loads((cfg.path / saved / "tokenizer_config.json").read_text())["chat_template"] == template
    res = runner.invoke(app, ["eval", "--model", str(cfg.path), "--json", "--out", str(tmp_path / "e")])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["split"] == "reporting" and "numeric" in got["verifier"] and got["prompt_format"] == "chat"


def test_an_agent_prefix_opens_with_the_system_prompt_and_a_chat_template_is_refused_for_agents(trained, tiny_model_dir):
    from posttrain.agent.models import EngineModel
    from posttrain.config import ConfigError
    from posttrain.engine.mock import MockEngine
    from posttrain.models.io import load_model
    from posttrain.rl.build import build_domains, build_rollouter, sampling_params
    from posttrain.sandbox.sandboxes import local_sandboxes

    _, ckpt = trained
    cfg = load_config(None, [f"model.path='{tiny_model_dir}'", "tasks.source='agent:lookup'", "tasks.digits=2",
                             "model.system_prompt='Be careful.'", "sampling.max_tokens=80"])
    domains = build_domains(cfg)
    _, tok = load_model(tiny_model_dir)
    engine = MockEngine(["x"], tokenizer=tok)
    rollouter = build_rollouter(cfg, engine, domains, sampling_params(cfg, domains), local_sandboxes())
    prefix = EngineModel(engine).prefix([], rollouter.spec.system)
    assert prefix.content.startswith("<system>\nBe careful.\nFind the answer") and rollouter.spec is domains[0].agent
    chat = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(ckpt)})})
    _, chat_tok = load_model(ckpt)
    with pytest.raises(ConfigError, match="prompt_format = \"raw\" for an agent domain"):
        build_rollouter(chat, MockEngine(["x"], tokenizer=chat_tok), build_domains(chat), sampling_params(chat, domains),
                        local_sandboxes())
