"""Code-writing tasks: canonical programs, tests run in the sandbox, the split, options, the dedup
wrapper, the built-in code base and a training smoke run."""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass

import pytest

from posttrain.rewards import PerTask, make_verifier, score_sync
from posttrain.rewards.dedup import Deduplicated
from posttrain.tasks import TaskFileError, load_domain
from posttrain.tasks.codegen import CodeSource, apply_ops, linear_expression, ops_expression
from posttrain.tasks.validate import validate_suite
from posttrain.types import Task, Verdict


def test_canonical_expressions_by_hand():
    assert ops_expression([("+", 3), ("*", 2), ("-", 1)]) == "(x+3)*2-1"
    assert ops_expression([("*", 3), ("+", 2)]) == "x*3+2"
    assert ops_expression([("-", 3), ("//", 2), ("%", 5), ("-", 1)]) == "(x-3)//2%5-1"
    assert apply_ops(4, [("+", 3), ("*", 2), ("-", 1)]) == 13
    assert apply_ops(-7, [("//", 2), ("%", 5)]) == (-7 // 2) % 5
    assert [linear_expression(a, b) for a, b in [(2, 3), (1, -4), (3, 0), (-1, 1), (0, 5)]] == [
        "2*x+3", "x-4", "3*x", "-x+1", "5"]


def test_tasks_carry_their_tests_and_verifier():
    task = CodeSource("ops").take(1, "train")[0]
    assert task.prompt.startswith("x ") and task.prompt.endswith(" ->")
    assert task.meta["entry_point"] == "f" and "{response}" in task.meta["solution_template"]
    assert task.meta["tests"].count("assert f(") == 6
    assert json.loads(json.dumps(task.meta)) == task.meta  # survives the run store
    linear = CodeSource("linear").take(1, "train")[0]
    shown = linear.prompt.split(" ->")[0].split()
    assert all(f"assert {s.replace('=', ' == ', 1)}" in linear.meta["tests"] for s in shown)


@pytest.mark.parametrize("source", [
    CodeSource("ops"), CodeSource("ops", digits=2, max_ops=5, operators="+-*/%"), CodeSource("linear", digits=2),
])
@pytest.mark.slow
def test_gold_programs_pass_in_the_sandbox(source):
    suite = load_domain(f"code:{source.family}", limit=60, digits=source.digits,
                       **({"max_ops": source.max_ops, "operators": source.operators} if source.family == "ops" else {})).suite()
    report = validate_suite(suite)
    assert report.ok, report.failures[:3]
    assert report.verifier.startswith("python_tests@")  # the shared sandboxed verifier judged them


def test_equivalent_programs_pass_and_wrong_ones_do_not():
    ops = Task("t", "x +3 *2 -1 ->", "(x+3)*2-1", CodeSource("ops")._draw(random.Random(0)).meta)
    meta = dict(ops.meta, tests="".join(f"assert f({x}) == {(x + 3) * 2 - 1}\n" for x in (-5, 0, 1, 2, 7, 11)))
    task = Task("t", ops.prompt, ops.answer, meta)
    responses = ["(x+3)*2-1", "2*x+5", "x*2+6-1", "x+3*2-1", "x)", "__import__('os')._exit(0)", "(x+3)*2-1 if x < 3 else 0"]
    verdicts = score_sync(PerTask(), [task] * len(responses), responses)
    assert [v.passed for v in verdicts] == [True, True, True, False, False, False, False]
    assert verdicts[3].score == 1 / 6  # x+5 instead of 2*x+5: right at x=0 only (partial credit per test)
    assert verdicts[4].score == 0.0 and verdicts[5].score == 0.0  # a syntax error; exiting before the tests
    assert verdicts[6].score == 4 / 6
    linear = CodeSource("linear").take(1, "train")[0]
    shown = [int(s.split("=")[1]) for s in linear.prompt.split(" ->")[0].split()]
    lookup = f"{shown}[x]"  # memorising the shown examples fails the hidden inputs
    v = score_sync(PerTask(), [linear], [lookup])[0]
    assert not v.passed and v.score <= 0.5


def test_split_is_deterministic_and_disjoint():
    source = CodeSource("ops", held_out_fraction=0.2)
    held = source.take(200, "held_out", seed=0)
    assert held == source.take(200, "held_out", seed=0) and len(held) == 200
    rng = random.Random(1)
    train = [source.sample(rng) for _ in range(500)]
    assert not {t.meta["split_key"] for t in held} & {t.meta["split_key"] for t in train}
    # The same specification has one split whatever the difficulty settings (ids differ, keys do not).
    other = CodeSource("ops", max_ops=4, held_out_fraction=0.2)
    assert all(other.split_of(t) == "held_out" for t in held)


def test_difficulty_knobs():
    easy = CodeSource("ops", max_ops=1).take(50, "train")
    hard = CodeSource("ops", max_ops=5, digits=2, operators="+-*/%").take(50, "train")
    assert max(len(t.answer) for t in easy) < max(len(t.answer) for t in hard)
    assert any("//" in t.answer or "%" in t.answer for t in hard)
    assert all(len(t.prompt) + len(t.answer) <= 40 for t in CodeSource("ops").take(200, "train"))


def test_options_are_checked():
    assert load_domain("code:ops", held_out_fraction=0.15, digits=2, **{"max_ops": 2}).source.name == "code-ops2-+-*-d2"
    with pytest.raises(TaskFileError, match="unknown option.*allowed: max_ops, operators, n_tests"):
        load_domain("code:ops", **{"depth": 2})
    with pytest.raises(TaskFileError, match="unknown code family 'loops'"):
        load_domain("code:loops")
    with pytest.raises(TaskFileError, match="operators must be"):
        load_domain("code:ops", **{"operators": "+&"})
    with pytest.raises(TaskFileError, match="arith:add: unknown option.*max_ops"):
        load_domain("arith:add", **{"max_ops": 2})


@dataclass
class _Counting:
    calls: list
    name: str = "counting"

    async def verify_batch(self, tasks, responses):
        self.calls.append(list(responses))
        return [Verdict(float(r == t.answer), r == t.answer) for t, r in zip(tasks, responses)]


def test_dedup_judges_each_distinct_response_once():
    inner = _Counting([])
    tasks = [Task("a", "p", "1"), Task("a", "p", "1"), Task("b", "p", "1"), Task("a", "p", "1")]
    verdicts = score_sync(Deduplicated(inner), tasks, ["1", "1", "1", "2"])
    assert inner.calls == [["1", "1", "2"]]
    assert [v.score for v in verdicts] == [1.0, 1.0, 1.0, 0.0]
    assert verdicts[0] is not verdicts[1] and verdicts[0].verifier.startswith("counting@")
    assert make_verifier({"type": "dedup", "inner": "python_tests"}).inner.name == "python_tests"


@pytest.mark.slow
def test_code_base_keys_leave_the_arithmetic_key_alone(tmp_path):
    from posttrain.config import BaseModelConfig
    from posttrain.recipes.builtin import base_key, base_task_source, ensure_base

    assert base_key(BaseModelConfig()) == "arith-add-d2-s0-9f199c7a74"  # the quickstart's cached base (BASE_FORMAT 3)
    code = BaseModelConfig(family="code:ops", digits=1)
    assert base_key(code).startswith("code-ops-d1-s0-") and isinstance(base_task_source(code), CodeSource)
    tiny = BaseModelConfig(family="code:linear", hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                           max_steps=2, batch_size=8, eval_every=1, eval_size=16, cache_dir=str(tmp_path))
    seen = []
    build = ensure_base(tiny, on_eval=lambda step, acc: seen.append((step, acc)))
    assert (build.path / "model.safetensors").exists() and build.steps == 2 and [s for s, _ in seen] == [1, 2]
    assert 0.0 <= build.accuracy <= 1.0


@pytest.mark.slow
def test_training_on_code_tasks_smoke(tiny_config):
    from posttrain.rl.trainer import Trainer

    cfg = tiny_config.model_copy(update={
        "tasks": tiny_config.tasks.model_copy(update={"source": "code:ops", "digits": 1, "options": {"max_ops": 1}}),
        "reward": tiny_config.reward.model_copy(update={"verifier": "per_task"}),
        "train": tiny_config.train.model_copy(update={"steps": 2}),
        "eval": tiny_config.eval.model_copy(update={"size": 8}),
    })
    trainer = Trainer(cfg)
    try:
        result = trainer.run()
    finally:
        trainer.close()
    assert result.steps == 2 and "greedy_accuracy" in result.final_eval
    with sqlite3.connect(cfg.path / "run.sqlite") as db:
        verifiers = [v for (v,) in db.execute("SELECT verifier FROM samples")]
    assert verifiers and all(v.startswith("python_tests@") for v in verifiers)
