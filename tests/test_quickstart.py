"""`posttrain quickstart` end to end on a tiny budget: the JSON contract and the stored run."""

import json

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
    "train.eval_size=10",
    "train.checkpoint_every=0",
    "tensorboard=false",
]


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
    # the base model is now cached: a second run reuses it
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and json.loads(again.stdout.strip().splitlines()[-1])["base_cached"] is True
