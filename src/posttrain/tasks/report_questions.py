"""Questions over generated company reports, and `ReportSource`, the task generator of the `docs:reports` domain.

Covers: the question kinds (`KINDS`): `lookup` (one printed figure, beside prior-year columns, a restated
figure and a near-duplicate entity), `cross_table` (figures reconciled across tables and notes: the
inter-segment eliminations between the segment note and the income statement, the note that explains a
restatement), `computed` (growth, margins, per-share figures from figures in different sections; `hops`
counts the figures used), `inconsistency` (one planted paragraph or table contradicts the rest: answer its
label) and `none` (the same question on a consistent report: the answer is `none`, so a model that flags
everything loses). Answers are numbers (judged by the `numeric` verifier with the rounding tolerance of
their format) or identifiers (`exact`, case-folded), read from `<answer>` tags in the single-turn form and
from the submitted answer in the agent form. Each task says how an oracle solves it (`meta["evidence"]`:
the file and line of each figure used; `meta["expression"]`: the arithmetic), so the agent form can prove
it is solvable with its tools. `ReportSource` draws (report seed, question kind) pairs, split by a hash of the
report's seed alone, so a report's questions are all in one split at every length and distractor level.
Does not cover: the documents (`reports.py`), the tools and the registry entry (`agent/reports.py`).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.tasks.base import GeneratedSource, Split, split_of
from posttrain.tasks.reports import PLANTS, Report, ReportOptions, generate_report
from posttrain.types import Task

Kind = Literal["lookup", "cross_table", "computed", "inconsistency", "none"]
KINDS: tuple[Kind, ...] = ("lookup", "cross_table", "computed", "inconsistency", "none")
MIN_HOPS: dict[str, int] = {"lookup": 1, "cross_table": 2, "computed": 2, "inconsistency": 2, "none": 2}
Form = Literal["prompt", "agent"]
NONE = "none"

_LOOKUPS = {"revenue": "revenue", "net_income": "net income", "operating_income": "operating income",
            "gross_profit": "gross profit", "total_assets": "total assets", "borrowings": "total borrowings",
            "equity": "shareholders' equity", "cash": "cash"}
AUDIT = ("Audit the report. Each labelled paragraph (P<n>) and table (T<n>) of the group's report must agree with "
         "the financial statements and with its own totals: a table's total row equals the sum of its lines, and "
         "total assets equal total liabilities and equity. Figures described as originally reported, and the "
         "subsidiaries' schedules, are not errors. If exactly one label contradicts the rest, answer that label "
         "(for example P4 or T2); if everything agrees, answer none.")


@dataclass(frozen=True)
class Question:
    """One question about a report: its text, gold answer, how it is judged and how an oracle finds it."""

    kind: Kind
    text: str
    answer: str
    numeric: bool  # judged as a number within `tolerance`, else as an identifier
    tolerance: float
    hops: int  # figures (or blocks) the answer depends on
    evidence: tuple[str, ...]  # the fact keys used, in order
    expression: str = ""  # the arithmetic over them (`calc`'s input), "" for a figure read as it is


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}"


def _draw_question(rng: random.Random, kind: Kind, r: Report, hops: int, distractors: int) -> Question:
    if kind == "lookup":
        return _lookup(rng, r, distractors)
    if kind == "cross_table":
        return _cross_table(rng, r, distractors)
    if kind == "computed":
        return _computed_three(rng, r) if hops >= 3 and rng.random() < 0.5 else _computed(rng, r)
    # inconsistency and none: the same question; the report decides the answer
    return Question(kind, AUDIT, r.planted or NONE, False, 0.0, 2, ())


def _values(r: Report) -> dict[str, int]:
    return {k: fact.value for k, fact in r.facts.items()}


def _lookup(rng: random.Random, r: Report, distractors: int) -> Question:
    co, y0 = r.company, r.years[-2]
    y = rng.choice(r.years)
    choice = rng.randrange(4 if distractors >= 1 else 3)
    if choice == 0:
        seg = rng.choice(r.segments)
        what = rng.choice(["revenue", "oi"])
        key = f"segment_{what}:{seg}:{y}"
        name = "revenue" if what == "revenue" else "operating income"
        text = f"What was the {name} of {co}'s {seg} segment in FY{y}, in USD millions?"
    elif choice == 1:
        key = f"shares:{y}"
        text = f"What was {co}'s weighted average number of shares in issue in FY{y}, in millions?"
    elif choice == 2:
        item = rng.choice(sorted(_LOOKUPS))
        key = f"{item}:{y}"
        text = f"What was {co}'s consolidated {_LOOKUPS[item]} in FY{y}, in USD millions?"
    else:
        key = f"original_revenue:{y0}"
        text = f"What revenue did {co} originally report for FY{y0}, before any restatement, in USD millions?"
    return Question("lookup", text, str(_values(r)[key]), True, 0.5, 1, (key,))


def _cross_table(rng: random.Random, r: Report, distractors: int) -> Question:
    co, y0, v = r.company, r.years[-2], _values(r)
    y = rng.choice(r.years)
    if distractors >= 1 and rng.random() < 0.4:
        text = (f"{co}'s FY{y0} revenue in this report differs from the figure first published. Which note "
                "explains the difference? Answer with the note number.")
        return Question("cross_table", text, str(r.notes["restatement"]), False, 0.0, 2,
                        (f"revenue:{y0}", f"original_revenue:{y0}"))
    text = (f"By how much does the total of {co}'s segment revenues exceed its consolidated revenue in FY{y}, "
            "in USD millions?")
    keys = (f"segment_total:{y}", f"revenue:{y}")
    return Question("cross_table", text, str(v[keys[0]] - v[keys[1]]), True, 0.5, 2, keys, f"{v[keys[0]]} - {v[keys[1]]}")


def _computed_three(rng: random.Random, r: Report) -> Question:
    """A figure computed from four facts: the change of a margin, or of earnings per share, over two years."""
    co, (y0, y1), v = r.company, r.years[-2:], _values(r)
    if rng.randrange(2) == 0:
        keys = (f"operating_income:{y1}", f"revenue:{y1}", f"operating_income:{y0}", f"revenue:{y0}")
        a, b, c, d = (v[k] for k in keys)
        text = (f"By how many percentage points did {co}'s operating margin (operating income over revenue) "
                f"change from FY{y0} to FY{y1}? Answer to one decimal place (negative for a fall).")
        exact = 100 * a / b - 100 * c / d
        return Question("computed", text, f"{exact:.1f}", True, 0.051, 4, keys, f"100 * {a} / {b} - 100 * {c} / {d}")
    keys = (f"net_income:{y1}", f"shares:{y1}", f"net_income:{y0}", f"shares:{y0}")
    a, b, c, d = (v[k] for k in keys)
    text = (f"By what percentage did {co}'s earnings per share (net income over the weighted average shares) "
            f"change from FY{y0} to FY{y1}? Answer to one decimal place (negative for a fall).")
    exact = 100 * (a / b) / (c / d) - 100
    return Question("computed", text, f"{exact:.1f}", True, 0.051, 4, keys, f"100 * ({a} / {b}) / ({c} / {d}) - 100")


def _computed(rng: random.Random, r: Report) -> Question:
    """A figure computed from two facts: growth, a segment margin, earnings or book value per share."""
    co, (y0, y1), v = r.company, r.years[-2:], _values(r)
    pick = rng.randrange(4)
    if pick == 0:
        keys = (f"revenue:{y1}", f"revenue:{y0}")
        a, b = v[keys[0]], v[keys[1]]
        text = (f"By what percentage did {co}'s consolidated revenue grow from FY{y0} to FY{y1}? Answer to one "
                "decimal place (negative for a fall).")
        return Question("computed", text, f"{100 * a / b - 100:.1f}", True, 0.051, 2, keys, f"100 * {a} / {b} - 100")
    if pick == 1:
        seg = rng.choice(r.segments)
        keys = (f"segment_oi:{seg}:{y1}", f"segment_revenue:{seg}:{y1}")
        a, b = v[keys[0]], v[keys[1]]
        text = (f"What was the operating margin (operating income over revenue) of {co}'s {seg} segment in "
                f"FY{y1}, in percent to one decimal place?")
        return Question("computed", text, _pct(a, b), True, 0.051, 2, keys, f"100 * {a} / {b}")
    y = rng.choice(r.years)
    if pick == 2:
        keys = (f"net_income:{y}", f"shares:{y}")
        text = (f"What were {co}'s earnings per share in FY{y} (net income over the weighted average number of "
                "shares), in USD to two decimal places?")
    else:
        keys = (f"equity:{y}", f"shares:{y}")
        text = (f"What was {co}'s book value per share at the end of FY{y} (shareholders' equity over the "
                "weighted average number of shares of that year), in USD to two decimal places?")
    a, b = v[keys[0]], v[keys[1]]
    return Question("computed", text, f"{a / b:.2f}", True, 0.0051, 2, keys, f"{a} / {b}")


def verifier_spec(q: Question, form: Form) -> dict[str, Any]:
    """How the answer is judged: from `<answer>` tags in the single-turn form, as submitted in the agent form."""
    if q.numeric:
        return {"type": "numeric", "extract": "tag" if form == "prompt" else "last_number", "abs_tol": q.tolerance}
    return {"type": "exact", "extract": "tag" if form == "prompt" else "full", "case_sensitive": False}


def _form_hint(q: Question) -> str:
    return "a number alone (no units, no % sign)" if q.numeric else "the label or note number alone"


def single_turn_prompt(report: Report, q: Question) -> str:
    return (f"Below is the annual report of {report.company}.\n\n<document>\n{report.text}</document>\n\n"
            f"Question: {q.text}\nThink as needed, then give only the final answer, {_form_hint(q)}, inside "
            "<answer></answer>.")


def agent_instruction(report: Report, q: Question, compact: bool = False) -> str:
    if compact:  # the compact agent form (`ReportSource.compact`): the question and the answer's form, nothing else
        return f"{q.text} Submit {_form_hint(q)}."
    return (f"The annual report of {report.company} is in the workspace, one file per section; "
            f"00_contents.md lists them. Question: {q.text} Submit only the final answer: {_form_hint(q)}.")


@dataclass(frozen=True)
class ReportSource(GeneratedSource):
    """(report, question) tasks: one report per task, drawn with the knobs below."""

    length: int = 6000
    hops: int = 3
    distractors: int = 2
    kinds: tuple[Kind, ...] = KINDS
    form: Form = "prompt"
    held_out_fraction: float = 0.15
    compact: bool = False  # agent form: a short instruction and the line tools (`agent/reports.py`, `LINE_TOOLS`)

    def __post_init__(self) -> None:
        if not 1 <= self.hops <= 3:
            raise ValueError(f"hops must be in 1..3, got {self.hops}")
        ReportOptions(length=self.length, distractors=self.distractors)  # validates both
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f"kinds must be a non-empty list of {', '.join(KINDS)}; got {list(self.kinds)}")
        deep = [k for k in self.kinds if MIN_HOPS[k] > self.hops]
        if deep:
            raise ValueError(f"kinds {', '.join(deep)} need hops >= 2 (hops={self.hops} allows lookup only)")
        if self.form not in ("prompt", "agent"):
            raise ValueError(f"form must be prompt or agent, got {self.form!r}")
        if not 0 < self.held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must be in (0, 1), got {self.held_out_fraction}")
        if self.compact and self.form != "agent":
            raise ValueError("compact applies to the agent form only (form = agent)")

    @property
    def name(self) -> str:
        # no length here: `take` seeds its draws with the name, so every length draws the same reports and questions
        # (the same answers from 6,000 characters up: the core report does not depend on the padding), which is
        # what an accuracy-against-length curve compares
        return f"reports-h{self.hops}-d{self.distractors}-{'+'.join(self.kinds)}"

    def _draw(self, rng: random.Random) -> Task:
        kind, seed = rng.choice(self.kinds), rng.randrange(2**31)
        return self.make(seed, kind)

    def make(self, seed: int, kind: Kind) -> Task:
        """The task of report `seed` and question kind `kind` under this source's knobs."""
        plant = PLANTS[seed % len(PLANTS)] if kind == "inconsistency" else None
        report = generate_report(seed, ReportOptions(self.length, self.distractors, plant))
        q = _draw_question(random.Random(f"question:{seed}:{kind}"), kind, report, self.hops, self.distractors)
        return task_of(report, q, seed, self.form, self.length, self.distractors, self.compact)

    def sample(self, rng: random.Random, split: Split = "train") -> Task:
        """The split is decided by the report's seed before the report is generated (a 1M-character report costs
        about 0.2 s): every question about one report, at any length or distractor level, is in one split."""
        for _ in range(100_000):
            kind, seed = rng.choice(self.kinds), rng.randrange(2**31)
            if report_split(seed, self.held_out_fraction) == split:
                return self.make(seed, kind)
        raise RuntimeError(f"{self.name}: could not draw a {split} task (is the split fraction extreme?)")

    def split_of(self, task: Task) -> Split:
        return report_split(int(task.meta["report_seed"]), self.held_out_fraction)


def report_split(seed: int, held_out_fraction: float) -> Split:
    return split_of(f"reports:{seed}", held_out_fraction)


def task_of(report: Report, q: Question, seed: int, form: Form, length: int, distractors: int,
            compact: bool = False) -> Task:
    """The task a (report, question) pair is, in either form. Its id and split do not depend on the form (nor on
    `compact`, the agent form's short instruction and line tools)."""
    blob = json.dumps({"seed": seed, "length": length, "distractors": distractors, "plant": report.plant_kind,
                       "q": q.text, "a": q.answer}, sort_keys=True)
    digest = hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()  # the task's id: its content
    evidence = [{"key": k, "file": report.facts[k].file, "line": report.facts[k].line, "value": report.facts[k].value}
                for k in q.evidence if k in report.facts]
    meta: dict[str, Any] = {
        "kind": q.kind, "hops": q.hops, "difficulty": q.hops, "split_key": f"{seed}:{q.kind}", "form": form,
        "report_seed": seed, "length": length, "chars": len(report.text), "distractors": distractors,
        "verifier": verifier_spec(q, form), "evidence": evidence, "expression": q.expression,
        "planted": report.planted, "question": q.text, "company": report.company,
    }
    if form == "agent":
        meta.update(files=dict(report.files), rollouter="agent", reference_response=q.answer, compact=compact)
        prompt = agent_instruction(report, q, compact)
    else:
        meta["reference_response"] = f"<answer>{q.answer}</answer>"
        prompt = single_turn_prompt(report, q)
    return Task(id=f"reports:{digest}", prompt=prompt, answer=q.answer, meta=meta)
