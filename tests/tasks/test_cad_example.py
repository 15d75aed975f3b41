"""examples/cad.toml runs the RL loop end to end on a built-in base: OpenSCAD programs sampled, judged by the
`cad` verifier in the sandbox (judged, never errored), stored; the base shrunk to seconds here; max_tokens
at the preflight's floor (it refuses a cap that holds no gold program)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.store import RunStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "cad.toml"
TINY = ["model.base.hidden_size=16", "model.base.num_layers=1", "model.base.intermediate_size=32",
        "model.base.num_heads=2", "model.base.digits=1", "model.base.batch_size=4", "model.base.max_steps=2",
        "model.base.eval_every=2", "model.base.eval_size=16", "sampling.max_tokens=96", "train.steps=2",
        "train.prompts_per_step=2", "eval.size=4", "eval.every=2", "tensorboard=false"]


@pytest.mark.slow
def test_the_cad_example_trains_a_few_steps(tmp_path):
    args = ["train", str(EXAMPLE)]
    for o in TINY + [f"model.base.cache_dir='{tmp_path / 'cache'}'", f"run_dir='{tmp_path / 'runs'}'"]:
        args += ["--set", o]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["final_model"].endswith("final")
    with RunStore(f"{tmp_path / 'runs' / 'cad'}/run.sqlite") as store:
        assert store.info()["config"]["tasks"]["source"] == "cad:parts"
        steps = store.steps()
        assert len(steps) == 2
        metrics = steps[-1][1]
        # every sampled program was judged by the cad verifier (an invalid program scores 0, it is not an error)
        assert metrics["verifier_errors"] == 0 and metrics["verifier_timeouts"] == 0 and metrics["env_errors"] == 0
        assert 0.0 <= metrics["reward"] <= 1.0 and metrics["verifier_latency_max"] > 0


def test_the_cad_example_is_the_quickstart_cad_run():
    from posttrain.config import load_config
    from posttrain.recipes.quickstart import CAD_OVERRIDES

    example = load_config(EXAMPLE, [])
    preset = load_config(None, CAD_OVERRIDES)
    skip = {"name"}
    assert {k: v for k, v in example.model_dump().items() if k not in skip} == \
        {k: v for k, v in preset.model_dump().items() if k not in skip}


CAD_TINY = [o for o in TINY if not o.startswith(("sampling.", "train."))] + [
    "sampling.n=2", "train.steps=2", "train.prompts_per_step=2", "eval.size=8", "eval.every=2",
    "train.checkpoint_every=0", "train.drop_zero_variance=false"]


@pytest.mark.slow
def test_quickstart_cad_json_contract(tmp_path):
    """`--cad`: the CAD base (pre-trained on brief gold programs), GRPO on cad:parts, held-out pass rates before/after."""
    args = ["quickstart", "--cad", "--seed", "1", "--json"]
    for o in CAD_TINY + [f"model.base.cache_dir='{tmp_path / 'cache'}'", f"run_dir='{tmp_path / 'runs'}'"]:
        args += ["--set", o]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for key in ("greedy_before", "greedy_after", "pass1_before", "pass1_after"):
        assert 0.0 <= out[key] <= 1.0
    assert out["steps"] == 2 and out["run_dir"].endswith("quickstart-cad-seed1") and not out["base_in_band"]
    with RunStore(f"{out['run_dir']}/run.sqlite") as store:
        cfg = store.info()["config"]
        assert cfg["tasks"]["source"] == "cad:parts" and cfg["tasks"]["options"]["brief"] is True
        assert cfg["model"]["base"]["family"] == "cad:parts"
        assert store.steps()[-1][1]["verifier_errors"] == 0
        assert store.alerts()[0]["kind"] == "base_out_of_band"  # a 2-step base is far below its band: said loudly
    assert list((tmp_path / "cache" / "base").glob("cad-parts-l1-s1-*"))


def test_quickstart_refuses_agent_and_cad_together():
    res = CliRunner().invoke(app, ["quickstart", "--cad", "--agent"])
    assert res.exit_code != 0 and "choose one" in res.output
