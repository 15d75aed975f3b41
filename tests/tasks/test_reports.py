"""The `docs:reports` domain: generated reports are consistent unless an inconsistency was planted (an independent
auditor that reads only the text finds exactly the planted label), the knobs do what they say, gold answers score
full marks in both forms while empty, flag-everything and distractor answers fail."""

from __future__ import annotations

import collections
import re
import time

import pytest

from posttrain.rewards.base import safe_verify
from posttrain.tasks.domains import load_domain
from posttrain.tasks.jsonl import TaskFileError
from posttrain.tasks.report_questions import KINDS, ReportSource
from posttrain.tasks.reports import PLANTS, ReportOptions, generate_report
from posttrain.tasks.validate import validate_suite
from posttrain.types import Task


def _num(cell: str) -> int:
    return int(cell.strip().replace(",", ""))


def tables(text: str) -> dict[str, tuple[str, dict[str, list[int]]]]:
    """label -> (title, {row label: values}) for every pipe table in the text."""
    out: dict[str, tuple[str, dict[str, list[int]]]] = {}
    label, title, rows = None, "", {}
    for line in text.splitlines() + [""]:
        m = re.match(r"Table (T\d+)\. (.*)", line)
        if m:
            label, title, rows = m.group(1), m.group(2), {}
            out[label] = (title, rows)
        elif label and line.startswith("| ") and not line.startswith("| Line item") and not line.startswith("| Quarter |"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = [_num(c) for c in cells[1:]]
        elif not line.startswith("|"):
            label = None if not line.startswith("(") else label
    return out


def audit(text: str) -> set[str]:
    """The labels that contradict the rest, found from the text alone (not from the generator's records)."""
    bad = set()
    ts = tables(text)
    find = {key: (label, rows) for label, (title, rows) in ts.items() for key in
            ("income statement", "balance sheet", "Segment revenue", "Segment operating income", "Borrowings (")
            if key in title}
    _, inc = find["income statement"]
    bl, bal = find["balance sheet"]
    sl, seg = find["Segment revenue"]
    dl, debt = find["Borrowings ("]
    _, soi = find["Segment operating income"]
    rev = inc.get("Revenue (r)", inc.get("Revenue"))
    assets = [sum(v) for v in zip(*(bal[k] for k in ("Cash", "Receivables", "Inventories", "Property, plant and equipment")))]
    le = [sum(v) for v in zip(*(bal[k] for k in ("Borrowings", "Trade payables", "Shareholders' equity")))]
    if assets != bal["Total assets"] or le != bal["Total liabilities and equity"] or assets != le:
        bad.add(bl)
    lines = [v for k, v in seg.items() if k != "Total segments"]
    if [sum(v) for v in zip(*lines)] != seg["Total segments"]:
        bad.add(sl)
    if [sum(v) for v in zip(debt["Term loan"], debt["Senior notes"], debt["Revolving facility"])] != debt["Total borrowings"]:
        bad.add(dl)
    assert soi["Total segments"] == inc["Operating income"]
    assert [a - b for a, b in zip(inc["Gross profit"], inc["Operating expenses"])] == inc["Operating income"]
    years = [int(y) for y in re.findall(r"FY(\d{4})", text.split("| Line item |", 1)[1].splitlines()[0])]
    for m in re.finditer(r"\[(P\d+)\] (.*)", text):
        label, body = m.groups()
        nums = [_num(x) for x in re.findall(r"(\d[\d,]*) million in FY\d{4}", body)]
        if body.startswith("Group revenue"):
            if nums != [rev[-1], rev[-2]]:
                bad.add(label)
        elif body.startswith("Net income was"):
            if nums != [inc["Net income"][-1]]:
                bad.add(label)
        elif body.startswith("Borrowings stood"):
            if _num(re.search(r"at ([\d,]+) million", body).group(1)) != bal["Borrowings"][-1]:
                bad.add(label)
        elif re.match(r"\w+ revenue was [\d,]+ million in FY\d{4} and its operating income", body):
            name = body.split()[0]
            got = [_num(x) for x in re.findall(r"([\d,]+) million", body)]
            if got != [seg[name][-1], soi[name][-1]]:
                bad.add(label)
    assert len(years) >= 2
    return bad


@pytest.mark.parametrize("length,distractors", [(2000, 0), (8000, 2), (30000, 3)])
def test_clean_reports_agree_and_planted_ones_show_one_label(length, distractors):
    for seed in range(8):
        clean = generate_report(seed, ReportOptions(length, distractors))
        assert clean.planted is None and audit(clean.text) == set()
        for plant in PLANTS:
            r = generate_report(seed, ReportOptions(length, distractors, plant))
            assert r.planted and audit(r.text) == {r.planted}, (seed, plant)


def test_reports_are_deterministic_and_the_knobs_work():
    a, b = generate_report(7, ReportOptions(20000, 3)), generate_report(7, ReportOptions(20000, 3))
    assert a.text == b.text and a.text != generate_report(8, ReportOptions(20000, 3)).text
    small = generate_report(1, ReportOptions(2000, 0))
    assert len(small.text) < 4000 and "restated" not in small.text and "Services Ltd" not in small.text
    assert "restated to" in a.text and a.twin in a.text and "Quarterly results" in a.text
    t0 = time.perf_counter()
    big = generate_report(1, ReportOptions(1_100_000, 2))
    assert 1_100_000 <= len(big.text) < 1_200_000 and time.perf_counter() - t0 < 10
    assert max(len(body) for body in big.files.values()) < 50_000  # the schedules are split into files
    for key, fact in big.facts.items():  # every located figure is printed on the line it names
        if fact.file:
            assert f"{fact.value:,}" in big.files[fact.file].splitlines()[fact.line - 1], key
    with pytest.raises(ValueError, match="distractors"):
        ReportOptions(distractors=4)


def test_every_kind_is_drawn_and_the_split_is_by_content():
    source = ReportSource(length=3000, hops=3, distractors=3)
    held = source.take(60, "held_out", seed=0)
    train = source.take(60, "train", seed=0)
    assert not {t.id for t in held} & {t.id for t in train}
    # the split is the report's: no report seed is on both sides, at any length or distractor level
    longer = ReportSource(length=30000, hops=3, distractors=1).take(60, "train", seed=0)
    assert not {t.meta["report_seed"] for t in held} & {t.meta["report_seed"] for t in train + longer}
    same = ReportSource(length=30000, hops=3, distractors=3).make(held[0].meta["report_seed"], held[0].meta["kind"])
    assert source.split_of(same) == "held_out"
    assert set(collections.Counter(t.meta["kind"] for t in held)) == set(KINDS)
    agent = ReportSource(length=3000, hops=3, distractors=3, form="agent").take(60, "held_out", seed=0)
    assert [t.id for t in agent] == [t.id for t in held]  # one domain, two forms: the same tasks
    assert {t.meta["hops"] for t in held if t.meta["kind"] == "computed"} >= {2, 4}
    assert all(t.answer == "none" for t in held if t.meta["kind"] == "none")
    assert all(t.answer != "none" and t.answer in t.prompt for t in held if t.meta["kind"] == "inconsistency")


@pytest.mark.parametrize("form", ["prompt", "agent"])
def test_gold_scores_full_marks_and_the_null_answer_fails(form):
    d = load_domain("docs:reports", form=form, length=4000, distractors=3, limit=80)
    report = validate_suite(d.suite())
    assert report.ok and report.passed == 80 and report.rows and not report.null_failures


def test_wrong_answers_fail():
    d = load_domain("docs:reports", length=4000, distractors=3, limit=120)
    tasks = d.suite().tasks

    def passes(t: Task, answer: str) -> bool:
        return safe_verify(d.verifier, t, f"<answer>{answer}</answer>").passed

    for t in tasks:
        kind = t.meta["kind"]
        if kind == "none":
            assert not passes(t, "P2") and not passes(t, "T3") and passes(t, "None")
        elif kind == "inconsistency":
            assert not passes(t, "none") and passes(t, t.answer.lower())
        elif t.meta["verifier"]["type"] == "numeric":
            assert passes(t, t.answer) and not passes(t, str(float(t.answer) + 1))
            assert not safe_verify(d.verifier, t, t.answer).passed  # untagged: the prompt asks for the tags
    computed = [t for t in tasks if t.meta["kind"] == "computed"]
    assert computed
    for t in computed:  # the unrounded value of the expression passes: the tolerance is the rounding's
        exact = eval(t.meta["expression"])  # noqa: S307 - the generator's own arithmetic
        assert passes(t, f"{exact:.6f}")


def test_restated_and_twin_figures_are_distractors():
    tasks = ReportSource(length=4000, hops=1, distractors=2, kinds=("lookup",)).take(200, "held_out", seed=1)
    restated = [t for t in tasks if "originally" in t.meta["question"]]
    assert restated
    for t in restated:
        assert t.answer not in re.findall(r"restated to ([\d,]+)", t.prompt)


def test_options_are_checked():
    assert set(load_domain("docs:reports", hops=1).source.kinds) == {"lookup"}
    assert load_domain("docs:reports", kinds="lookup,none").source.kinds == ("lookup", "none")
    for bad, match in [({"hops": 1, "kinds": "none"}, "need hops"), ({"form": "chat"}, "form"),
                       ({"length": 10}, "length"), ({"kinds": "trivia"}, "kinds"), ({"depth": 2}, "unknown option")]:
        with pytest.raises(TaskFileError, match=match):
            load_domain("docs:reports", **bad)
    with pytest.raises(TaskFileError, match="docs:reports"):
        load_domain("docs:filings")


def test_the_evaluation_path_scores_a_model_and_a_flagger_loses(tmp_path):
    """`posttrain eval --suite docs:reports` runs through this harness: a model answering the gold passes
    everything; one that always flags a label passes no consistent report and at most the planted ones."""
    from posttrain.engine.mock import MockEngine
    from posttrain.eval.harness import EvalSpec, evaluate
    from posttrain.pricing import Price

    suite = load_domain("docs:reports", length=3000, limit=40).suite()
    gold = {t.prompt: t.meta["reference_response"] for t in suite.tasks}
    spec = EvalSpec(model="mock", suite="docs:reports", max_tokens=64)
    from posttrain.models.tokenizer import char_tokenizer

    engine = MockEngine(lambda p: gold[p if isinstance(p, str) else engine.tokenizer.decode(p)], tokenizer=char_tokenizer())
    run = evaluate(engine, suite, spec, tmp_path / "gold", Price(1.0, 2.0))
    assert run.summary.pass_at[1].value == 1.0 and run.summary.cost > 0 and run.summary.cost_per_solved > 0
    flagger = evaluate(MockEngine(lambda p: "<answer>P2</answer>"), suite, spec, tmp_path / "flag")
    by_id = {t.id: t for t in suite.tasks}
    passed_kinds = {by_id[r.task_id].meta["kind"] for r in flagger.records if r.passed}
    assert passed_kinds <= {"inconsistency"}
    assert not any(r.passed for r in flagger.records if by_id[r.task_id].meta["kind"] == "none")


def test_every_length_asks_the_same_questions():
    """An accuracy-against-length curve compares like with like: the held-out draw is the same reports and
    questions at every length, with the same answers once the core report is full size (6,000 characters)."""
    short, long = (ReportSource(length=n, distractors=3).take(30, "held_out", seed=2) for n in (8000, 200_000))
    assert [(t.meta["report_seed"], t.meta["kind"], t.meta["question"], t.answer) for t in short] == \
        [(t.meta["report_seed"], t.meta["kind"], t.meta["question"], t.answer) for t in long]
    assert all(t.meta["chars"] > 200_000 for t in long) and all(t.meta["chars"] < 20_000 for t in short)

