"""Pre-training and RL never draw a held-out problem: property tests of the train / held-out split.

Covers, for every generator (`arith:add/sub/addsub/mul/chain` with `digits`, `min_digits` and chain
lengths varied, `code:ops` with its options, `code:linear`) and for JSONL task files of random ids,
built the way the RL trainer builds them (`load_domain`): `sample(rng, "train")` (the curriculum's
draw, and `sample(rng)`'s default) never returns a task whose canonical key is held out, and
`sample(rng, "held_out")` never a train one; `take(n, split)` stays inside its split; a smaller
`held_out_fraction`'s held-out set is a subset of a larger one's (so a base model pre-trained with a
larger fraction never saw an RL run's held-out problems); the RL curriculum's draws are train-split;
and the built-in base model's pre-training source (`builtin.base_task_source`) draws train-split
problems only, none of which the quickstart's RL evaluation holds out.
The canonical key is recomputed here from the prompt (or the id), not read from the task, so a task
carrying a wrong `split_key` (say `b+a` keyed apart from `a+b`) fails too.
Does not cover: reasoning-gym sources (an optional dependency, tests/tasks/test_reasoning_gym.py).
"""

from __future__ import annotations

import json
import random
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posttrain.config import BaseModelConfig, RunConfig, TasksConfig
from posttrain.recipes import builtin
from posttrain.rl.build import build_domains
from posttrain.scheduler.curriculum import PassRateCurriculum
from posttrain.tasks import ArithmeticSource, load_domain, split_of

# no example database: nothing is written into the checkout, and every run explores afresh
PROPERTY = settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
DRAWS = 60  # tasks drawn per split per example


def canonical_key(task, spec: str) -> str:
    """The problem's identity, from what the model is shown: operand order of sums and products does not matter."""
    if spec.startswith("code:"):
        assert task.prompt.endswith(" ->")
        return task.prompt[: -len(" ->")]  # the specification itself
    if not spec.startswith("arith:"):
        return task.id  # a task file: the id is the task
    expr = task.prompt.removesuffix("=")
    if "*" in expr:
        a, b = sorted(int(x) for x in expr.split("*"))
        return f"{a}*{b}"
    terms = re.findall(r"([+-]?)(\d+)", expr)
    pos = sorted(int(n) for s, n in terms if s != "-")
    neg = sorted(int(n) for s, n in terms if s == "-")
    return "+".join(map(str, pos)) + "".join(f"-{n}" for n in neg)


def check_source(source, spec: str, fraction: float, seed: int) -> None:
    rng = random.Random(seed)
    for split in ("train", "held_out"):
        for t in [source.sample(rng, split) for _ in range(DRAWS)] + source.take(DRAWS, split, seed=seed):
            assert split_of(canonical_key(t, spec), fraction) == split, (spec, split, t)
    defaults = [source.sample(rng) for _ in range(DRAWS)]  # pre-training's call: the default split is train
    assert all(split_of(canonical_key(t, spec), fraction) == "train" for t in defaults)
    curriculum = PassRateCurriculum(source, seed=seed)  # the RL loop's draw
    assert all(split_of(canonical_key(t, spec), fraction) == "train" for t in curriculum.sample(DRAWS))


def check_nested(make, spec: str, small: float, large: float, seed: int) -> None:
    """Held out under `small` => held out under `large`; train under `large` => train under `small`."""
    lo, hi = make(small), make(large)
    for t in lo.take(DRAWS, "held_out", seed=seed):
        assert split_of(canonical_key(t, spec), large) == "held_out", (spec, small, large, t)
    rng = random.Random(seed)
    for t in [hi.sample(rng, "train") for _ in range(DRAWS)]:
        assert split_of(canonical_key(t, spec), small) == "train", (spec, small, large, t)


fractions = st.sampled_from([0.02, 0.05, 0.1, 0.15, 0.3, 0.5])
seeds = st.integers(0, 2**32 - 1)


@st.composite
def arith_specs(draw):
    family = draw(st.sampled_from(["add", "sub", "addsub", "mul", "chain"]))
    digits = draw(st.integers(2, 6))  # 1-digit families have ~50 problems: a 2% split can be empty
    min_digits = draw(st.one_of(st.none(), st.integers(1, digits)))
    return family, digits, min_digits


@PROPERTY
@given(arith_specs(), fractions, seeds)
@pytest.mark.slow
def test_arithmetic_draws_stay_in_their_split(spec, fraction, seed):
    family, digits, min_digits = spec
    source = load_domain(f"arith:{family}", held_out_fraction=fraction, digits=digits, min_digits=min_digits).source
    check_source(source, f"arith:{family}", fraction, seed)


@PROPERTY
@given(st.integers(2, 5), st.integers(2, 4), fractions, seeds)
@pytest.mark.slow
def test_chains_of_any_length_stay_in_their_split(terms, digits, fraction, seed):
    source = ArithmeticSource(family="chain", digits=digits, terms=terms, held_out_fraction=fraction)
    check_source(source, "arith:chain", fraction, seed)


@st.composite
def code_specs(draw):
    # pools of a few thousand problems at least, so a 2% held-out split still holds DRAWS distinct ones
    # (`take` asked for more than a split holds keeps drawing, by design, 50 n + 1000 times)
    family = draw(st.sampled_from(["ops", "linear"]))
    digits = draw(st.integers(1 if family == "ops" else 2, 3))  # linear, 1 digit: 171 problems
    options = {}
    if family == "ops":
        options["max_ops"] = draw(st.integers(3, 6))  # up to 2 operations of 1-digit constants: a few hundred
        options["operators"] = "".join(draw(st.permutations("+-*/%"))[: draw(st.integers(2, 5))])
    return family, digits, options


@PROPERTY
@given(code_specs(), fractions, seeds)
@pytest.mark.slow
def test_code_draws_stay_in_their_split(spec, fraction, seed):
    family, digits, options = spec
    source = load_domain(f"code:{family}", held_out_fraction=fraction, digits=digits, **(options or {})).source
    check_source(source, f"code:{family}", fraction, seed)


@st.composite
def task_ids(draw):
    ids = draw(st.lists(st.one_of(st.text(min_size=1, max_size=12), st.integers(-10**6, 10**6)), min_size=20, max_size=80,
                        unique_by=str))  # fmt: skip
    return [str(i) for i in ids]


def _jsonl_source(ids: list[str], fraction: float, directory: Path):
    path = directory / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": f"q{n}", "answer": "a"}) + "\n" for n, i in enumerate(ids)))
    return load_domain(str(path), held_out_fraction=fraction).source


@PROPERTY
@given(task_ids(), fractions, fractions, seeds)
@pytest.mark.slow
def test_task_file_draws_stay_in_their_split_and_nest(ids, f1, f2, seed):
    small, large = min(f1, f2), max(f1, f2)
    with tempfile.TemporaryDirectory() as d:
        held = {f: {i for i in ids if split_of(i, f) == "held_out"} for f in (small, large)}
        if len(held[large]) == len(ids) or not held[small]:
            return  # nothing to train on, or nothing held out: the source refuses or the property is vacuous
        lo, hi = _jsonl_source(ids, small, Path(d)), _jsonl_source(ids, large, Path(d))
        check_source(lo, "jsonl", small, seed)
        check_source(hi, "jsonl", large, seed)
        assert {t.id for t in lo.take(len(ids), "held_out")} == held[small]  # every held-out task, and only those
        assert held[small] <= {t.id for t in hi.take(len(ids), "held_out")}
        assert {t.id for t in hi.take(len(ids), "train")} <= {t.id for t in lo.take(len(ids), "train")}


@PROPERTY
@given(arith_specs(), fractions, fractions, seeds)
def test_arithmetic_held_out_sets_nest(spec, f1, f2, seed):
    family, digits, min_digits = spec
    make = lambda f: load_domain(f"arith:{family}", held_out_fraction=f, digits=digits, min_digits=min_digits).source  # noqa: E731
    check_nested(make, f"arith:{family}", min(f1, f2), max(f1, f2), seed)


@PROPERTY
@given(code_specs(), fractions, fractions, seeds)
@pytest.mark.slow
def test_code_held_out_sets_nest(spec, f1, f2, seed):
    family, digits, options = spec
    make = lambda f: load_domain(f"code:{family}", held_out_fraction=f, digits=digits, **(options or {})).source  # noqa: E731
    check_nested(make, f"code:{family}", min(f1, f2), max(f1, f2), seed)


BASE_CONFIGS = [
    {},  # the quickstart's
    {"digits": 3, "min_digits": 1},
    {"family": "sub", "held_out_fraction": 0.3},
    {"family": "mul", "digits": 3},
    {"family": "chain"},
    {"family": "code:ops", "digits": 1},
    {"family": "code:linear", "digits": 2},
]


@pytest.mark.slow
def test_base_model_pretraining_draws_only_train_problems():
    for overrides in BASE_CONFIGS:
        cfg = BaseModelConfig(**overrides)
        spec = cfg.family if cfg.family.startswith("code:") else f"arith:{cfg.family}"
        source = builtin.base_task_source(cfg)
        rng = random.Random(cfg.seed)  # pretrain_base's rng, drawn as it draws (`sample(rng)`)
        drawn = [source.sample(rng) for _ in range(2000)]
        assert all(split_of(canonical_key(t, spec), cfg.held_out_fraction) == "train" for t in drawn), overrides
        # the RL evaluation of the same domain at the same fraction holds out none of them
        tasks = TasksConfig(source=spec, digits=cfg.digits, min_digits=cfg.min_digits, held_out_fraction=cfg.held_out_fraction)
        rl_source = build_domains(RunConfig(tasks=tasks))[0].source
        evaluation = {canonical_key(t, spec) for t in rl_source.take(500, "held_out", seed=cfg.seed)}
        assert evaluation and not evaluation & {canonical_key(t, spec) for t in drawn}, overrides
