"""The harness: records every response, resumes without redoing work, re-grades, measures flips."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from posttrain.eval.harness import EvalSpec, chunk_seed, evaluate, rescore
from posttrain.eval.records import SAMPLES, EvalDir, EvalDirError, load_eval
from posttrain.rewards import SyncVerifier
from posttrain.tasks.domains import load_domain
from posttrain.tasks.suites import Suite
from posttrain.types import Verdict


def _answers(correct: set[int]) -> dict[str, str]:
    return {f"say {i}": str(i) if i in correct else "nope" for i in range(20)}


def test_records_every_response_and_summarizes(tmp_path, jsonl_suite, fake_engine_cls):
    suite = load_domain(str(jsonl_suite)).suite()
    engine = fake_engine_cls(_answers(set(range(15))))
    run = evaluate(engine, suite, EvalSpec(model="fake", suite=str(jsonl_suite), batch=6), tmp_path / "out")
    s = run.summary
    assert s.n_tasks == 20 and s.pass_at[1].value == pytest.approx(0.75) and s.n_errors == 0
    assert engine.calls == 4  # ceil(20 / 6) chunks
    lines = (tmp_path / "out" / SAMPLES).read_text().splitlines()
    assert len(lines) == 20 and {json.loads(line)["task_id"] for line in lines} == {t.id for t in suite.tasks}
    loaded = load_eval(tmp_path / "out")
    assert loaded.meta["verifier"].startswith("per_task@") and {r.verifier for r in loaded.records} == {
        r.verifier for r in run.records}
    assert all(r.verifier.startswith("exact@") for r in loaded.records)  # the version hash of the checking code
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["pass@1"] == pytest.approx(0.75)


def test_interrupted_eval_resumes_without_redoing_finished_samples(tmp_path, jsonl_suite, fake_engine_cls):
    suite = load_domain(str(jsonl_suite)).suite()
    spec = EvalSpec(model="fake", suite="s", n=3, temperature=1.0, seed=7, batch=4)
    reference = evaluate(fake_engine_cls(), suite, spec, tmp_path / "ref")

    crashing = fake_engine_cls(fail_after=2)  # dies on the third of five chunks
    with pytest.raises(RuntimeError, match="injected"):
        evaluate(crashing, suite, spec, tmp_path / "out")
    assert len(EvalDir(tmp_path / "out").records()) == 2 * 4 * 3
    with (tmp_path / "out" / SAMPLES).open("a") as f:
        f.write('{"task_id": "t1')  # a line torn by the crash is ignored
    resumed = fake_engine_cls()
    run = evaluate(resumed, suite, spec, tmp_path / "out")
    assert resumed.calls == 3  # only the three unfinished chunks
    assert resumed.prompts_seen == [t.prompt for t in suite.tasks[8:]]
    assert run.meta["resumed"] == 1
    def key(r):
        return r.key

    assert [(r.key, r.response, r.passed) for r in sorted(run.records, key=key)] == [
        (r.key, r.response, r.passed) for r in sorted(reference.records, key=key)]
    again = fake_engine_cls()
    evaluate(again, suite, spec, tmp_path / "out")
    assert again.calls == 0  # finished: nothing to redo


def test_resume_refuses_other_settings(tmp_path, jsonl_suite, fake_engine_cls):
    suite = load_domain(str(jsonl_suite)).suite()
    evaluate(fake_engine_cls(), suite, EvalSpec(model="fake", suite="s"), tmp_path / "out")
    with pytest.raises(EvalDirError, match="max_tokens"):
        evaluate(fake_engine_cls(), suite, EvalSpec(model="fake", suite="s", max_tokens=9), tmp_path / "out")


@dataclass
class AcceptsNope(SyncVerifier):
    """A fixed grader: the gold answer or the literal "nope"."""

    name: str = "accepts_nope"

    def verify(self, task, response):
        hit = response.strip() in (task.answer, "nope")
        return Verdict(score=float(hit), passed=hit)


def test_rescore_regrades_without_the_model(tmp_path, jsonl_suite, fake_engine_cls):
    suite = load_domain(str(jsonl_suite)).suite()
    evaluate(fake_engine_cls(_answers(set(range(10)))), suite, EvalSpec(model="fake", suite=str(jsonl_suite)), tmp_path / "out")
    assert sum(r.passed for r in load_eval(tmp_path / "out").records) == 10
    run, changed = rescore(tmp_path / "out")  # the suite's own verifier again: nothing changes
    assert changed == 0
    run, changed = rescore(tmp_path / "out", Suite("fixed", suite.tasks, AcceptsNope()))
    assert changed == 10 and run.summary.pass_at[1].value == 1.0
    reloaded = load_eval(tmp_path / "out")
    assert len(reloaded.records) == 20 and all(r.verifier.startswith("accepts_nope@") for r in reloaded.records)
    assert reloaded.meta["verifier"].startswith("accepts_nope@") and len(reloaded.meta["rescored"]) == 2


@dataclass
class Finds(SyncVerifier):
    """A grader with structured findings: what it got, beside a text for people."""

    name: str = "finds"

    def verify(self, task, response):
        hit = response.strip() == task.answer
        return Verdict(score=float(hit), passed=hit, details=f"got {response.strip()!r}", info={"got": response.strip()})


def test_verdict_info_is_recorded_read_back_and_regraded(tmp_path, jsonl_suite, fake_engine_cls):
    suite = Suite("finds", load_domain(str(jsonl_suite)).suite().tasks, Finds())
    evaluate(fake_engine_cls(_answers(set(range(10)))), suite, EvalSpec(model="fake", suite="s"), tmp_path / "out")
    records = {r.task_id: r for r in load_eval(tmp_path / "out").records}
    assert records["t03"].info == {"got": "3"} and records["t15"].info == {"got": "nope"}
    assert records["t15"].details == "got 'nope'"
    run, _ = rescore(tmp_path / "out", Suite("fixed", suite.tasks, AcceptsNope()))  # a grader without findings
    assert all(r.info == {} for r in load_eval(tmp_path / "out").records)


def test_a_record_from_before_info_reads_with_empty_info(tmp_path):
    d = EvalDir(tmp_path / "old")
    d.start({"model": "m", "suite": "s"}, [{"id": "t", "prompt": "p", "answer": "a"}])
    old = {"task_id": "t", "response": "a", "score": 1.0, "passed": True, "status": "ok", "verifier": "exact@x",
           "details": '{"passed": 1, "total": 1}', "sample": 0, "repeat": 0}
    (tmp_path / "old" / SAMPLES).write_text(json.dumps(old) + "\n" + json.dumps({**old, "sample": 1, "info": None}) + "\n")
    records = d.records()
    assert [r.info for r in records] == [{}, {}] and records[0].details == old["details"]  # nothing rewritten


def test_repeat_measures_flip_rate(tmp_path, jsonl_suite, fake_engine_cls):
    suite = load_domain(str(jsonl_suite)).suite()
    spec = EvalSpec(model="fake", suite="s", repeat=4)
    steady = evaluate(fake_engine_cls(_answers(set(range(20)))), suite, spec).summary
    assert steady.repeats == 4 and steady.flip_rate == 0 and steady.flaky_tasks == []
    noisy = evaluate(fake_engine_cls(_answers(set(range(20))), noise=0.3), suite, spec).summary
    assert noisy.flip_rate > 0.1 and len(noisy.flaky_tasks) >= 5
    assert all(t.flip_rate > 0 for t in noisy.tasks if t.task_id in noisy.flaky_tasks)


def test_spec_validation_and_seeds():
    with pytest.raises(ValueError, match="temperature"):
        EvalSpec(model="m", suite="s", n=4)
    with pytest.raises(ValueError):
        EvalSpec(model="m", suite="s", ks=(0,))
    assert chunk_seed(0, 1) != chunk_seed(1, 0) and chunk_seed(3, 4) == chunk_seed(3, 4)


@pytest.mark.slow
def test_pass_at_k_over_samples_with_the_local_engine(tmp_path, tiny_model_dir):
    from posttrain.resolve import resolve_model

    suite = load_domain("arith:add", limit=6).suite()
    engine = resolve_model(str(tiny_model_dir)).engine
    spec = EvalSpec(model=str(tiny_model_dir), suite="arith:add", n=4, ks=(1, 2, 4), temperature=1.0, max_tokens=4)
    run = evaluate(engine, suite, spec, tmp_path / "out")
    s = run.summary
    assert s.n_samples == 24 and s.tokens_out > 0 and s.tokens_in > 0 and s.latency.p50 > 0
    assert 0 <= s.pass_at[1].value <= s.pass_at[2].value <= s.pass_at[4].value <= 1
    again = evaluate(resolve_model(str(tiny_model_dir)).engine, suite, spec, tmp_path / "again")
    assert [r.response for r in again.records] == [r.response for r in run.records]  # seeded: reproducible


def test_a_prompt_longer_than_the_context_is_a_recorded_failure_not_a_crashed_evaluation(tmp_path, tiny_model_dir):
    """As in training (tests/rl/test_rollout.py): a held-out task the model cannot read scores 0 for this model,
    with the reason, and the other tasks are sampled and judged as usual."""
    from posttrain.resolve import resolve_model
    from posttrain.rewards import ExactMatch
    from posttrain.types import Task

    engine = resolve_model(str(tiny_model_dir)).engine
    assert engine.max_context is not None
    tasks = [Task("a", "1+1=", "2"), Task("long", "1+" * engine.max_context + "1=", "0"), Task("b", "2+2=", "4")]
    spec = EvalSpec(model=str(tiny_model_dir), suite="mixed", n=2, ks=(1,), temperature=1.0, max_tokens=3)
    run = evaluate(engine, Suite("mixed", tasks, ExactMatch()), spec, tmp_path / "out")
    by_task = {}
    for r in run.records:
        by_task.setdefault(r.task_id, []).append(r)
    assert sorted(by_task) == ["a", "b", "long"] and all(len(v) == 2 for v in by_task.values())
    assert all(r.verifier == "context" and r.score == 0.0 and not r.passed and r.response == "" for r in by_task["long"])
    assert "context holds" in by_task["long"][0].details
    assert all(r.verifier != "context" and r.tokens_out for t in ("a", "b") for r in by_task[t])
    assert run.summary.n_samples == 6
