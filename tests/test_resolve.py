"""`--model`: checkpoints, run directories at a step, endpoints; and `posttrain eval` end to end."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.eval.harness import EvalSpec, evaluate
from posttrain.resolve import ModelSpecError, resolve_model
from posttrain.tasks.domains import load_domain

runner = CliRunner()


def test_bad_specs_are_user_errors(tmp_path, tiny_model_dir):
    with pytest.raises(ModelSpecError, match="no such directory"):
        resolve_model(str(tmp_path / "missing"))
    with pytest.raises(ModelSpecError, match="@step needs a training run"):
        resolve_model(f"{tiny_model_dir}@3")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelSpecError, match="not a checkpoint"):
        resolve_model(str(tmp_path / "empty"))
    res = runner.invoke(app, ["eval", "--model", str(tmp_path / "missing"), "--suite", "arith:add"])
    assert res.exit_code == 2 and "no such directory" in res.output


def test_run_directory_at_a_step(tmp_path, tiny_model_dir):
    from posttrain.models.io import load_model
    from posttrain.store.checkpoints import TrainerState, save_checkpoint
    from posttrain.store.run_store import RunStore

    run = tmp_path / "run"
    RunStore(run / "run.sqlite").close()
    model, tok = load_model(tiny_model_dir)
    for step in (1, 2):
        save_checkpoint(run, step, model, tok, TrainerState(step, {}, {}, None, None, 1.0))
    got = resolve_model(f"{run}@1")
    assert got.info["step"] == 1 and got.info["path"].endswith("step_000001")
    with pytest.raises(ModelSpecError, match=r"no checkpoint at step 7 \(stored: 1, 2\)"):
        resolve_model(f"{run}@7")
    assert resolve_model(str(run)).info["step"] == 2  # no final/: the newest checkpoint
    res = runner.invoke(app, ["eval", "--model", f"{run}@x", "--suite", "arith:add"])
    assert res.exit_code == 2 and "must be an integer" in res.output


@pytest.mark.slow
def test_cli_eval_with_a_local_checkpoint_then_rescore(tmp_path, tiny_model_dir):
    out = tmp_path / "ev"
    args = ["eval", "--model", str(tiny_model_dir), "--suite", "arith:add", "--limit", "6", "-n", "3", "-k", "1,3",
            "--temperature", "1", "--max-tokens", "4", "--out", str(out), "--json", "--price", "1,2,3.6"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["n_tasks"] == 6 and s["n_samples"] == 18 and "pass@3" in s and s["cost"] > 0
    again = runner.invoke(app, args)  # finished: resumes to the same numbers without sampling
    assert json.loads(again.stdout)["pass@1"] == s["pass@1"]
    res = runner.invoke(app, ["eval", "--rescore", str(out), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["changed"] == 0


def _fake_openai(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/models"):
        return httpx.Response(200, json={"data": [{"id": "fake-model"}]})
    body = json.loads(request.content)
    prompt = body["prompt"]
    answer = str(eval(prompt.rstrip("=")))
    choices = [{"index": i, "text": answer, "finish_reason": "stop", "logprobs": None} for i in range(body.get("n", 1))]
    return httpx.Response(200, json={"choices": choices, "usage": {"prompt_tokens": 7, "completion_tokens": 2}})


def test_endpoint_model_through_the_openai_engine():
    resolved = resolve_model("http://fake.local/v1", engine_options={"transport": httpx.MockTransport(_fake_openai)})
    assert resolved.info["served_model"] == "fake-model"
    suite = load_domain("arith:add", limit=5).suite()
    run = evaluate(resolved.engine, suite, EvalSpec(model="http://fake.local/v1", suite="arith:add", max_tokens=8))
    s = run.summary
    assert s.pass_at[1].value == 1.0 and s.tokens_in == 5 * 7 and s.tokens_out == 5 * 2 and s.latency.p50 > 0


def test_cli_repeat_reports_flakiness(tmp_path, tiny_model_dir):
    res = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--suite", "arith:add", "--limit", "4", "--repeat", "3",
                              "--temperature", "1", "--max-tokens", "3", "--out", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    # the local engine with per-chunk seeds is deterministic: three repeats, no flips
    assert s["repeats"] == 3 and s["n_samples"] == 12 and s["flip_rate"] == 0 and s["flaky_tasks"] == []


@pytest.mark.slow
def test_eval_max_tokens_defaults_to_the_suites_and_fits_a_served_model(tmp_path, tiny_model_dir):
    """Without --max-tokens an eval asks for the suite's own budget (arith:add: 8), which fits a small model's
    context behind `posttrain serve`: 7 prompt tokens + 256 did not fit the tiny model's 256."""
    from posttrain.engine.serve.server import ServeConfig, ServerThread, create_app
    from posttrain.resolve import load_served_model

    served = load_served_model(str(tiny_model_dir))
    budget = load_domain("arith:add").sampling.max_tokens
    assert budget < 256
    with ServerThread(create_app(served.engine, ServeConfig(served.name), served.template)) as server:
        res = runner.invoke(app, ["eval", "--model", f"{server.url}/v1", "--suite", "arith:add", "--limit", "3",
                                  "--out", str(tmp_path / "served"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["n_samples"] == 3
    assert json.loads((tmp_path / "served" / "meta.json").read_text())["max_tokens"] == budget
    res = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--suite", "arith:add", "--limit", "2",
                              "--max-tokens", "3", "--out", str(tmp_path / "given"), "--json"])
    assert res.exit_code == 0 and json.loads((tmp_path / "given" / "meta.json").read_text())["max_tokens"] == 3
