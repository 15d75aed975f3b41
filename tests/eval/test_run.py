"""`eval.run.run_eval`, the one evaluation entry point: the suite chooses the path, every caller goes through it.

A single-turn suite gives the harness's numbers unchanged; an agent suite gives episodes (through `posttrain eval`
by itself: the `--episodes` flag is gone); the trainer's held-out evaluation, the quickstart's measure and the base
model's checks reach the legs only through `run_eval` (a test that fails when a second path comes back).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import posttrain
from posttrain.agent.scripted import ScriptedAgent, call
from posttrain.engine.mock import MockEngine
from posttrain.eval import run as run_module
from posttrain.eval.harness import EvalSpec, evaluate
from posttrain.eval.records import EvalDirError, load_eval
from posttrain.eval.run import run_eval
from posttrain.rewards.verifiers import ExactMatch
from posttrain.tasks.domains import load_domain
from posttrain.tasks.suites import Suite
from posttrain.types import Task

runner = CliRunner()
SRC = Path(posttrain.__file__).parent


def _arith() -> Suite:
    tasks = [Task(f"t{i}", f"{i}+{i}=", str(2 * i)) for i in range(6)]
    return Suite("toy", tasks, ExactMatch())


def _script(prompt) -> str:  # right on even tasks, wrong on odd ones
    text = prompt if isinstance(prompt, str) else ""
    i = int(text.split("+")[0]) if "+" in text else 0
    return str(2 * i) if i % 2 == 0 else "no"


def _lookup(n: int = 2) -> Suite:
    from posttrain.eval.modes import suite_of

    return suite_of(load_domain("agent:lookup", limit=n))


def test_a_single_turn_suite_gives_the_harness_numbers_unchanged(tmp_path):
    spec = EvalSpec(model="mock", suite="toy", n=2, ks=(1, 2), temperature=1.0, seed=3, batch=4)
    before = evaluate(MockEngine(_script), _arith(), spec, tmp_path / "a")
    after = run_eval(MockEngine(_script), _arith(), spec, tmp_path / "b")
    assert [(r.key, r.response, r.passed, r.status) for r in after.records] == \
        [(r.key, r.response, r.passed, r.status) for r in before.records]
    assert after.summary.pass1 == before.summary.pass1 == pytest.approx(0.5)
    assert after.summary.pass_at[2].value == before.summary.pass_at[2].value
    assert after.episodes is None and after.episode_metrics == {}
    assert not (tmp_path / "b" / "episodes.jsonl").exists()


def test_an_agent_suite_runs_as_episodes_recorded_like_any_eval(tmp_path):
    suite = _lookup(2)
    assert suite.agent is not None  # the domain's AgentSpec rides on its suite
    spec = EvalSpec(model="scripted", suite="agent:lookup", max_tokens=64)
    run = run_eval(ScriptedAgent([call("submit", answer="?")]), suite, spec, tmp_path / "ev")
    assert run.episodes is not None and [len(eps) for eps in run.episodes] == [1, 1]
    assert len(run.records) == 2 and not any(r.passed for r in run.records)
    assert run.summary.n_tasks == 2 and run.summary.pass1 == 0.0
    assert run.episode_metrics["turns_per_episode"] >= 1
    stored = load_eval(tmp_path / "ev")
    assert stored.meta["mode"] == "episodes" and len(stored.records) == 2
    assert len((tmp_path / "ev" / "episodes.jsonl").read_text().splitlines()) == 2
    # the same settings again: every episode is already recorded, so nothing reruns (resumed like any eval)
    again = run_eval(ScriptedAgent([]), suite, spec, tmp_path / "ev")
    assert again.episodes == [[], []] and len(again.records) == 2 and again.meta["resumed"] == 1
    with pytest.raises(EvalDirError, match="episodes"):
        from posttrain.eval.harness import rescore

        rescore(tmp_path / "ev")


def _calls_into_the_legs(monkeypatch) -> dict[str, int]:
    """Count the calls `run_eval` makes to its two legs; any other caller of a leg fails the test."""
    counts = {"single_turn": 0, "episodes": 0}
    single_turn, episodes = run_module.evaluate, run_module.evaluate_agent

    def counted(kind, fn):
        def wrapper(*args, **kwargs):
            counts[kind] += 1
            return fn(*args, **kwargs)
        return wrapper

    def elsewhere(*args, **kwargs):
        raise AssertionError("an evaluation leg was called outside eval.run.run_eval")

    monkeypatch.setattr(run_module, "evaluate", counted("single_turn", single_turn))
    monkeypatch.setattr(run_module, "evaluate_agent", counted("episodes", episodes))
    monkeypatch.setattr("posttrain.eval.harness.evaluate", elsewhere)
    monkeypatch.setattr("posttrain.eval.episodes.evaluate_agent", elsewhere)
    return counts


def _held_out(parts, store, tmp_path):
    from posttrain.config import EvalConfig
    from posttrain.rl.held_out import HeldOutEvaluation

    # keep_best off: no model to save, the parts are stand-ins
    return HeldOutEvaluation(EvalConfig(keep_best=False), parts, SimpleNamespace(store=store), None, tmp_path)


def test_the_trainers_agent_suite_goes_through_run_eval(tmp_path, monkeypatch):
    from posttrain.store.run_store import RunStore

    counts = _calls_into_the_legs(monkeypatch)
    with RunStore(tmp_path / "run.sqlite") as store:
        parts = SimpleNamespace(held_out=[_lookup(2)], eval_suites={}, engine=ScriptedAgent([call("submit", answer="?")]),
                                renderer=None, sandboxes=None, params=SimpleNamespace(max_tokens=64), domains=[])
        metrics = _held_out(parts, store, tmp_path).evaluate(0)
        assert len(store.eval_samples("held_out", step=0)) == 2
    assert counts == {"single_turn": 0, "episodes": 1}
    assert metrics is not None and metrics["greedy_accuracy"] == 0.0 and metrics["agent/turns_per_episode"] >= 1


def test_the_trainers_single_turn_suites_go_through_run_eval_too(tmp_path, monkeypatch):
    from posttrain.store.run_store import RunStore

    counts = _calls_into_the_legs(monkeypatch)
    with RunStore(tmp_path / "run.sqlite") as store:
        parts = SimpleNamespace(held_out=[_arith(), _arith()], eval_suites={"suite:toy": _arith()},
                                engine=MockEngine(_script), renderer=None, sandboxes=None,
                                params=SimpleNamespace(max_tokens=8), domains=[])
        metrics = _held_out(parts, store, tmp_path).evaluate(0)
    assert counts == {"single_turn": 3, "episodes": 0}
    assert metrics is not None and metrics["greedy_accuracy"] == pytest.approx(0.5)
    assert metrics["suite:toy/pass@1"] == pytest.approx(0.5) and not any(k.startswith("agent/") for k in metrics)


def test_the_quickstarts_measure_and_accuracy_go_through_run_eval(monkeypatch):
    from posttrain.recipes.quickstart import _measure

    counts = _calls_into_the_legs(monkeypatch)
    suite = _arith()
    greedy, sampled = _measure(MockEngine(_script), suite.tasks, suite.verifier, 8, 2, 0, None)
    assert counts == {"single_turn": 2, "episodes": 0} and greedy == sampled == pytest.approx(0.5)
    lookup = _lookup(2)
    greedy, sampled = _measure(ScriptedAgent([]), lookup.tasks, lookup.verifier, 64, 2, 0, None, agent=lookup.agent)
    assert counts == {"single_turn": 2, "episodes": 2} and greedy == sampled == 0.0


def _imports(path: Path) -> list[tuple[str, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names]
    return out


def test_no_module_but_run_eval_reaches_an_evaluation_leg():
    """The legs (`harness.evaluate`, `eval/episodes.py`) are imported by `eval/run.py` alone: a second evaluation
    path chosen at a call site fails here."""
    legs = {("posttrain.eval.harness", "evaluate"), ("posttrain.eval.episodes", "evaluate_agent"),
            ("posttrain.eval.episodes", "aevaluate_agent"), ("posttrain.eval", "evaluate")}
    candidates = [p for p in SRC.rglob("*.py") if "evaluate" in p.read_text()]  # parse only what could import a leg
    found = {str(p.relative_to(SRC)) for p in candidates
             for module, name in _imports(p) if (module, name) in legs or module == "posttrain.agent.evaluate"}
    assert found == {"eval/run.py"}, found


def test_the_check_sees_a_planted_second_path(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("def f():\n    from posttrain.eval.harness import EvalSpec, evaluate\n")
    assert ("posttrain.eval.harness", "evaluate") in _imports(planted)


@pytest.mark.slow
def test_posttrain_eval_runs_an_agent_suite_as_episodes_without_the_flag(tmp_path):
    from posttrain.cli import app
    from posttrain.models import char_tokenizer, save_model
    from tiny_models import agent_model

    save_model(agent_model(layers=1), char_tokenizer(), tmp_path / "m")
    out = tmp_path / "ev"
    res = runner.invoke(app, ["eval", "--model", str(tmp_path / "m"), "--suite", "agent:lookup", "--limit", "2",
                              "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["n_tasks"] == 2 and summary["n_samples"] == 2 and summary["episode_metrics"]["turns_per_episode"] >= 1
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 2 and load_eval(out).meta["mode"] == "episodes"
    assert "no longer needed" not in res.output
    res = runner.invoke(app, ["eval", "--model", str(tmp_path / "m"), "--suite", "agent:lookup", "--episodes"])
    assert res.exit_code == 2 and "No such option" in res.output, res.output  # the no-op flag is gone


@pytest.mark.slow
def test_posttrain_eval_on_a_single_turn_suite_gives_the_harness_numbers(tmp_path, tiny_model_dir):
    from posttrain.cli import app
    from posttrain.resolve import resolve_model

    res = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--suite", "arith:add", "--limit", "4", "-n", "2",
                              "-k", "1,2", "-t", "1.0", "--seed", "5", "--json", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    cli = json.loads(res.stdout.strip().splitlines()[-1])
    domain = load_domain("arith:add", limit=4)
    spec = EvalSpec(model=str(tiny_model_dir), suite="arith:add", n=2, ks=(1, 2), temperature=1.0, seed=5,
                    max_tokens=domain.sampling.max_tokens, suite_options={"limit": 4})
    resolved = resolve_model(str(tiny_model_dir), seed=5)
    direct = evaluate(resolved.engine, domain.suite(), spec, tmp_path / "direct", renderer=resolved.renderer)
    assert cli["pass@1"] == direct.summary.pass1 and cli["n_samples"] == direct.summary.n_samples == 8
    assert [r.response for r in load_eval(tmp_path / "cli").records] == [r.response for r in direct.records]


def test_a_benchmark_built_on_episodes_refuses_a_broken_sandbox_pool():
    """Two benchmarks once reported a closed sandbox pool's zeros as the trained model's success (every per-hop
    figure 0/96): `check_env_errors` counts env_error episodes and raises over its share, on planted episodes."""
    import pytest

    from posttrain.agent.episode import Episode, EpisodeStatus
    from posttrain.eval.episodes import EnvironmentBroken, check_env_errors

    def eps(broken: int, ok: int) -> list[Episode]:
        return [Episode(f"t{i}", [], EpisodeStatus.ENV_ERROR if i < broken else EpisodeStatus.SOLVED)
                for i in range(broken + ok)]

    assert check_env_errors(eps(0, 20)) == 0
    assert check_env_errors(eps(2, 18)) == 2  # 10%: at the limit, allowed
    with pytest.raises(EnvironmentBroken, match="3 of 20 episodes at length 8 ended in an environment error"):
        check_env_errors(eps(3, 17), 0.1, "episodes at length 8")
    with pytest.raises(EnvironmentBroken):
        check_env_errors(eps(96, 0))
