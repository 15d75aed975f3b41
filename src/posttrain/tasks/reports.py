"""Procedurally generated company reports: the documents of the `docs:reports` domain, deterministic by seed.

Covers: `ReportOptions` (the difficulty knobs: target `length` in characters, `distractors` level 0-3, the
planted inconsistency if any), `generate_report(seed, options) -> Report`: a consistent set of figures
over several fiscal years (segments that sum to the group less inter-segment eliminations, an income
statement, a balance sheet that balances, borrowings and share notes), rendered as labelled tables
(`T3`) and paragraphs (`P12`) in sections (one file each in the agent form); narrative that restates
figures; distractors by level (1: a restated prior-year figure with its note; 2: a near-duplicate
entity's figures in a related-party note; 3: quarterly tables); supplementary subsidiary schedules
(near-duplicate names, consistent figures) that pad the report to `length`; and, when asked, one
planted inconsistency (a paragraph or a table total that contradicts the rest). Every figure a
question can use is a `Fact` with the file and line it is printed on (what an oracle agent reads).
Does not cover: questions and answers (`report_questions.py`), tools and episodes (`agent/reports.py`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

Plant = Literal["paragraph", "segment_total", "balance", "debt_total"]
PLANTS: tuple[Plant, ...] = ("paragraph", "segment_total", "balance", "debt_total")

_STEMS = ("Halvorsen", "Marbury", "Castellan", "Oduya", "Brightwater", "Kestrel", "Novak", "Tamsin", "Arvell",
          "Quenby", "Lindqvist", "Okafor", "Ravensworth", "Ishikawa", "Delacroix", "Pemberton")
_TRADES = ("Maritime", "Industrial", "Foods", "Energy", "Logistics", "Materials", "Health", "Systems")
_SEGMENTS = ("Shipping", "Ports", "Retail", "Wholesale", "Services", "Components", "Software", "Utilities",
             "Chemicals", "Packaging", "Clinics", "Devices")
_REGIONS = ("Nordic", "Iberia", "Asia", "Americas", "Benelux", "Baltic", "Gulf", "Pacific", "Alpine", "Andean")
_FILLER = (
    "The board reviews the group's principal risks each year; none of the matters below changed materially.",
    "Demand in the group's markets remained cyclical and sensitive to freight rates and input costs.",
    "The group continued to invest in systems and training across its operating companies.",
    "Management monitors liquidity weekly against the covenants of its borrowing facilities.",
    "Accounting estimates were applied consistently with the prior year unless stated otherwise.",
    "Exposure to foreign currency is managed through natural hedges and short-dated forward contracts.",
)


@dataclass(frozen=True)
class ReportOptions:
    """What a generated report looks like."""

    length: int = 6000  # target size in characters; reports are padded with schedules up to it (never below the core)
    distractors: int = 2  # 0: none; 1: + a restated prior-year figure; 2: + a near-duplicate entity; 3: + quarterly tables
    plant: Plant | None = None  # one inconsistency to plant, or None: every figure agrees

    def __post_init__(self) -> None:
        if not 500 <= self.length <= 50_000_000:
            raise ValueError(f"length must be in 500..50000000 characters, got {self.length}")
        if not 0 <= self.distractors <= 3:
            raise ValueError(f"distractors must be in 0..3, got {self.distractors}")
        if self.plant is not None and self.plant not in PLANTS:
            raise ValueError(f"plant must be one of {', '.join(PLANTS)} or None, got {self.plant!r}")


@dataclass(frozen=True)
class Fact:
    """One printed figure a question can use: its value, where it is printed, and how it reads there."""

    key: str  # "revenue:2024", "segment_revenue:Ports:2024", "shares:2024", ...
    value: int
    file: str = ""
    line: int = 0  # 1-based line in `file`
    label: str = ""  # the table or paragraph label it is printed in ("T2", "P5")


@dataclass
class Block:
    """A labelled table or paragraph, or an unlabelled line of text (a heading, a footnote)."""

    text: list[str]
    label: str = ""
    facts: list[tuple[int, str]] = field(default_factory=list)  # (line within `text`, fact key)


@dataclass
class Report:
    """A rendered report: its sections (file name -> text), figures and what was planted."""

    company: str
    twin: str  # the near-duplicate entity's name
    years: list[int]
    segments: list[str]
    files: dict[str, str]
    facts: dict[str, Fact]
    notes: dict[str, int]  # note topic -> its number ("restatement": 6)
    planted: str | None  # the label of the block that contradicts the rest, None when all agree
    plant_kind: Plant | None

    @property
    def text(self) -> str:
        """The whole report as one document (what the single-turn form puts in the prompt)."""
        return "\n\n".join(f"=== {name} ===\n{body}" for name, body in self.files.items())


def _fmt(v: int) -> str:
    return f"{v:,}"


def _table(title: str, years: list[int], rows: list[tuple[str, list[int], str]], footnotes: list[str] = ()) -> Block:
    """A pipe table; `rows` are (label, one value per year, fact key prefix or "" for none)."""
    lines = [title, "| Line item | " + " | ".join(f"FY{y}" for y in years) + " |", "|---|" + "---|" * len(years)]
    facts = []
    for label, values, key in rows:
        if key:
            facts += [(len(lines), f"{key}:{y}") for y in years]
        lines.append(f"| {label} | " + " | ".join(_fmt(v) for v in values) + " |")
    return Block(lines + list(footnotes), facts=facts)


class _Labeller:
    """Numbers tables and paragraphs as they are made (renumbered in reading order by `_render`)."""

    def __init__(self, years: list[int]) -> None:
        self.years = years
        self.labels = iter(range(1, 1_000_000_000))

    def table(self, title: str, rows: list[tuple[str, list[int], str]], footnotes: list[str] = ()) -> Block:
        label = f"T{next(self.labels)}"
        b = _table(f"Table {label}. {title} (USD millions)", self.years, rows, footnotes)
        b.label = label
        return b

    def para(self, text: str, keys: tuple[str, ...] = ()) -> Block:
        label = f"P{next(self.labels)}"
        return Block([f"[{label}] {text}"], label, [(0, k) for k in keys])


def _split(rng: random.Random, total: int, parts: int) -> list[int]:
    """`total` split into `parts` positive integers (uneven shares)."""
    weights = [rng.uniform(0.5, 1.5) for _ in range(parts)]
    out = [max(1, int(total * w / sum(weights))) for w in weights]
    out[-1] = total - sum(out[:-1])
    return out


def _draw_figures(rng: random.Random, years: list[int], segments: list[str], d: int
                  ) -> tuple[dict[str, int], dict[str, dict[int, int]], dict[str, dict[int, int]], dict[int, tuple[int, int]]]:
    """Every figure of a report (USD millions), consistent by construction: (facts by key, segment revenue and
    operating income by segment and year, the near-duplicate entity's (revenue, net income) by year)."""
    seg_rev: dict[str, dict[int, int]] = {s: {} for s in segments}
    seg_oi: dict[str, dict[int, int]] = {s: {} for s in segments}
    for s in segments:
        base = rng.randint(300, 4000)
        for y in years:
            base = max(100, int(base * rng.uniform(0.9, 1.25)))
            seg_rev[s][y] = base
            seg_oi[s][y] = max(5, int(base * rng.uniform(0.06, 0.2)))
    f: dict[str, int] = {}
    for y in years:
        elim = rng.randint(5, 90)
        rev = sum(seg_rev[s][y] for s in segments) - elim
        oi = sum(seg_oi[s][y] for s in segments)
        cost = int(rev * rng.uniform(0.5, 0.62))
        interest = rng.randint(3, max(4, oi // 5))
        pbt = oi - interest
        tax = int(pbt * rng.uniform(0.18, 0.3))
        shares = rng.randint(80, 900)
        debt_parts = [rng.randint(50, 900) for _ in range(3)]
        cash, recv, inv, ppe = (rng.randint(50, 2000) for _ in range(4))
        payables = rng.randint(30, 600)
        assets = cash + recv + inv + ppe
        equity = assets - sum(debt_parts) - payables
        if equity <= 50:  # keep equity positive: more plant and equipment
            ppe += 50 - equity + rng.randint(100, 800)
            assets = cash + recv + inv + ppe
            equity = assets - sum(debt_parts) - payables
        f.update({f"eliminations:{y}": elim, f"revenue:{y}": rev, f"cost_of_sales:{y}": cost,
                  f"gross_profit:{y}": rev - cost, f"operating_expenses:{y}": rev - cost - oi,
                  f"operating_income:{y}": oi, f"interest:{y}": interest, f"pretax_income:{y}": pbt,
                  f"income_tax:{y}": tax, f"net_income:{y}": pbt - tax, f"shares:{y}": shares,
                  f"cash:{y}": cash, f"receivables:{y}": recv, f"inventories:{y}": inv, f"ppe:{y}": ppe,
                  f"total_assets:{y}": assets, f"term_loan:{y}": debt_parts[0], f"senior_notes:{y}": debt_parts[1],
                  f"revolver:{y}": debt_parts[2], f"borrowings:{y}": sum(debt_parts), f"payables:{y}": payables,
                  f"equity:{y}": equity, f"total_le:{y}": assets})
        for s in segments:
            f[f"segment_revenue:{s}:{y}"] = seg_rev[s][y]
            f[f"segment_oi:{s}:{y}"] = seg_oi[s][y]
    prior = years[-2]
    if d >= 1:  # the prior year's revenue as first published, before a restatement moved it to this report's figure
        f[f"original_revenue:{prior}"] = f[f"revenue:{prior}"] + rng.choice([-1, 1]) * rng.randint(11, 60)
    twin_figs = {y: (rng.randint(40, 900), rng.randint(2, 80)) for y in years}
    if d >= 2:
        for y in years:
            f[f"twin_revenue:{y}"], f[f"twin_net_income:{y}"] = twin_figs[y]
    return f, seg_rev, seg_oi, twin_figs


def generate_report(seed: int, options: ReportOptions) -> Report:
    """The report of seed `seed`: the same seed and options give the same text, byte for byte."""
    rng = random.Random(f"report:{seed}")
    stem, trade = rng.choice(_STEMS), rng.choice(_TRADES)
    company, twin = f"{stem} {trade} Holdings plc", f"{stem} {trade} Services Ltd"
    compact = options.length < 6000
    n_years = 2 if compact else 3
    last = rng.randint(2015, 2030)
    years = list(range(last - n_years + 1, last + 1))
    segments = rng.sample(_SEGMENTS, 2 if compact else rng.randint(3, 4))
    d = options.distractors

    f, seg_rev, seg_oi, twin_figs = _draw_figures(rng, years, segments, d)
    # notes, numbered in a drawn order after the basis of preparation
    topics = ["segments", "taxes", "borrowings", "shares"] + (["restatement"] if d >= 1 else []) \
        + (["related"] if d >= 2 else [])
    rng.shuffle(topics)
    notes = {t: i + 2 for i, t in enumerate(topics)}
    draw = _Drawn(rng, f, years, segments, seg_rev, seg_oi, notes, d, _Labeller(years))

    # the sections in the order their labels are given out (T<n>, P<n> count up through them)
    sections: dict[str, list[Block]] = {}
    sections["01_overview.md"] = [
        Block([f"# Annual report of {company}", f"Fiscal years FY{years[0]}-FY{years[-1]}; figures in USD millions "
               "unless stated otherwise. Tables are labelled T<n> and paragraphs P<n>."]),
        draw.lab.para(f"{company} operates through {len(segments)} segments: {', '.join(segments)}."),
    ]
    sections["03_statements.md"] = _statements(draw)
    sections["02_management_discussion.md"] = _discussion(draw, compact)
    sections["04_notes.md"] = _notes(draw, twin, twin_figs)
    if d >= 3:
        sections["05_quarterly.md"] = _quarterly(draw)

    planted = _plant(rng, options.plant, sections, f, len(years)) if options.plant else None
    size = sum(len(line) + 1 for blocks in sections.values() for b in blocks for line in b.text)
    sections.update(_schedules(rng, draw.lab, f"{stem} {trade}", size, options.length))
    files, facts, relabel = _render(sections, f)
    planted = relabel[planted] if planted else None
    contents = ["# Contents", f"{company}: annual report FY{years[-1]}", ""] + [
        f"- {name}: {body.splitlines()[0].lstrip('# ')} ({len(body.splitlines())} lines)" for name, body in files.items()]
    files = {"00_contents.md": "\n".join(contents), **files}
    return Report(company, twin, years, segments, files, facts, notes, planted, options.plant)


@dataclass
class _Drawn:
    """What the section builders share: the report's draws so far, its figures and its labeller."""

    rng: random.Random
    f: dict[str, int]  # "<figure>:<year>" -> value (USD millions)
    ys: list[int]
    segments: list[str]
    seg_rev: dict[str, dict[int, int]]
    seg_oi: dict[str, dict[int, int]]
    notes: dict[str, int]  # topic -> note number
    d: int  # distractor level
    lab: _Labeller

    def cols(self, key: str) -> list[int]:
        return [self.f[f"{key}:{y}"] for y in self.ys]


def _statements(w: _Drawn) -> list[Block]:
    """The income statement and the balance sheet."""
    prior = w.ys[-2]
    restated = [f"(r) FY{prior} revenue restated, see Note {w.notes['restatement']}."] if w.d >= 1 else []
    income = w.lab.table("Consolidated income statement", [
        ("Revenue" + (" (r)" if w.d >= 1 else ""), w.cols("revenue"), "revenue"),
        ("Cost of sales", w.cols("cost_of_sales"), "cost_of_sales"),
        ("Gross profit", w.cols("gross_profit"), "gross_profit"),
        ("Operating expenses", w.cols("operating_expenses"), "operating_expenses"),
        ("Operating income", w.cols("operating_income"), "operating_income"),
        ("Interest expense", w.cols("interest"), "interest"),
        ("Profit before tax", w.cols("pretax_income"), "pretax_income"),
        ("Income tax", w.cols("income_tax"), "income_tax"),
        ("Net income", w.cols("net_income"), "net_income"),
    ], restated)
    balance_rows = [("Cash", "cash"), ("Receivables", "receivables"), ("Inventories", "inventories"),
                    ("Property, plant and equipment", "ppe"), ("Total assets", "total_assets"),
                    ("Borrowings", "borrowings"), ("Trade payables", "payables"), ("Shareholders' equity", "equity"),
                    ("Total liabilities and equity", "total_le")]
    balance = w.lab.table("Consolidated balance sheet at year end", [(n, w.cols(k), k) for n, k in balance_rows],
                          [f"Borrowings are analysed in Note {w.notes['borrowings']}."])
    return [Block(["# Financial statements"]), income, balance]


def _discussion(w: _Drawn, compact: bool) -> list[Block]:
    """Management discussion: paragraphs restating the statements and the segment note."""
    f, para, (y0, y1) = w.f, w.lab.para, w.ys[-2:]
    mdna = [Block(["# Management discussion"]),
            para(f"Group revenue was {_fmt(f[f'revenue:{y1}'])} million in FY{y1}, compared with "
                 f"{_fmt(f[f'revenue:{y0}'])} million in FY{y0}.", (f"revenue:{y1}", f"revenue:{y0}"))]
    for s in w.segments:
        mdna.append(para(f"{s} revenue was {_fmt(w.seg_rev[s][y1])} million in FY{y1} and its operating income "
                         f"{_fmt(w.seg_oi[s][y1])} million.", (f"segment_revenue:{s}:{y1}", f"segment_oi:{s}:{y1}")))
    mdna.append(para(f"Net income was {_fmt(f[f'net_income:{y1}'])} million in FY{y1}.", (f"net_income:{y1}",)))
    mdna.append(para(f"Borrowings stood at {_fmt(f[f'borrowings:{y1}'])} million at the end of FY{y1}.",
                     (f"borrowings:{y1}",)))
    if w.d >= 1:
        mdna.append(para(f"FY{y0} revenue was originally reported as {_fmt(f[f'original_revenue:{y0}'])} "
                         f"million (see Note {w.notes['restatement']}).", (f"original_revenue:{y0}",)))
    if not compact:
        mdna += [para(text) for text in w.rng.sample(_FILLER, 2)]
    return mdna


def _notes(w: _Drawn, twin: str, twin_figs: dict[int, tuple[int, int]]) -> list[Block]:
    """The notes to the statements, in their drawn order (adds the segment totals to the figures)."""
    f, ys, table, para, y1 = w.f, w.ys, w.lab.table, w.lab.para, w.ys[-1]
    for y in ys:
        f[f"segment_total:{y}"] = sum(w.seg_rev[s][y] for s in w.segments)
    seg_table = table("Segment revenue", [(s, [w.seg_rev[s][y] for y in ys], f"segment_revenue:{s}") for s in w.segments]
                      + [("Total segments", w.cols("segment_total"), "segment_total")],
                      ["(a) Consolidated revenue is total segment revenue less inter-segment eliminations of "
                       + ", ".join(f"{_fmt(f[f'eliminations:{y}'])} (FY{y})" for y in ys) + "."])
    seg_table.facts += [(len(seg_table.text) - 1, f"eliminations:{y}") for y in ys]
    blocks: dict[str, list[Block]] = {
        "segments": [
            seg_table,
            table("Segment operating income", [(s, [w.seg_oi[s][y] for y in ys], f"segment_oi:{s}") for s in w.segments]
                  + [("Total segments", w.cols("operating_income"), "")]),
        ],
        "taxes": [para(f"The effective tax rate (income tax over profit before tax) was "
                       f"{100 * f[f'income_tax:{y1}'] / f[f'pretax_income:{y1}']:.1f}% in FY{y1}.")],
        "borrowings": [table("Borrowings", [("Term loan", w.cols("term_loan"), "term_loan"),
                                            ("Senior notes", w.cols("senior_notes"), "senior_notes"),
                                            ("Revolving facility", w.cols("revolver"), "revolver"),
                                            ("Total borrowings", w.cols("borrowings"), "")])],
        "shares": [para("The weighted average number of shares in issue (millions) was "
                        + ", ".join(f"{_fmt(f[f'shares:{y}'])} in FY{y}" for y in ys) + ".",
                        tuple(f"shares:{y}" for y in ys))],
    }
    blocks.update(_distractor_notes(w, twin, twin_figs))
    nblocks = [Block(["# Notes to the financial statements", "## Note 1. Basis of preparation"]),
               para("The statements are prepared under the historical cost convention.")]
    for topic in sorted(w.notes, key=w.notes.get):
        nblocks.append(Block([f"## Note {w.notes[topic]}. {_NOTE_TITLES[topic]}"]))
        nblocks += blocks[topic]
    return nblocks


_NOTE_TITLES = {"segments": "Segment information", "taxes": "Income taxes", "borrowings": "Borrowings",
                "shares": "Share capital", "restatement": "Restatement of prior-year figures",
                "related": "Related parties"}


def _distractor_notes(w: _Drawn, twin: str, twin_figs: dict[int, tuple[int, int]]) -> dict[str, list[Block]]:
    """The restatement note (distractors >= 1) and the near-duplicate entity's note (>= 2)."""
    f, ys, prior, out = w.f, w.ys, w.ys[-2], {}
    if w.d >= 1:
        out["restatement"] = [w.lab.para(
            f"FY{prior} revenue was originally reported as {_fmt(f[f'original_revenue:{prior}'])} million. It has "
            f"been restated to {_fmt(f[f'revenue:{prior}'])} million after a change in the timing of recognition "
            "of service contracts.", (f"original_revenue:{prior}",))]
    if w.d >= 2:
        out["related"] = [w.lab.para(
            f"{twin}, a company under common control and not part of the group, reported revenue of "
            + ", ".join(f"{_fmt(twin_figs[y][0])} million in FY{y}" for y in ys) + " and net income of "
            + ", ".join(f"{_fmt(twin_figs[y][1])} million in FY{y}" for y in ys) + ".",
            tuple(f"twin_revenue:{y}" for y in ys))]
    return out


def _quarterly(w: _Drawn) -> list[Block]:
    """Quarterly figures of the last two years: they sum to the year, columns that are not the year's."""
    qs = []
    for y in w.ys[-2:]:
        q_rev, q_ni = _split(w.rng, w.f[f"revenue:{y}"], 4), _split(w.rng, w.f[f"net_income:{y}"], 4)
        label = f"T{next(w.lab.labels)}"
        qs.append(Block([f"Table {label}. Quarterly results FY{y} (USD millions)", "| Quarter | Revenue | Net income |",
                         "|---|---|---|"] + [f"| Q{i + 1} | {_fmt(q_rev[i])} | {_fmt(q_ni[i])} |" for i in range(4)],
                        label))
    return [Block(["# Quarterly results (unaudited)"])] + qs


def _schedules(rng: random.Random, lab: _Labeller, stem: str, size: int, length: int) -> dict[str, list[Block]]:
    """Supplementary schedules from `size` up to `length` characters: subsidiaries with near-duplicate names and
    consistent figures, in files of about 40k characters."""
    sections: dict[str, list[Block]] = {}
    y1 = lab.years[-1]
    part, sched, sched_size, k = 0, [], 0, 0
    while size < length:
        k += 1
        name = f"{stem} ({rng.choice(_REGIONS)}) {rng.choice(('Ltd', 'GmbH', 'BV', 'SA', 'Pte'))} #{k}"
        sub_rev = [rng.randint(20, 900) for _ in lab.years]
        sub_oi = [max(1, int(v * rng.uniform(0.03, 0.2))) for v in sub_rev]
        blocks = [Block([f"## Schedule S{k}. {name}"]),
                  lab.table(f"{name}: summary", [("Revenue", sub_rev, ""), ("Operating income", sub_oi, "")]),
                  lab.para(f"{name} reported revenue of {_fmt(sub_rev[-1])} million in FY{y1}. " + rng.choice(_FILLER))]
        sched += blocks
        grown = sum(len(line) + 1 for b in blocks for line in b.text)
        size, sched_size = size + grown, sched_size + grown
        if sched_size > 40_000 or size >= length:
            part += 1
            head = Block([f"# Supplementary schedules, part {part} (subsidiaries; not group totals)"])
            sections[f"10_schedules_{part:03d}.md"] = [head] + sched
            sched, sched_size = [], 0
    return sections


def _plant(rng: random.Random, kind: Plant, sections: dict[str, list[Block]], f: dict[str, int], n_years: int) -> str:
    """Make one block contradict the rest; returns its label. The latest year's figure moves by 12-75 (millions):
    far beyond any rounding, so the contradiction is unambiguous."""
    delta = rng.choice([-1, 1]) * rng.randint(12, 75)
    last = n_years - 1  # the column planted in: the latest year

    def bump(block: Block, row_start: str, col: int) -> str:
        for i, line in enumerate(block.text):
            if line.startswith(f"| {row_start} |"):
                cells = line.split(" | ")
                value = int(cells[col + 1].strip(" |").replace(",", ""))
                cells[col + 1] = _fmt(value + delta) + (" |" if col + 1 == len(cells) - 1 else "")
                block.text[i] = " | ".join(cells)
                block.facts = [(j, k) for j, k in block.facts if j != i]  # no longer the fact it printed
                return block.label
        raise AssertionError(f"no row {row_start!r} to plant in")

    if kind == "paragraph":
        mdna = [b for b in sections["02_management_discussion.md"] if b.facts and "originally" not in b.text[0]]
        b = rng.choice(mdna)
        _, key = b.facts[0]
        head, body = b.text[0].split("] ", 1)  # never inside the label
        b.text[0] = head + "] " + body.replace(_fmt(f[key]), _fmt(f[key] + delta), 1)
        b.facts = b.facts[1:]
        return b.label
    tables = [b for blocks in sections.values() for b in blocks if b.label.startswith("T")]
    if kind == "segment_total":
        return bump(next(b for b in tables if "Segment revenue" in b.text[0]), "Total segments", last)
    if kind == "balance":
        return bump(next(b for b in tables if "balance sheet" in b.text[0]), "Total assets", last)
    return bump(next(b for b in tables if b.text[0].endswith("Borrowings (USD millions)")), "Total borrowings", last)


def _render(sections: dict[str, list[Block]], f: dict[str, int]) -> tuple[dict[str, str], dict[str, Fact], dict[str, str]]:
    """Sections as files in name order, labels renumbered in reading order, and every fact with the file and line
    that print it (the first place that does). Returns (files, facts, {label as drawn: label as printed})."""
    files, facts, relabel = {}, {}, {}
    counter = 0
    for name in sorted(sections):
        lines: list[str] = []
        for b in sections[name]:
            if b.label:
                counter += 1
                new = f"{b.label[0]}{counter}"
                relabel[b.label] = new
                old = f"[{b.label}]" if b.label[0] == "P" else f"Table {b.label}."
                b.text[0] = b.text[0].replace(old, f"[{new}]" if new[0] == "P" else f"Table {new}.", 1)
                b.label = new
            for offset, key in b.facts:  # a table's line wins over a paragraph restating it
                if key in f and (key not in facts or (facts[key].label[:1] == "P" and b.label[:1] == "T")):
                    facts[key] = Fact(key, f[key], name, len(lines) + offset + 1, b.label)
            lines += b.text
            lines.append("")
        files[name] = "\n".join(lines).rstrip("\n") + "\n"
    for key, value in f.items():  # figures printed nowhere by label (eliminations live in a footnote)
        facts.setdefault(key, Fact(key, value))
    return files, facts, relabel
