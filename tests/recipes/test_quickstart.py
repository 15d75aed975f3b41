"""`posttrain quickstart` end to end on a tiny budget: the JSON contract and the stored run."""

import json

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.store import RunStore

TINY = [
    "model.base.hidden_size=16",
    "model.base.num_layers=1",
    "model.base.intermediate_size=32",
    "model.base.num_heads=2",
    "model.base.digits=1",
    "model.base.batch_size=16",
    "model.base.max_steps=4",
    "model.base.eval_every=2",
    "model.base.eval_size=16",
    "tasks.digits=1",
    "sampling.n=4",
    "sampling.max_tokens=3",
    "train.steps=3",
    "train.prompts_per_step=2",
    "eval.size=10",
    "train.checkpoint_every=0",
    "tensorboard=false",
]


@pytest.mark.slow
def test_quickstart_json_contract(tmp_path):
    args = ["quickstart", "--seed", "3", "--json"]
    for o in TINY + [f"model.base.cache_dir='{tmp_path / 'cache'}'", f"run_dir='{tmp_path / 'runs'}'"]:
        args += ["--set", o]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for key in ("greedy_before", "greedy_after", "pass1_before", "pass1_after", "seconds"):
        assert 0.0 <= out[key] <= 1.0 or key == "seconds"
    assert out["seed"] == 3 and out["steps"] == 3
    with RunStore(f"{out['run_dir']}/run.sqlite") as store:
        figures = store.evals("quickstart")[0][2]
        assert figures["greedy_after"] == out["greedy_after"]
        assert store.info()["config"]["seed"] == 3
        assert store.info()["machine"]["cores"] >= 1 and store.info()["machine"]["cpu"]  # which machine made it
    # `posttrain eval --model RUN` on the run's own terms (reporting half, its verifier) gives the quickstart's figure
    ev = CliRunner().invoke(app, ["eval", "--model", out["run_dir"], "--json", "--out", str(tmp_path / "own")])
    assert ev.exit_code == 0, ev.output
    own = json.loads(ev.stdout.strip().splitlines()[-1])
    assert own["split"] == "reporting" and own["n_tasks"] == out["n_held_out"] and own["pass@1"] == out["greedy_after"]
    # the base model is now cached: a second run reuses it
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and json.loads(again.stdout.strip().splitlines()[-1])["base_cached"] is True


AGENT_TINY = [
    "model.base.hidden_size=16", "model.base.num_layers=1", "model.base.intermediate_size=32",
    "model.base.num_heads=2", "model.base.digits=1", "model.base.batch_size=4", "model.base.max_steps=2",
    "model.base.eval_every=2", "model.base.eval_size=16", "tasks.digits=1", "sampling.n=2",
    "train.steps=2", "train.prompts_per_step=2", "eval.size=8", "train.checkpoint_every=0",
    "train.drop_zero_variance=false", "tensorboard=false",
]


@pytest.mark.slow
def test_quickstart_agent_json_contract(tmp_path):
    """`--agent`: the lookup base (pre-trained on oracle episodes), multi-turn GRPO, episode success before/after."""
    args = ["quickstart", "--agent", "--seed", "1", "--json"]
    for o in AGENT_TINY + [f"model.base.cache_dir='{tmp_path / 'cache'}'", f"run_dir='{tmp_path / 'runs'}'"]:
        args += ["--set", o]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for key in ("greedy_before", "greedy_after", "pass1_before", "pass1_after"):
        assert 0.0 <= out[key] <= 1.0
    assert out["steps"] == 2 and out["run_dir"].endswith("quickstart-agent-seed1") and not out["base_in_band"]
    with RunStore(f"{out['run_dir']}/run.sqlite") as store:
        assert store.info()["config"]["tasks"]["source"] == "agent:lookup"
        assert store.episodes(step=2) and "agent/turns_per_episode" in store.steps()[-1][1]
        assert store.alerts()[0]["kind"] == "base_out_of_band"  # a 2-step base is far below its band: said loudly


def test_the_agent_example_is_the_quickstart_agent_run():
    from pathlib import Path

    from posttrain.config import load_config
    from posttrain.recipes.quickstart import AGENT_OVERRIDES

    example = load_config(Path(__file__).parents[2] / "examples" / "agent.toml", [])
    preset = load_config(None, AGENT_OVERRIDES)
    skip = {"name"}
    assert {k: v for k, v in example.model_dump().items() if k not in skip} == \
        {k: v for k, v in preset.model_dump().items() if k not in skip}
