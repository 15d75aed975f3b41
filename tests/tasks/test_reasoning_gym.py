"""reasoning-gym adapter: score parity with reasoning-gym's own `score_answer` on every generator,
options and their errors, the entry codec, the train/held-out split and the training source."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest
import reasoning_gym as rg
from reasoning_gym.factory import DATASETS

from posttrain.rewards import PerTask, make_verifier, score_sync
from posttrain.rewards.reasoning_gym import decode_entry, encode_entry, same_value, storable_entry
from posttrain.tasks import TaskFileError, load_domain
from posttrain.tasks.bounded import GenerationFailed, shared_worker
from posttrain.tasks.domains import list_domains
from posttrain.tasks.reasoning_gym import RGSource, rg_reference
from posttrain.types import Task, VerdictStatus

# Every registered generator is either checked for parity or listed here with the reason.
FAILS_WITH_DEFAULTS = {"composite": "needs a `datasets` mapping of sub-datasets; no default configuration"}
NO_GOLD = {  # entries have answer None: many answers are right, score_answer simulates or checks them
    "boxnet": "plans are checked by simulation",
    "graph_color": "any valid coloring is accepted",
    "propositional_logic": "any valid derivation is accepted",
    "rubiks_cube": "any solving move sequence is accepted",
    "rush_hour": "any solving move sequence is accepted",
}
# Entries differ between two calls with the same seed and index: parity is checked on the entry the task stored.
NONDETERMINISTIC = {"list_functions": "entry 0 of seed 0 changes from call to call in one process"}
SIZE = 2


def _roundtrip(task: Task) -> Task:
    """What the run store or a JSONL dump gives back."""
    return Task(task.id, task.prompt, task.answer, json.loads(json.dumps(task.meta)))


def _wrong_answers(gold: str) -> list[str]:
    return ["", gold[::-1] + "?", "0", gold + " 1"]


def test_every_registered_generator_is_accounted_for():
    checked = set(DATASETS) - set(FAILS_WITH_DEFAULTS) - set(NO_GOLD)
    assert len(DATASETS) >= 100 and len(checked) >= 95
    for name in FAILS_WITH_DEFAULTS:
        with pytest.raises(TaskFileError, match=f"rg:{name}"):
            load_domain(f"rg:{name}", size=SIZE).suite()
    for name in NO_GOLD:
        suite = load_domain(f"rg:{name}", size=SIZE).suite()
        assert all(t.answer is None for t in suite.tasks)


@pytest.mark.parametrize("name", sorted(set(DATASETS) - set(FAILS_WITH_DEFAULTS) - set(NO_GOLD)))
@pytest.mark.slow
def test_score_parity_with_reasoning_gym(name):
    suite = load_domain(f"rg:{name}", size=SIZE).suite()
    reference = rg.create_dataset(name, seed=0, size=SIZE)
    tasks, responses, expected = [], [], []
    for i, task in enumerate(suite.tasks):
        if name in NONDETERMINISTIC:
            entry = decode_entry(task.meta["rg"]["entry"])
        else:  # reasoning-gym's own entry, made where the tasks are made (some depend on the string hash seed)
            ref = shared_worker().call(rg_reference, name, 0, SIZE, i)
            assert task.answer == ref["answer"] and task.prompt == ref["question"]
            entry = decode_entry(ref["entry"]) if ref["entry"] is not None else reference[i]
        for response in [entry["answer"], *_wrong_answers(entry["answer"])]:
            tasks.append(_roundtrip(task))
            responses.append(response)
            try:
                expected.append(float(reference.score_answer(response, entry)))
            except Exception:  # noqa: BLE001 - reasoning-gym's scorer chokes on some wrong answers: we score those 0
                expected.append("raised")
    verdicts = score_sync(suite.verifier, tasks, responses)
    assert [v.status for v in verdicts] == [VerdictStatus.OK] * len(verdicts), [v.details for v in verdicts]
    assert [v.score if e != "raised" else "raised" for v, e in zip(verdicts, expected)] == expected
    assert all(v.score == 0.0 and "score_answer raised" in v.details for v, e in zip(verdicts, expected) if e == "raised")
    assert all(v.passed for v, r, t in zip(verdicts, responses, tasks) if r == t.answer)


def test_tag_extraction_follows_reasoning_gym():
    suite = load_domain("rg:basic_arithmetic", size=3, answer_format="tag").suite()
    reference = rg.create_dataset("basic_arithmetic", seed=0, size=3)
    task = suite.tasks[0]
    gold = task.answer
    assert task.prompt.endswith("<answer> and </answer> tags.")
    responses = [f"thinking... <answer> {gold} </answer>", f"<answer>1</answer> then <answer>{gold}</answer>", gold,
                 task.meta["reference_response"]]
    verdicts = score_sync(suite.verifier, [task] * len(responses), responses)
    assert [v.score for v in verdicts] == [1.0, 1.0, 0.0, 1.0]
    assert verdicts[2].details == "no <answer> tag"
    assert reference.score_answer(None, reference[0]) == 0.0


def test_per_task_dispatch_uses_the_tasks_own_spec():
    suite = load_domain("rg:leg_counting", size=3).suite()
    verdicts = score_sync(PerTask(), [_roundtrip(t) for t in suite.tasks], [t.answer for t in suite.tasks])
    assert [v.score for v in verdicts] == [1.0, 1.0, 1.0]
    assert all(v.verifier.startswith("reasoning_gym@") for v in verdicts)


def test_entries_regenerate_when_not_storable():
    suite = load_domain("rg:leg_counting", size=2).suite()
    task = _roundtrip(suite.tasks[0])
    task.meta["rg"]["entry"] = None  # as for an entry the codec cannot store
    assert score_sync(suite.verifier, [task], [task.answer])[0].score == 1.0
    task.meta["rg"]["fingerprint"] = "0" * 16  # a generator that no longer makes the same entry
    bad = score_sync(suite.verifier, [task], [task.answer])[0]
    assert bad.status is VerdictStatus.ERROR and "regenerated differently" in bad.details


def test_a_task_without_recipe_is_an_error_not_a_zero():
    v = score_sync(make_verifier("reasoning_gym"), [Task("x", "q", "1")], ["1"])[0]
    assert v.status is VerdictStatus.ERROR and "meta['rg']" in v.details


def test_codec_keeps_python_types():
    value = {"a": (1, 2.0, [True, None]), 3: {"s": {1, 2}}, "f": Fraction(3, 4), "z": frozenset({"x"}), "c": 1j}
    back = decode_entry(json.loads(json.dumps(encode_entry(value))))
    assert same_value(back, value) and back == value
    assert not same_value((1,), [1]) and not same_value(1, 1.0)
    assert storable_entry({"x": object()}) is None


def test_options_difficulty_and_errors():
    easy = load_domain("rg:leg_counting", size=3, min_animals=1, max_animals=1).suite()
    assert all(len(t.meta["rg"]["entry"]["metadata"]["animals"]) == 1 for t in easy.tasks)
    low = load_domain("rg:leg_counting", size=4, level=0).suite()
    high = load_domain("rg:leg_counting", size=4, level=9).suite()
    n_low = [len(t.meta["rg"]["entry"]["metadata"]["animals"]) for t in low.tasks]
    n_high = [len(t.meta["rg"]["entry"]["metadata"]["animals"]) for t in high.tasks]
    assert max(n_low) < max(n_high)
    assert low.tasks[0].id != load_domain("rg:leg_counting", size=4).suite().tasks[0].id  # options change ids
    with pytest.raises(TaskFileError, match="unknown option.*allowed: min_animals, max_animals"):
        load_domain("rg:leg_counting", max_legs=3).suite()
    with pytest.raises(TaskFileError, match="min_animals must be positive"):
        load_domain("rg:leg_counting", min_animals=0).suite()
    with pytest.raises(TaskFileError, match="unknown reasoning-gym dataset 'no_such'"):
        load_domain("rg:no_such").suite()
    with pytest.raises(TaskFileError, match="split must be"):
        load_domain("rg:leg_counting", split="test").suite()
    assert ("rg:<name>", "a reasoning-gym generator: entries 0..size-1 (size, seed, level, config options)") in list_domains()


def test_suite_is_reasoning_gyms_dataset_and_splits_are_disjoint():
    suite = load_domain("rg:chain_sum", size=5, seed=7).suite()
    reference = rg.create_dataset("chain_sum", seed=7, size=5)
    assert [t.prompt for t in suite.tasks] == [reference[i]["question"] for i in range(5)]
    held = load_domain("rg:chain_sum", size=20, split="held_out", held_out_fraction=0.3).suite()
    train = load_domain("rg:chain_sum", size=20, split="train", held_out_fraction=0.3).suite()
    assert len(held.tasks) == 20 and len(train.tasks) == 20
    assert not {t.prompt for t in held.tasks} & {t.prompt for t in train.tasks}


def test_training_source():
    source = load_domain("rg:basic_arithmetic", held_out_fraction=0.2, **{"min_terms": 2, "max_terms": 2, "seed": 3}).source
    assert isinstance(source, RGSource)
    rng = random.Random(0)
    train = [source.sample(rng) for _ in range(30)]
    held = source.take(10, "held_out", seed=0)
    assert len(held) == 10 and held == source.take(10, "held_out", seed=0)
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    verdicts = score_sync(PerTask(), train + held, [t.answer for t in train + held])
    assert all(v.score == 1.0 for v in verdicts)
    with pytest.raises(TaskFileError, match="unknown option"):
        load_domain("rg:basic_arithmetic", **{"digits": 3})


def test_entries_a_generator_fails_to_make_are_skipped_and_a_broken_generator_still_fails():
    source = load_domain("rg:basic_arithmetic", held_out_fraction=0.2).source
    whole = source.take(5, "train", seed=0)

    class Failing:  # the generator's worker, in process, failing on every other entry it is asked for
        generation = 0

        def __init__(self, every):
            self.every, self.calls = every, 0

        def call(self, fn, *args, timeout_s=None):
            if fn.__name__ == "_entry_fields":
                self.calls += 1
                if self.calls % self.every == 0:
                    raise GenerationFailed("ValueError: Failed to generate valid expression after 100 attempts")
            return fn(*args)

    source.worker = Failing(2)
    tasks = source.take(5, "train", seed=0)
    assert len(tasks) == 5 and all(t.answer for t in tasks) and tasks != whole  # other entries, none failed
    assert source.sample(random.Random(0), "train").answer and len(source.first(4)) == 4
    source.worker = Failing(1)
    with pytest.raises(TaskFileError, match="failed to generate: ValueError: Failed to generate"):
        source.sample(random.Random(0), "train")


def test_a_response_with_a_huge_exponent_scores_0_without_reaching_the_scorer():
    """The planted hang: coin_flip's scorer takes `Fraction(answer)`, and a sampled "…e1716171605161716" would build
    10**1716171605161716 (a 528-domain run sat there for 13 minutes); it is scored 0, and in time."""
    import time

    suite = load_domain("rg:coin_flip", size=3).suite()
    task = suite.tasks[0]
    t0 = time.perf_counter()
    bad = "1078891106171717111787771877777106061e1716171605161716"
    verdicts = score_sync(suite.verifier, [task] * 4, [bad, "1e+9999999", task.answer, "1.5e99999"])
    assert time.perf_counter() - t0 < 5.0
    assert [v.passed for v in verdicts[:3]] == [False, False, True]
    assert "out of any answer's range" in verdicts[0].details and verdicts[0].score == 0.0
    assert "out of any answer's range" not in verdicts[3].details  # up to 6 digits still reach the scorer
