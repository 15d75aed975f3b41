"""The built-in base model: a ~1M-parameter Llama pre-trained on arithmetic, built once per machine.

Covers: deterministic pre-training from a seed (character tokenizer built in
code, procedurally generated problems from the train split only, loss on the
answer), stopping on held-out greedy accuracy inside a band with a step cap,
and a content-addressed on-disk cache guarded by a file lock so concurrent
callers build it once; a build stopped part-way (a killed process) resumes from
the state written at its last check, to the same weights as an uninterrupted one.
The same machinery builds a base for the code-writing domain (`family = "code:ops"` or `"code:linear"`, see `tasks/codegen.py`),
measured by the sandboxed unit-test verifier instead of exact match; the
arithmetic path, its cache keys and its results are untouched by that. And a
base for the multi-turn agent domain (`family = "lookup"`, `agent/lookup.py`):
pre-trained on whole oracle episodes token for token as the runtime builds them
(loss on the sampled calls only), its band measured by real greedy episodes in
the sandbox (held-out episode success). And a base for CAD parts (`family = "cad:parts"`, `tasks/cad.py`,
`digits` = the level): pre-trained on the gold OpenSCAD programs of the `brief` form, its band measured by the sandboxed `cad`
verifier (held-out pass rate of greedy programs); family `cad_agent:parts` learns, beside those programs, correction
episodes of `cad_agent:parts`'s brief form (`CAD_EPISODES` a step, `agent/cad_tools.py`: an opening program, written
as the single-shot one is, with a planted mistake or none, the render tool's line, then the gold rendered or the
clean one submitted), 1,024 positions, the same band, then a correction tail. And a base for long
reports (`family = "docs:reports"`,
`digits` = hops, 1 the easy level): pre-trained on the compact agent form's oracle episodes (`agent/reports.py`,
`agent/traces.py`), 8,192 positions (`DOCS_CONTEXT`), its band measured by real greedy episodes as for `lookup`.
Does not cover: general-purpose pre-training of larger models.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from posttrain.config import BaseModelConfig
from posttrain.engine.build import build_engine
from posttrain.eval.accuracy import AccuracyResult, evaluate_accuracy
from posttrain.models.batch import pad_rows
from posttrain.models.config import ModelConfig
from posttrain.models.io import save_model
from posttrain.models.llama import CausalLM
from posttrain.models.tokenizer import Tokenizer, char_tokenizer
from posttrain.rewards.verifiers import ExactMatch
from posttrain.tasks.arithmetic import ArithmeticSource
from posttrain.tasks.codegen import CodeSource

BASE_FORMAT = 3  # bump when pre-training code changes what a cached model is (3: a stopping set disjoint from
# the evaluation problems, which are distinct canonical problems)
# The first held-out problems of a seed are the evaluation problems (the trainer's default `eval.size`,
# and the quickstart's before/after figures); the base model's band checks draw the ones after them.
EVAL_RESERVE = 500
CODE_BASE_FORMAT = 1  # the same, for code-domain bases only (their keys include it; arithmetic keys do not)
AGENT_BASE_FORMAT = 8  # the same, for agent-domain bases (4: copy drills every other step; 5: 3 lines per file with
# distractors, the split on the chain and value; 6: trace windows open with the task's instruction; 7: the docs
# base's way: `COPY_PHASE_STEPS` of short repeat drills alone first, then `REPEAT_ROWS` of them in every step; 8: the
# quoting oracle, each call after a read opens with the key's line of that file (`lookup.oracle_quotes`), and no copy
# drills, whose replies went from the file straight to the call)
AGENT_CONTEXT = 1024  # positions of an agent base: a lookup episode is ~560 tokens, at most ~700
CAD_BASE_FORMAT = 3  # the same, for CAD bases (their keys include it; 2: the band counts each part kind against
# `kind_floor`, and pre-training redraws half the bare blocks, so holed parts are two thirds of its batches; 3: the
# band check's OpenSCAD runs are limited in CPU seconds, not wall time, and a stalled verdict is graded again: a
# format-2 base built on a loaded machine may have trained past the step where its band was met)
CAD_AGENT_BASE_FORMAT = 4  # the same, for `cad_agent:parts` bases (gold programs plus correction episodes; 2: then a
# correction tail, `correction_tail`: the format-1 base, in band at step 200, wrote a well-formed first call in few of its
# greedy episodes, 8 episodes a step being too few beside 32 programs; 3: the observation passes exactly when the
# verifier does (each feature's IoU too) and names each feature's IoU, and the tail runs a fixed number of steps;
# 4: the episode opens as single-shot does, a bare program after the prompt alone, rendered by the runtime, and the
# workspace's last rendered program is graded: a mistaken opening is corrected by a second render, a clean one kept
# with `submit()`; the tail runs `CAD_TAIL_STEPS` 100: 200 did not fit the twelfth session's share of the CPU)
CAD_TAIL_EPISODES = 16  # a correction tail's step: this many episodes...
CAD_TAIL_PROGRAMS = 8  # ...and this many gold programs (so the single-shot form is not forgotten)
CAD_TAIL_STEPS = 100  # the tail's length, fixed (its checks are recorded, not a stopping rule)
CAD_TAIL_CHECK_EVERY = 25  # greedy episodes of the stopping set's first `CAD_TAIL_CHECK_PARTS` parts, this often
CAD_TAIL_CHECK_PARTS = 32
CAD_AGENT_CONTEXT = 1024  # positions of a `cad_agent:parts` base: a one-correction episode is ~450 tokens (at most
# ~550), and a second render round adds ~250
CAD_EPISODES = 8  # correction episodes per pre-training step of a `cad_agent:parts` base, beside `batch_size` programs
DOCS_BASE_FORMAT = 4  # the same, for `docs:reports` bases (their keys include it; 2: the copied tokens weighted
# `DOCS_DECISION_WEIGHT`, and every `DOCS_DRILL_EVERY`th step a batch of `_docs_drills`; 3: `_repeat_drills` in every
# step; 4: `COPY_PHASE_STEPS` of repeat drills alone first)
DOCS_CONTEXT = 8192  # positions of a docs base: an easy compact episode is ~750 tokens whatever the report's length;
# 8,192 hold a `DOCS_LENGTH` report whole, so the single-turn form has a length that fits to compare with
DOCS_LENGTH = 6000  # characters of the reports a docs base learns on (the smallest with every fiscal year: from 6,000 up a
# report's questions and answers are the same at any length, only the padding grows)
DOCS_DISTRACTORS = 0  # the easy level: no restated figure, near-duplicate entity or quarterly tables
CAD_BLOCK_REDRAW = 0.5  # a CAD base's batches: a drawn part with one feature (a bare block) is redrawn this often
CAD_CONTEXT = 256  # positions of a CAD base: a brief level-1 prompt and its gold program are at most ~160 tokens


@dataclass
class BaseBuild:
    path: Path
    accuracy: float  # held-out greedy accuracy at the stop
    steps: int
    seconds: float
    cached: bool  # True when reused from the cache, not built now
    in_band: bool
    by_kind: dict[str, float] | None = None  # held-out greedy pass rate per part kind at the stop (CAD bases)
    resumed_from: int | None = None  # the step a stopped build was resumed from (None: built in one go)


def cache_root(cfg: BaseModelConfig) -> Path:
    root = cfg.cache_dir or os.environ.get("POSTTRAIN_CACHE") or Path.home() / ".cache" / "posttrain"
    return Path(root) / "base"


def is_code(cfg: BaseModelConfig) -> bool:
    return cfg.family.startswith("code:")


def is_agent(cfg: BaseModelConfig) -> bool:
    return cfg.family == "lookup"


def is_cad(cfg: BaseModelConfig) -> bool:
    """A CAD base (`cad:parts`, or `cad_agent:parts`, which also learns correction episodes)."""
    return cfg.family.startswith(("cad:", "cad_agent:"))


def is_cad_agent(cfg: BaseModelConfig) -> bool:
    return cfg.family.startswith("cad_agent:")


def is_docs(cfg: BaseModelConfig) -> bool:
    return cfg.family == "docs:reports"


def is_episodic(cfg: BaseModelConfig) -> bool:
    """A base pre-trained on oracle episodes and measured by real ones (the lookup and docs families)."""
    return is_agent(cfg) or is_docs(cfg)


def docs_domain(cfg: BaseModelConfig, length: int = DOCS_LENGTH) -> Any:
    """The `docs:reports` domain a docs base learns and is measured on: the compact agent form at `cfg.digits`
    hops (1: one-figure lookups), `DOCS_DISTRACTORS`, reports of `length` characters."""
    from posttrain.tasks.domains import load_domain

    return load_domain("docs:reports", form="agent", compact=True, hops=cfg.digits, distractors=DOCS_DISTRACTORS,
                       length=length, held_out_fraction=cfg.held_out_fraction)


def base_key(cfg: BaseModelConfig) -> str:
    # `worked` and `context` join the key only when set, so every base built before them keeps its key
    fields = cfg.model_dump(exclude={"cache_dir"} | (set() if cfg.worked else {"worked"})
                            | (set() if cfg.context else {"context"}) | (set() if cfg.kind_floor else {"kind_floor"}))
    if is_agent(cfg):
        blob = json.dumps({"format": BASE_FORMAT, "agent_format": AGENT_BASE_FORMAT, **fields}, sort_keys=True)
        return f"agent-{cfg.family}-h{cfg.digits}-s{cfg.seed}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"
    if is_docs(cfg):
        blob = json.dumps({"format": BASE_FORMAT, "docs_format": DOCS_BASE_FORMAT, **fields}, sort_keys=True)
        return f"docs-reports-h{cfg.digits}-s{cfg.seed}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"
    if is_cad_agent(cfg):
        blob = json.dumps({"format": BASE_FORMAT, "cad_format": CAD_BASE_FORMAT, "cad_agent_format": CAD_AGENT_BASE_FORMAT,
                           **fields}, sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
        return f"cad-agent-{cfg.family.split(':', 1)[1]}-l{cfg.digits}-s{cfg.seed}-{digest}"
    if is_cad(cfg):
        blob = json.dumps({"format": BASE_FORMAT, "cad_format": CAD_BASE_FORMAT, **fields}, sort_keys=True)
        return f"cad-{cfg.family.split(':', 1)[1]}-l{cfg.digits}-s{cfg.seed}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"
    if is_code(cfg):
        blob = json.dumps({"format": BASE_FORMAT, "code_format": CODE_BASE_FORMAT, **fields}, sort_keys=True)
        family = cfg.family.replace(":", "-")
        return f"{family}-d{cfg.digits}-s{cfg.seed}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"
    blob = json.dumps({"format": BASE_FORMAT, **fields}, sort_keys=True)
    return f"arith-{cfg.family}-d{cfg.digits}-s{cfg.seed}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def base_task_source(cfg: BaseModelConfig) -> Any:
    """The problems the base model learns from (train split) and is measured on (held-out split).

    A code family uses the task generator's defaults for every knob but `digits`, so a training
    source `code:<family>` with the same `tasks.digits` draws from the same distribution.
    """
    if is_docs(cfg):
        return docs_domain(cfg).source
    if is_agent(cfg):
        from posttrain.agent.lookup import LookupSource

        return LookupSource(hops=cfg.digits, min_hops=cfg.min_digits or 1, held_out_fraction=cfg.held_out_fraction)
    if is_cad(cfg):
        from posttrain.tasks.cad import PartsSource

        # brief: the one-line feature list and program (the full prompt is ~300 characters before the program, and a
        # pre-training step on it took ~20 s on the shared 2 cores; the brief form is a third of that length)
        return PartsSource(level=cfg.digits, brief=True, held_out_fraction=cfg.held_out_fraction)
    if is_code(cfg):
        family = cfg.family.split(":", 1)[1]
        return CodeSource(family=family, digits=cfg.digits, held_out_fraction=cfg.held_out_fraction)  # type: ignore[arg-type]
    return ArithmeticSource(
        family=cfg.family, digits=cfg.digits, min_digits=cfg.min_digits, held_out_fraction=cfg.held_out_fraction,
        worked=cfg.worked,
    )


def _batch(tokenizer: Tokenizer, tasks, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] right-padded ids and [B, T-1] loss mask covering answer tokens and EOS."""
    rows, masks = [], []
    for t in tasks:
        prompt = tokenizer.encode(t.prompt)
        answer = tokenizer.encode(t.meta.get("solution", t.answer), add_bos=False) + [tokenizer.eos_id]
        rows.append(prompt + answer)
        masks.append([0] * (len(prompt) - 1) + [1] * len(answer))
    return pad_rows(rows, masks, tokenizer.pad_id)


AGENT_WINDOW = 160  # tokens of an oracle episode per pre-training example: the last observation and the call, after
# the task's instruction (without it a window of a later call cannot tell which of a file's lines to follow)
DOCS_WINDOW = 200  # tokens of a docs oracle episode per windowed example (after the question)
DOCS_FULL_EVERY = 4  # every 4th docs step trains on whole episodes (the prefix, then the first call)
DOCS_DECISION_WEIGHT = 5.0  # a docs episode's copied tokens (the search's words and year, the submitted year and
# figure): at x50 (the lookup base's) the call's own syntax is ~1/50 of the loss and its end drifts in free running
DOCS_DRILL_EVERY = 2  # every 2nd docs step is a batch of `_docs_drills` (the year and figure copies that fail)
REPEAT_ROWS = 32  # `_repeat_drills` rows joining every step of an episodic base (docs format 3, agent format 7): the
# copy itself, on cheap tokens
COPY_PHASE_STEPS = 300  # an episodic base's first steps are repeat drills alone (docs format 4, agent format 7): short
COPY_PHASE_ROWS = 64  # strings, short gaps, this many a step; the plain copy forms there in a few hundred steps (on 2
# layers at lr 1e-3), and episodes need it
AGENT_FULL_EVERY = 10  # every 10th step trains on whole episodes (the first call, positions up to the end)
LOOKUP_DECISION_WEIGHT = 5.0  # the same for the quoting oracle's episodes (format 8): its quotes are ~8 copied tokens a
# call, and at x50 a call's own syntax would be a few percent of the loss (the docs base's finding at x50)
AGENT_DECISION_WEIGHT = 50.0  # loss weight of the tokens a call copies from what the agent read (the JSON around
# them is learned in a hundred steps; these decide the episode and are ~1 token in 60)


_LETTERS = "abcdefghijklmnopqrstuvwxyz"
AGENT_DRILL_EVERY = 2  # every 2nd step is a batch of copy drills (short, cheap: most of what the base must learn)


def _distractor_key(rng: random.Random, key: str, near: float) -> str:
    """A drill's distractor key: two random letters, or with probability `near` one of them `key`'s, in its place
    (no draw at `near` = 0: the recipe's drills are unchanged). It may equal `key`; the caller drops those."""
    k = rng.choice(_LETTERS) + rng.choice(_LETTERS)
    if near and rng.random() < near:
        k = key[0] + k[1] if rng.random() < 0.5 else k[0] + key[1]
    return k


def _copy_drills(tokenizer: Tokenizer, rng: random.Random, n: int, lines: int = 1,
                 near: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """n short copy drills: an observation line (`qx -> k` or `qx = 7`), a random-length tail of the text that
    follows it in an episode, then the copied character, the only token with loss. The varying gap makes the
    model find the character by what precedes it (content), which is what an episode needs at any distance.
    With `lines` > 1 the observation holds other keys' lines too, and the drill opens with the task's instruction:
    the line to copy from is the one whose key the instruction names, as in an episode with distractors. With
    probability `near` a distractor's key shares one of the key's characters, in its place (so that matching one
    character of the key is not enough)."""
    from posttrain.agent import format as fmt
    from posttrain.agent.episode import ToolCall
    from posttrain.agent.lookup import SYMBOLS, instruction

    rows = []
    for _ in range(n):
        key = rng.choice(_LETTERS) + rng.choice(_LETTERS)
        x = rng.choice(SYMBOLS)
        pointer = rng.random() < 0.5
        line = f"{key} -> {x}" if pointer else f"{key} = {x}"
        call = ToolCall("read", {"path": "\0"}) if pointer else ToolCall("submit", {"answer": "\0"})
        if lines > 1:
            others = [k for k in (_distractor_key(rng, key, near) for _ in range(2 * lines)) if k != key]
            shown = [line] + [f"{k} -> {rng.choice(SYMBOLS)}" if rng.random() < 0.5 else f"{k} = {rng.choice(SYMBOLS)}"
                              for k in others[: lines - 1]]
            rng.shuffle(shown)
            head = fmt.render_observation("read", "\n".join(shown))
            lead = instruction(key) + "\n"
        else:
            head = fmt.render_observation("read", line)
        tail = fmt.render_call(call).split("\\u0000")[0]
        if lines <= 1:
            lead = instruction(key)[: rng.randint(0, 40)] if rng.random() < 0.3 else ""
        text = lead + head + tail[rng.randint(0, len(tail) - 1):]
        ids = tokenizer.encode(text, add_bos=False) + tokenizer.encode(x, add_bos=False)
        rows.append((ids, [0.0] * (len(ids) - 1) + [1.0]))
    return pad_rows([ids for ids, _ in rows], [w[1:] for _, w in rows], tokenizer.pad_id)


def _recall_drills(tokenizer: Tokenizer, rng: random.Random, n: int, pairs: tuple[int, int] = (3, 10),
                   instruct: float = 0.3, letters: tuple[int, int] = (3, 6)) -> tuple[torch.Tensor, torch.Tensor]:
    """n dense associative-recall drills (multi-query, as MQAR in the Zoology paper): a copy drill whose file holds
    `pairs` (lo, hi) key lines, then one query for every key of the file, each query's value a trained token, so a
    drill carries 1 + lines key-dependent tokens where `_copy_drills` carries one. A query is, with probability
    `instruct`, the task's instruction for that key, then a tail of the call (the episode's form, the key some 15-45
    tokens back), else the key's line again up to its value (`qx -> `: the key next to the value). A drill's keys
    are distinct pairs of a few letters (`letters` (lo, hi) of them), so most keys share a character with another
    in its place and only a match of both characters finds the line."""
    from posttrain.agent import format as fmt
    from posttrain.agent.episode import ToolCall
    from posttrain.agent.lookup import SYMBOLS, instruction

    def tail(pointer: bool) -> str:
        call = ToolCall("read", {"path": "\0"}) if pointer else ToolCall("submit", {"answer": "\0"})
        text = fmt.render_call(call).split("\\u0000")[0]
        return text[rng.randint(0, len(text) - 1):]

    rows = []
    for _ in range(n):
        alphabet = rng.sample(_LETTERS, rng.randint(*letters))
        pairs_n = min(rng.randint(*pairs), len(alphabet) ** 2)
        keys = rng.sample([a + b for a in alphabet for b in alphabet], pairs_n)
        table = {k: (rng.random() < 0.5, rng.choice(SYMBOLS)) for k in keys}
        lines = [f"{k} -> {x}" if pointer else f"{k} = {x}" for k, (pointer, x) in table.items()]
        rng.shuffle(lines)
        first = rng.choice(keys)
        pieces = [(instruction(first) + "\n" + fmt.render_observation("read", "\n".join(lines)) + tail(table[first][0]),
                   table[first][1])]
        asked = rng.sample(keys, len(keys))
        spelled = set(rng.sample(asked, round(instruct * len(asked))))  # a fixed count: rows of a batch alike in length
        for k in asked:
            pointer, x = table[k]
            if k in spelled:
                pieces.append(("\n" + instruction(k) + "\n" + tail(pointer), x))
            else:
                pieces.append(("\n" + (f"{k} -> " if pointer else f"{k} = "), x))
        ids: list[int] = []
        weight: list[float] = []
        for text, x in pieces:
            lead = tokenizer.encode(text, add_bos=False)
            ids += lead + tokenizer.encode(x, add_bos=False)
            weight += [0.0] * len(lead) + [1.0]
        rows.append((ids, weight))
    return pad_rows([ids for ids, _ in rows], [w[1:] for _, w in rows], tokenizer.pad_id)


def _docs_drills(tokenizer: Tokenizer, rng: random.Random, tasks) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense drills of the copies a compact `docs:reports` episode turns on, one row per task, in the episode's own
    entries without the stable prefix: the question, the search call (its value, the question's words and year,
    trained), the hit, the submit call (its value, the year and the figure after it in the hit, trained), then one
    more submit call for each other fiscal year the hit line names, in random order, the year given and only the
    figure trained (multi-query recall over the hit, as `_recall_drills` over a file). The value tokens weigh 1."""
    import re

    from posttrain.agent.episode import ToolCall
    from posttrain.agent.models import TextCodec
    from posttrain.agent.reports import oracle_steps
    from posttrain.agent.traces import call_value_span

    codec = TextCodec(tokenizer)

    def call(c: ToolCall, trained_from: int = 0) -> tuple[list[int], list[float]]:
        ids, start, end = call_value_span(c, tokenizer, trained_from)
        return ids, [float(start <= j < end) for j in range(len(ids))]

    rows = []
    for t in tasks:
        steps = oracle_steps(t)
        (search, hit), (submit, _) = steps[0], steps[-1]
        ids = list(codec.entry("task", t.prompt).ids)
        weight = [0.0] * len(ids)
        for piece in (call(search), (list(codec.entry("observation", hit, 1, search.name).ids), None), call(submit)):
            ids += piece[0]
            weight += piece[1] if piece[1] is not None else [0.0] * len(piece[0])
        asked = submit.arguments["answer"].split(" ")[0]
        others = [(y, v) for y, v in re.findall(r"(FY\d{4}) (-?[\d,.]+)", hit) if y != asked]
        if not others:  # a paragraph hit names the figure before its year: `242 in FY2027`
            others = [(y, v) for v, y in re.findall(r"(-?[\d,.]+) in (FY\d{4})", hit) if y != asked]
        rng.shuffle(others)
        for year, figure in others:
            more, w = call(ToolCall("submit", {"answer": f"{year} {figure.rstrip('.,')}"}), len(year) + 1)
            ids += more
            weight += w
        rows.append((ids, weight))
    return pad_rows([ids for ids, _ in rows], [w[1:] for _, w in rows], tokenizer.pad_id)


_REPEAT_ALPHABET = "0123456789,.|-FY abcdefghijklmnopqrstuvwxyz"


def _repeat_drills(tokenizer: Tokenizer, rng: random.Random, n: int, length: tuple[int, int] = (8, 40),
                   gap: tuple[int, int] = (0, 120)) -> tuple[torch.Tensor, torch.Tensor]:
    """n repeat drills, the plainest copy there is: a random string of `length` characters, random filler of `gap`
    characters, then the string again, its characters after the first two trained (the first two find where the
    copy starts). A random string can only be continued by copying it, so these teach the copy an episode's year
    and figure need on a fraction of an episode's tokens; the filler spaces the copy as far back as an episode's."""
    rows = []
    for _ in range(n):
        s = "".join(rng.choice(_REPEAT_ALPHABET) for _ in range(rng.randint(*length)))
        filler = "".join(rng.choice(_REPEAT_ALPHABET) for _ in range(rng.randint(*gap)))
        head = tokenizer.encode(s + "\n" + filler + "\n", add_bos=False)
        copy = tokenizer.encode(s, add_bos=False)
        rows.append((head + copy, [0.0] * (len(head) + 2) + [1.0] * (len(copy) - 2)))
    return pad_rows([ids for ids, _ in rows], [w[1:] for _, w in rows], tokenizer.pad_id)


def copy_phase_batch(tokenizer: Tokenizer, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    """A step of a base's copy phase: `COPY_PHASE_ROWS` short repeat drills (10-30 characters, 0-16 of filler)."""
    return _repeat_drills(tokenizer, rng, COPY_PHASE_ROWS, (10, 30), (0, 16))


def docs_batch(
    tokenizer: Tokenizer, tasks, rng: random.Random, step: int, decision_weight: float = DOCS_DECISION_WEIGHT,
    repeat_rows: int = REPEAT_ROWS, copy_steps: int = COPY_PHASE_STEPS,
) -> tuple[torch.Tensor, torch.Tensor, tuple[tuple[torch.Tensor, torch.Tensor], ...]]:
    """A `docs:reports` base's pre-training step at `step`, as (ids, weights, more batches of the same step):
    drills every `DOCS_DRILL_EVERY`th step, else oracle episodes, whole every `DOCS_FULL_EVERY`th step, else windows
    that end at a call (`DOCS_WINDOW` tokens after the question, ~370 in all: the question's words and the hit's figure
    are the copies that decide an episode); `repeat_rows` `_repeat_drills` join every step. The first `copy_steps`
    steps are `COPY_PHASE_ROWS` short repeat drills alone."""
    if step <= copy_steps:
        return (*copy_phase_batch(tokenizer, rng), ())
    more = (_repeat_drills(tokenizer, rng, repeat_rows),) if repeat_rows else ()
    if step % DOCS_DRILL_EVERY == 1:
        return (*_docs_drills(tokenizer, rng, tasks), more)
    width = None if step % DOCS_FULL_EVERY == 0 else DOCS_WINDOW
    return (*_trace_batch(tokenizer, tasks, rng, width, docs=True, decision_weight=decision_weight), more)


def lookup_batch(
    tokenizer: Tokenizer, tasks, rng: random.Random, step: int, repeat_rows: int = REPEAT_ROWS,
    copy_steps: int = COPY_PHASE_STEPS,
) -> tuple[torch.Tensor, torch.Tensor, tuple[tuple[torch.Tensor, torch.Tensor], ...]]:
    """An `agent:lookup` base's pre-training step at `step`, as `docs_batch` gives a docs base's: the first
    `copy_steps` steps are the copy phase alone; then the quoting oracle's episodes, whole every `AGENT_FULL_EVERY`th
    step (a quarter as many: they are ~4x longer), else windows of `AGENT_WINDOW` tokens after the instruction;
    `repeat_rows` `_repeat_drills` join every step after the phase."""
    if step <= copy_steps:
        return (*copy_phase_batch(tokenizer, rng), ())
    more = (_repeat_drills(tokenizer, rng, repeat_rows),) if repeat_rows else ()
    if step % AGENT_FULL_EVERY == 0:
        return (*_trace_batch(tokenizer, tasks[: max(1, len(tasks) // 4)], decision_weight=LOOKUP_DECISION_WEIGHT), more)
    return (*_trace_batch(tokenizer, tasks, rng, AGENT_WINDOW, decision_weight=LOOKUP_DECISION_WEIGHT), more)


def drill_accuracy(model: CausalLM, ids: torch.Tensor, weight: torch.Tensor, chunk: int = 128) -> float:
    """Greedy teacher-forced accuracy of `model` on drills (`_copy_drills`' [B, T] ids and [B, T-1] weights): the
    share of the tokens with loss whose argmax prediction is the drill's token."""
    model.eval()
    right = total = 0
    with torch.no_grad():
        for i in range(0, len(ids), chunk):
            rows, scored = ids[i:i + chunk], weight[i:i + chunk] > 0  # [b, T], [b, T-1]
            pred = model(rows)[:, :-1].argmax(-1)  # [b, T-1]: pred[:, j] guesses rows[:, j + 1]
            right += int((pred == rows[:, 1:])[scored].sum())
            total += int(scored.sum())
    return right / max(total, 1)


def _trace_window(ids: list[int], weight: list[float], rng: random.Random, width: int,
                  keep: tuple[int, int] | None = None) -> tuple[list[int], list[float]]:
    """A window of `width` tokens of an episode that ends with one of its calls (RoPE attention is relative:
    what the window teaches holds at any position); the whole episode when it is shorter. `keep` = [start, end) of
    tokens the window must hold (the instruction, which names the key to follow among a file's lines): when the
    window starts after `start`, those tokens open it, then the window (its first token untrained, as it follows
    them only here), so a window holds at most `width` + `end` - `start` tokens."""
    if len(ids) <= width:
        return ids, weight
    ends = [i + 1 for i in range(len(weight)) if weight[i] and (i + 1 == len(weight) or not weight[i + 1])]
    end = rng.choice(ends)
    start = max(0, end - width)
    if keep is None or start <= keep[0]:
        return ids[start:end], [0.0] + weight[start + 1:end]
    head, start = keep, max(start, keep[1])
    # the token after the kept span is trained only where it follows that span in the episode too
    first = weight[start] if start == head[1] else 0.0
    return ids[head[0]:head[1]] + ids[start:end], [0.0] * (head[1] - head[0]) + [first] + weight[start + 1:end]


def _docs_trace(task: Any, tokenizer: Tokenizer, decisions: list[bool]) -> tuple[list[int], list[bool]]:
    """A `docs:reports` task's oracle episode in the compact form, token for token (`traces.episode_trace`)."""
    from posttrain.agent.reports import LINE_SPEC, oracle_steps
    from posttrain.agent.traces import episode_trace

    return episode_trace(LINE_SPEC, task.prompt, oracle_steps(task), tokenizer, decisions)


def _docs_span(task: Any, tokenizer: Tokenizer) -> tuple[int, int]:
    from posttrain.agent.reports import LINE_SPEC
    from posttrain.agent.traces import instruction_span

    return instruction_span(LINE_SPEC, task.prompt, tokenizer)


def _trace_batch(tokenizer: Tokenizer, tasks, rng: random.Random | None = None, width: int | None = None,
                 docs: bool = False, decision_weight: float = AGENT_DECISION_WEIGHT) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] right-padded oracle episodes (or windows of them, `width` tokens each after the task's instruction,
    drawn with `rng`) and the [B, T-1] loss weights: 1 on the calls the model samples, `AGENT_DECISION_WEIGHT` on
    their copied values (`decision_weight`). `docs`: `docs:reports` tasks (the compact form), else `agent:lookup` ones."""
    from functools import partial

    from posttrain.agent.lookup import instruction_span, oracle_trace

    trace, span = (_docs_trace, _docs_span) if docs else (partial(oracle_trace, quote=True), instruction_span)
    rows = []
    for t in tasks:
        decisions: list[bool] = []
        ids, mask = trace(t, tokenizer, decisions)
        weight = [decision_weight if d else float(m) for m, d in zip(mask, decisions)]
        if width is not None and rng is not None:
            ids, weight = _trace_window(ids, weight, rng, width, span(t, tokenizer))
        rows.append((ids, weight))
    return pad_rows([ids for ids, _ in rows], [w[1:] for _, w in rows], tokenizer.pad_id)


def _correction_batch(tokenizer: Tokenizer, tasks, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] right-padded correction episodes of `cad_agent:parts`'s brief form (`cad_tools.correction_trace`: a
    first attempt, gold or with a planted mistake, its render's line, the gold program submitted) and the [B, T-1]
    loss weights (the sampled calls, except a mistaken first attempt)."""
    from posttrain.agent.cad_tools import correction_trace

    rows = [correction_trace(t, tokenizer, rng) for t in tasks]
    return pad_rows([ids for ids, _ in rows], [w[1:] for _, w in rows], tokenizer.pad_id)


def _episode_success(engine, tasks, spec: Any = None) -> float:
    """Held-out greedy episode success: one real episode per task, in the sandbox, as RL will run them (`spec`: the
    domain's `AgentSpec`, `agent:lookup`'s by default)."""
    from posttrain.agent.lookup import SPEC
    from posttrain.eval.harness import EvalSpec
    from posttrain.eval.run import run_eval
    from posttrain.tasks.suites import Suite

    agent = spec or SPEC
    # built before (and apart from) any run: this process's local sandbox (`current_sandboxes`), started at the first
    # check; the episodes verify themselves, so the suite needs no verifier of its own
    eval_spec = EvalSpec(model="in-process", suite="held-out", max_tokens=agent.max_tokens)
    run = run_eval(engine, Suite("held-out", list(tasks), None, agent=agent), eval_spec)
    assert run.summary is not None  # run_eval always summarizes
    return run.summary.pass1


def stopping_set(cfg: BaseModelConfig, source: Any = None) -> list:
    """The problems the band checks measure: held-out problems after the first `EVAL_RESERVE` of the seed's
    held-out draw, so never one the trainer or the quickstart evaluates on. A held-out split too small to
    spare them (a 1-digit toy) falls back to training problems, with a warning: the check then measures fit."""
    import warnings

    source = source or base_task_source(cfg)
    draw = source.take(EVAL_RESERVE + 4 * cfg.eval_size, "held_out", seed=cfg.seed)

    def key(task) -> str:  # the canonical problem (a+b and b+a are one), what the split hashes
        return str(task.meta.get("split_key", task.id))

    seen = {key(t) for t in draw[:EVAL_RESERVE]}
    stop = []
    for t in draw[EVAL_RESERVE:]:
        if key(t) not in seen and len(stop) < cfg.eval_size:
            seen.add(key(t))
            stop.append(t)
    if len(stop) >= min(cfg.eval_size, 16):
        return stop
    warnings.warn(
        f"base model {cfg.family} d{cfg.digits}: the held-out split has no problems beyond the {EVAL_RESERVE} "
        "reserved for evaluation; the band checks use training problems",
        stacklevel=2,
    )
    return source.take(cfg.eval_size, "train", seed=cfg.seed)


def _fresh_model(cfg: BaseModelConfig, vocab_size: int, agent: bool) -> CausalLM:
    """The untrained base of `cfg`, its weights drawn from the config's seed."""
    mcfg = ModelConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.context or (DOCS_CONTEXT if is_docs(cfg) else AGENT_CONTEXT if agent
                                                else CAD_AGENT_CONTEXT if is_cad_agent(cfg)
                                                else CAD_CONTEXT if is_cad(cfg) else 128),
        tie_word_embeddings=True,
    )
    model = CausalLM(mcfg)
    model.init_weights(torch.Generator().manual_seed(cfg.seed))
    return model


def _stopping_verifier(cfg: BaseModelConfig, source: Any, agent: bool) -> tuple[Any, int]:
    """The verifier the band check grades with and the answer's token budget (None, 0 for agent episodes,
    which are judged by their own success)."""
    if isinstance(source, CodeSource):
        from posttrain.rewards.registry import make_verifier
        from posttrain.tasks.codegen import VERIFIER

        return make_verifier(VERIFIER), source.max_answer_chars + 1  # the sandboxed unit tests, as in RL and evaluation
    if is_cad(cfg):
        from posttrain.rewards.registry import make_verifier

        # the sandboxed verifier of RL and evaluation; each task carries its pass_iou
        return make_verifier("cad"), max(len(t.answer) for t in source.take(500, "train", seed=cfg.seed)) + 8
    if agent:
        return None, 0
    verifier = ExactMatch(extract="last_number" if cfg.worked else "full")
    return verifier, source.max_solution_chars + 1 if cfg.worked else len(str(10 ** (cfg.digits + 1))) + 2


REGRADE_TRIES = 3  # a band check grades a response whose verdict the machine spoiled at most this often in all


def band_accuracy(engine: Any, tasks: list, verifier: Any, max_tokens: int) -> AccuracyResult:
    """A band check's greedy accuracy on `tasks`, each response whose verdict is not OK (the verifier's error or
    timeout: a stalled OpenSCAD run on a loaded machine) graded again, up to `REGRADE_TRIES` times in all, so the
    stop reads the model, not the machine's load (issue 42: one CAD base read 0.203 and 0.500 at the same step
    in two sessions). The responses are not regenerated. Still unjudged after that: a failure, with a warning."""
    import warnings

    from posttrain.rewards.base import score_sync

    result = evaluate_accuracy(engine, tasks, verifier, max_tokens=max_tokens)
    if not result.errored:
        return result
    per_task, errored = dict(result.per_task), dict(result.errored)
    by_id = {t.id: t for t in tasks}
    for _ in range(REGRADE_TRIES - 1):
        if not errored:
            break
        ids = list(errored)
        verdicts = score_sync(verifier, [by_id[i] for i in ids], [errored[i] for i in ids])
        errored = {i: errored[i] for i, v in zip(ids, verdicts) if not v.ok}
        per_task.update({i: float(v.passed) for i, v in zip(ids, verdicts) if v.ok})
    if errored:
        warnings.warn(f"base model band check: {len(errored)} of {len(tasks)} responses still unjudged after "
                      f"{REGRADE_TRIES} tries (counted as failures): {next(iter(errored.values()))[:80]!r}", stacklevel=2)
    # greedy, one sample a task: each response judged now adds its pass to the first grading's count
    accuracy = result.accuracy + sum(per_task[i] - result.per_task.get(i, 0.0) for i in result.errored) / result.n_samples
    return AccuracyResult(accuracy, result.n_tasks, result.n_samples, len(errored), per_task, errored)


def part_kind(task: Any) -> str:
    """A CAD task's part kind for the band: its number of features (level 1: `1` a block, `2` a block with a hole)."""
    return str(len(task.meta["target_part"]["features"]))


def kind_rates(tasks: list, per_task: dict[str, float]) -> dict[str, float]:
    """Greedy pass rate per part kind over `tasks` (`per_task`: task id -> pass rate, as `evaluate_accuracy` gives)."""
    kinds: dict[str, list[float]] = {}
    for t in tasks:
        kinds.setdefault(part_kind(t), []).append(per_task.get(t.id, 0.0))
    return {k: sum(v) / len(v) for k, v in sorted(kinds.items())}


def band_ok(cfg: BaseModelConfig, accuracy: float, by_kind: dict[str, float] | None) -> bool:
    """In band: the overall held-out rate inside [target_low, target_high] and, with `kind_floor` set and rates per
    kind measured, every part kind present at or above the floor (a band met by blocks alone leaves RL nothing to
    reinforce on holed parts)."""
    if not cfg.target_low <= accuracy <= cfg.target_high:
        return False
    return not (cfg.kind_floor and by_kind) or all(r >= cfg.kind_floor for r in by_kind.values())


BASE_WARMUP = 50  # steps over which pre-training's lr ramps up linearly from 0 to `cfg.lr`


def _optimizer(model: CausalLM, cfg: BaseModelConfig) -> torch.optim.Optimizer:
    """Pre-training's optimizer (its lr is set at every step by `_sgd_step`, from `_lr_at`)."""
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)


def _lr_at(cfg: BaseModelConfig, step: int) -> float:
    """Pre-training's lr at `step` (1-based): a linear warmup over `BASE_WARMUP` steps, then constant."""
    return cfg.lr * min(1.0, step / BASE_WARMUP)


def _sgd_step(model: CausalLM, opt: torch.optim.Optimizer, ids: torch.Tensor, mask: torch.Tensor, lr: float,
              more: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()) -> None:
    """One next-token step on `ids` [B, T], the loss counted where `mask` [B, T-1] is 1; `more` batches of other
    widths (ids, mask) join the same step, the loss the mean over all their counted tokens."""
    model.train()
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    total = mask.sum() + sum(m.sum() for _, m in more)
    for rows, weight in ((ids, mask), *more):
        logits = model(rows)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1),
                                                 reduction="none")
        ((loss * weight.reshape(-1)).sum() / total).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def _well_formed_episodes(engine: Any, tasks: list) -> tuple[float, float]:
    """(share of greedy brief `cad_agent:parts` episodes without a format error, share that pass) on `tasks` (a
    format error need not end a form-4 episode: it ends at its step budget, graded on its model)."""
    from posttrain.eval.harness import EvalSpec
    from posttrain.eval.run import run_eval
    from posttrain.tasks.domains import load_domain
    from posttrain.tasks.suites import Suite

    spec = load_domain("cad_agent:parts", level=1, brief=True, turns=1).agent
    run = run_eval(engine, Suite("tail", list(tasks), None, agent=spec),
                   EvalSpec(model="in-process", suite="tail", max_tokens=spec.max_tokens))
    recs = run.records
    return (sum(r.info.get("format_errors", 0) == 0 for r in recs) / len(recs),
            sum(r.ok and r.passed for r in recs) / len(recs))


def correction_tail(model: CausalLM, cfg: BaseModelConfig, held_out: list, report: dict[str, Any],
                    on_eval: Callable[[int, float], None] | None = None) -> int:
    """A `cad_agent:parts` base's second phase, after its band: `CAD_TAIL_EPISODES` correction episodes and
    `CAD_TAIL_PROGRAMS` gold programs a step, with a fresh optimizer (warmed up again) and its own data order (seed
    + 1), for `CAD_TAIL_STEPS` steps; returns them. Every `CAD_TAIL_CHECK_EVERY` steps greedy episodes on the first
    `CAD_TAIL_CHECK_PARTS` parts of the stopping set (`held_out`) are run and `report["tail"]` gets the step, the
    share that ended without a format error and the share that passed (recorded, never a stopping rule). It starts
    from the first phase's weights alone, so it runs the same from a cached first phase's weights
    (`pretrain_base(first_phase=...)`) as after a first phase built now."""
    tokenizer = char_tokenizer()
    source = base_task_source(cfg)
    rng = random.Random(cfg.seed + 1)
    opt = _optimizer(model, cfg)
    engine = build_engine(None, model, tokenizer)
    parts = held_out[:CAD_TAIL_CHECK_PARTS]
    report["tail"] = []
    step = 0
    for step in range(1, CAD_TAIL_STEPS + 1):
        programs = _batch(tokenizer, [source.sample(rng) for _ in range(CAD_TAIL_PROGRAMS)])
        episodes = _correction_batch(tokenizer, [source.sample(rng) for _ in range(CAD_TAIL_EPISODES)], rng)
        _sgd_step(model, opt, *episodes, _lr_at(cfg, step), (programs,))
        if step % CAD_TAIL_CHECK_EVERY == 0:
            engine.set_version(step)
            formed, passed = _well_formed_episodes(engine, parts)
            report["tail"].append([step, formed, passed])
            if on_eval:
                on_eval(-step, passed)  # a negative step: the tail's check (its greedy episodes' pass rate)
    return step


def _build_fingerprint(cfg: BaseModelConfig) -> str:
    """What a stopped build must share with this one to be resumed: the base's key (its config and formats), the
    builder's own code and torch's version (either can change the weights a step gives)."""
    source = Path(__file__).read_bytes()
    return f"{base_key(cfg)}:{hashlib.sha256(source).hexdigest()[:16]}:torch {torch.__version__}"


def _save_partial(path: Path, state: dict[str, Any]) -> None:
    """`state` to `path` whole or not at all (written beside it, then renamed over it)."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _load_partial(path: Path, fingerprint: str) -> dict[str, Any] | None:
    """The stopped build in `path` when it is this build's; None when there is none. One that cannot be read, or was
    made by another config, code or torch, is set aside with a one-line warning and the build starts afresh."""
    import warnings

    if not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=False)
        why = None if state.get("fingerprint") == fingerprint else f"made by another build ({state.get('fingerprint')})"
    except Exception as e:  # noqa: BLE001 - a torn or foreign file: say so, never resume from it
        state, why = None, f"unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if why is None:
        return state
    warnings.warn(f"built-in base model: not resuming the stopped build in {path}: {why}; starting afresh", stacklevel=3)
    path.unlink(missing_ok=True)
    return None


def pretrain_base(
    cfg: BaseModelConfig, out_dir: Path, on_eval: Callable[[int, float], None] | None = None,
    report: dict[str, Any] | None = None, first_phase: Path | None = None, partial: Path | None = None,
) -> tuple[float, int]:
    """Train from scratch until held-out greedy accuracy reaches the band; returns (accuracy, steps). `report` (a
    dict) receives `by_kind`, the last check's pass rate per part kind (CAD bases; None otherwise), and `checks`.
    A `cad_agent:parts` base in band then runs `correction_tail` and is measured again; `first_phase` (such a base
    only): the first phase's weights, already built (a format-1 `cad_agent:parts` base of the same config), so only
    the tail runs. `partial`: a file the build's whole state is written to at every check it trains on from, and
    resumed from when it holds a stopped build of this config and code (`report["resumed_from"]`, its step, and
    `report["resumed_seconds"]`, the stopped build's time); a resumed build is the uninterrupted one, weight for
    weight. The caller removes it once the base is saved."""
    if first_phase is not None:
        if not is_cad_agent(cfg):
            raise ValueError("pretrain_base: first_phase is for cad_agent:parts bases")
        return _tail_from(cfg, out_dir, first_phase, on_eval, report if report is not None else {})
    torch.manual_seed(cfg.seed)
    tokenizer = char_tokenizer()
    source = base_task_source(cfg)
    agent, docs = is_episodic(cfg), is_docs(cfg)
    model = _fresh_model(cfg, tokenizer.vocab_size, agent)
    opt = _optimizer(model, cfg)
    rng = random.Random(cfg.seed)
    held_out = stopping_set(cfg, source)
    engine = build_engine(None, model, tokenizer)
    verifier, max_answer = _stopping_verifier(cfg, source, agent)

    report = report if report is not None else {}
    report.update(by_kind=None, checks=[])

    def measure() -> float:
        # the weights moved since the last check: the engine must forget KV it cached with the old ones (an agent's
        # long shared prefix would otherwise be read from the model of the first check, and every episode fail)
        engine.set_version(step)
        if agent:
            return _episode_success(engine, held_out, docs_domain(cfg).agent if docs else None)
        result = band_accuracy(engine, held_out, verifier, max_answer)
        if is_cad(cfg):
            report["by_kind"] = kind_rates(held_out, result.per_task)
        report["checks"].append([step, result.accuracy, report["by_kind"]])
        return result.accuracy

    def draw() -> Any:
        task = source.sample(rng)
        if is_cad(cfg) and part_kind(task) == "1" and rng.random() < CAD_BLOCK_REDRAW:
            task = source.sample(rng)  # half the bare blocks redrawn: holed parts are ~2/3 of a batch
        return task

    def batch(tasks) -> tuple[Any, ...]:  # (ids, weights) or, for docs steps, (ids, weights, more)
        if not agent:
            return _batch(tokenizer, tasks)
        if docs:
            return docs_batch(tokenizer, tasks, rng, step)
        return lookup_batch(tokenizer, tasks, rng, step)

    def episodes() -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        """A `cad_agent:parts` base's correction episodes for this step (none for other families)."""
        if not is_cad_agent(cfg):
            return ()
        return (_correction_batch(tokenizer, [draw() for _ in range(CAD_EPISODES)], rng),)

    accuracy, step = 0.0, 0
    check_every, below, refined = cfg.eval_every, None, False
    step, started = 1, time.perf_counter()
    fingerprint = _build_fingerprint(cfg)
    stopped = _load_partial(partial, fingerprint) if partial is not None else None
    if stopped is not None:  # the state at its last check is that check's replay point, `below`
        below = stopped["below"]
        model.load_state_dict(below[0])
        opt.load_state_dict(below[1])
        rng.setstate(below[2])
        torch.set_rng_state(stopped["torch_rng"])
        check_every, refined, accuracy = stopped["check_every"], stopped["refined"], stopped["accuracy"]
        report.update(stopped["report"], resumed_from=below[3], resumed_seconds=stopped["seconds"])
        step = below[3] + 1
    while step <= cfg.max_steps:
        ids, weight, *more = batch([draw() for _ in range(cfg.batch_size)])  # docs steps: other batches join
        _sgd_step(model, opt, ids, weight, _lr_at(cfg, step), (*(more[0] if more else ()), *episodes()))
        copying = agent and step <= COPY_PHASE_STEPS  # repeat drills alone: no episode can pass yet
        if (step % check_every == 0 and not copying) or step == cfg.max_steps:
            accuracy = measure()
            if on_eval:
                on_eval(step, accuracy)
            if band_ok(cfg, accuracy, report["by_kind"]):
                break
            if accuracy > cfg.target_high and below is not None and not refined:
                # stepped over the whole band between two checks: go back to the last check below it and
                # replay the same batches (model, optimizer and data order restored) checking every step
                model.load_state_dict(below[0])
                opt.load_state_dict(below[1])
                rng.setstate(below[2])
                step, check_every, refined = below[3], 1, True
                step += 1
                continue
            if accuracy > cfg.target_high:  # over the band (a second overshoot, or the first check): stop, out of band
                break
            # below the band, or inside it with a part kind under `kind_floor`: train on
            below = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()), rng.getstate(), step)
            if partial is not None:  # `below` is this step's weights, optimizer, data order and step
                _save_partial(partial, {
                    "fingerprint": fingerprint, "below": below, "torch_rng": torch.get_rng_state(),
                    "check_every": check_every, "refined": refined, "accuracy": accuracy,
                    "report": {k: v for k, v in report.items() if k not in ("resumed_from", "resumed_seconds")},
                    "seconds": report.get("resumed_seconds", 0.0) + time.perf_counter() - started,
                })
        step += 1
    tail = 0
    if is_cad_agent(cfg) and band_ok(cfg, accuracy, report["by_kind"]):
        accuracy, tail = _tail_then_measure(model, cfg, held_out, verifier, max_answer, report, on_eval, engine)
    save_model(model, tokenizer, out_dir)
    return accuracy, min(step, cfg.max_steps) + tail  # a correcting base's steps count its tail's


def _tail_from(cfg: BaseModelConfig, out_dir: Path, start: Path, on_eval: Callable[[int, float], None] | None,
               report: dict[str, Any]) -> tuple[float, int]:
    """`correction_tail` from a first phase's saved weights, then the single-shot band check (its steps: the first
    phase's, from its base.json, plus the tail's)."""
    from posttrain.models.io import load_model

    first = json.loads((start / "base.json").read_text())
    model, tokenizer = load_model(start)
    source = base_task_source(cfg)
    held_out = stopping_set(cfg, source)
    verifier, max_answer = _stopping_verifier(cfg, source, False)
    report.update(by_kind=first.get("by_kind"), checks=list(first.get("checks") or []), started_from=start.name)
    accuracy, tail = _tail_then_measure(model, cfg, held_out, verifier, max_answer, report, on_eval)
    save_model(model, tokenizer, out_dir)
    return accuracy, int(first["steps"]) + tail


def _tail_then_measure(model: CausalLM, cfg: BaseModelConfig, held_out: list, verifier: Any, max_answer: int,
                       report: dict[str, Any], on_eval: Callable[[int, float], None] | None,
                       engine: Any = None) -> tuple[float, int]:
    """`correction_tail`, then the single-shot band check on `held_out` (through `engine`, which serves `model`, told
    its weights moved; a new one when None), recorded in `report`; returns (accuracy, the tail's steps)."""
    tail = correction_tail(model, cfg, held_out, report, on_eval)
    if engine is None:
        engine = build_engine(None, model, char_tokenizer())
    else:
        engine.set_version(-tail)
    result = band_accuracy(engine, held_out, verifier, max_answer)
    report["by_kind"] = kind_rates(held_out, result.per_task)
    report["checks"].append([f"tail {tail}", result.accuracy, report["by_kind"]])
    return result.accuracy, tail


def base_band_message(run_cfg, build: BaseBuild) -> str:
    """The loud line for a base model that missed its band (RL starting outside it learns little or nothing)."""
    b = run_cfg.model.base
    return (f"the built-in base model ({b.family}, seed {b.seed}) stopped at held-out accuracy {build.accuracy:.3f} "
            f"after {build.steps} steps, outside its band {b.target_low:.2f}-{b.target_high:.2f}: RL from here may "
            "not improve it (raise model.base.max_steps, or change its size or lr)")


def ensure_base(cfg: BaseModelConfig, on_eval: Callable[[int, float], None] | None = None, rebuild: bool = False,
                first_phase: Path | None = None) -> BaseBuild:
    """The cached base model for `cfg`, building it first if this machine has none (`first_phase`: `pretrain_base`'s)."""
    root = cache_root(cfg)
    root.mkdir(parents=True, exist_ok=True)
    final = root / base_key(cfg)
    with open(root / f"{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits for the first build, then reuses it
        meta_path = final / "base.json"
        if meta_path.exists() and not rebuild:
            meta = json.loads(meta_path.read_text())
            return BaseBuild(final, meta["accuracy"], meta["steps"], meta["seconds"], True, meta["in_band"],
                             meta.get("by_kind"), meta.get("resumed_from"))
        tmp = root / f".{final.name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        start = time.perf_counter()
        report: dict[str, Any] = {}
        partial = root / f".{final.name}.partial.pt"  # a stopped build resumes from its last check
        accuracy, steps = pretrain_base(cfg, tmp, on_eval, report, first_phase, None if first_phase else partial)
        seconds = time.perf_counter() - start + report.get("resumed_seconds", 0.0)
        by_kind = report.get("by_kind")
        in_band = band_ok(cfg, accuracy, by_kind)
        meta = {"accuracy": accuracy, "steps": steps, "seconds": seconds, "in_band": in_band, "config": cfg.model_dump(),
                "by_kind": by_kind, "kind_floor": cfg.kind_floor, "checks": report.get("checks"),
                "tail": report.get("tail"), "started_from": report.get("started_from"),
                "resumed_from": report.get("resumed_from"),
                "band": [cfg.target_low, cfg.target_high], "stopping_set": f"held-out problems after the first {EVAL_RESERVE}"}
        if not in_band:
            import warnings

            kinds = "" if not by_kind else " (per part kind " + ", ".join(f"{k}: {v:.3f}" for k, v in by_kind.items()) \
                + f"; floor {cfg.kind_floor})"
            meta["warning"] = (f"stopped at held-out accuracy {accuracy:.3f}{kinds} after {steps} steps, outside the band "
                               f"{cfg.target_low:.2f}-{cfg.target_high:.2f}")
            warnings.warn(f"built-in base model: {meta['warning']}", stacklevel=2)
        (tmp / "base.json").write_text(json.dumps(meta, indent=2))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        partial.unlink(missing_ok=True)
        return BaseBuild(final, accuracy, steps, seconds, False, in_band, by_kind, report.get("resumed_from"))
