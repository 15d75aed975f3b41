"""Context engineering: what the model sees of an episode, within a token budget, the same in training and use.

Covers: `Entry` (one piece of context with its exact token ids: the prefix, the task, each sampled
reply, each observation, a summary), `ContextWindow` (an episode's current view: entries and their
ids concatenated; appending never re-tokenises anything, so consecutive contexts extend each other
and the engine's prefix cache hits), and `ContextPolicy`, a frozen record of what to do with it:
- a stable prefix: the system text and the tool schemas are the first entry, byte-identical across
  turns and tasks, and every rewrite keeps it (and the task) in place;
- truncation of long observations (`max_observation_chars`: head and tail kept);
- masking of old observations (`mask_keep`: the last N stay verbatim, older ones become a one-line
  placeholder that points at `recall`; "The Complexity Trap", arXiv 2508.21433). Masking is done in
  batches of `mask_every` turns, so between rewrites the context is append-only;
- summarising compaction (`compact_at`: a fraction of `budget_tokens`): the model summarises its own
  history (a "summary" turn; or an extractive summary without a model call) and the view restarts as
  prefix + task + summary + the last `keep_turns` turns; `compact_jitter` randomises the trigger per
  group (`for_group(seed)`) so the skill does not hinge on one length;
- the hard budget: a context plus the completion's room never exceeds `budget_tokens`; when nothing
  can make it fit, the episode ends as context_exhausted.
A rewrite makes the next turn's context not an extension of the last: `Episode.to_trajectory` then
starts a new training segment (`types.Trajectory.segments`), as the learner expects.
Does not cover: the encoding of entries (the model adapter's `Codec`, `models.py`), retrieval
itself (`recall.py`).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Literal, Protocol

from posttrain.agent.tools import cap_output

EntryKind = Literal["prefix", "task", "assistant", "observation", "error", "summary", "note", "listing"]
# "listing": the system text and tool listing when it comes after an opening answer (`spec.Opening`), not first

SUMMARY_REQUEST = ("The context is nearly full. Summarise the work so far for yourself: the goal, what you "
                   "tried, what you learned (file names, errors, results) and what remains. No tool call.")


@dataclass(slots=True)
class Entry:
    """One piece of context. `ids` are exact (sampled ids for replies, encoded once for the rest); remote chat
    entries have none and count `n_tokens` by estimate."""

    kind: EntryKind
    content: str  # the raw text (a tool's output, the reply's text), for chat messages and summaries
    ids: list[int]
    n_tokens: int
    turn: int = 0
    name: str = ""  # the tool of an observation
    call_id: str = ""  # the native tool_call id an observation answers
    calls: list = field(default_factory=list)  # the ToolCalls of an assistant entry (native chat)
    masked: bool = False
    images: list[bytes] = field(default_factory=list)  # PNGs of an observation (`render`); only chat endpoints see them


class Codec(Protocol):
    """Turns context pieces into entries in a model's own format and vocabulary."""

    def entry(self, kind: EntryKind, content: str, turn: int = 0, name: str = "", call_id: str = "") -> Entry: ...

    def summary(self, text: str, sampled_ids: list[int], turn: int) -> Entry:
        """A summary the model wrote, its sampled ids reused as they are (never re-encoded)."""
        ...


class ContextWindow:
    """An episode's current view of its history. `ids` is the context the model is given next."""

    def __init__(self, codec: Codec, prefix: Entry, task: Entry) -> None:
        self.codec = codec
        self.entries: list[Entry] = []
        self.ids: list[int] = []
        self.tokens = 0
        self.rewrites = 0
        self.dirty = False  # rewritten since the last model call
        for e in (prefix, task):
            self.append(e)

    def append(self, e: Entry) -> None:
        self.entries.append(e)
        self.ids.extend(e.ids)
        self.tokens += e.n_tokens

    def replace(self, entries: list[Entry]) -> None:
        """Rewrite history: the next context does not extend the last one (a new training segment)."""
        self.entries, self.ids, self.tokens = [], [], 0
        for e in entries:
            self.append(e)
        self.rewrites += 1
        self.dirty = True


@dataclass(frozen=True)
class ContextPolicy:
    """How an episode's history is shown to the model. The default is the linear history of mini-swe-agent
    (no budget, no masking, no compaction), with long observations truncated."""

    budget_tokens: int | None = None  # context + completion room never above this; None: the model's own limit
    max_observation_chars: int = 8000  # truncation of one observation (head + tail kept)
    mask_keep: int | None = None  # keep the last N observations verbatim, mask older ones; None: never mask
    mask_every: int = 8  # re-mask once this many new observations have come (append-only in between)
    compact_at: float | None = None  # compaction when the context passes this fraction of the budget
    compact_jitter: float = 0.0  # the trigger is drawn per group from [compact_at - jitter, compact_at]
    keep_turns: int = 2  # turns kept verbatim after a compaction
    summarizer: Literal["model", "extractive"] = "model"
    summary_max_tokens: int = 256
    summary_max_chars: int = 1500  # the extractive summary's size

    def __post_init__(self) -> None:
        if self.compact_at is not None:
            if self.budget_tokens is None:
                raise ValueError("ContextPolicy.compact_at needs budget_tokens")
            if not 0.1 <= self.compact_at - self.compact_jitter and self.compact_at <= 1.0:
                raise ValueError("ContextPolicy: need 0.1 <= compact_at - compact_jitter and compact_at <= 1")
        if self.mask_keep is not None and (self.mask_keep < 0 or self.mask_every < 1):
            raise ValueError("ContextPolicy: need mask_keep >= 0 and mask_every >= 1")

    @property
    def rewrites_history(self) -> bool:
        """Whether an episode under this policy can ever leave the append-only chain (masking, compaction)."""
        return self.compact_at is not None or self.mask_keep is not None

    @classmethod
    def preset(cls, name: str, budget_tokens: int | None = None) -> "ContextPolicy":
        """`linear`, `mask` (keep the last 4 observations) or `compact` (summarise at 75% of the budget)."""
        if name == "linear":
            return cls(budget_tokens=budget_tokens)
        if name == "mask":
            return cls(budget_tokens=budget_tokens, mask_keep=4)
        if name == "compact":
            return cls(budget_tokens=budget_tokens or 8192, compact_at=0.75, compact_jitter=0.1)
        raise ValueError(f"unknown context policy {name!r}: linear, mask or compact")

    def for_group(self, seed: int) -> "ContextPolicy":
        """This policy with its compaction trigger drawn for one group (every episode of a group shares it)."""
        if self.compact_at is None or self.compact_jitter == 0:
            return self
        at = random.Random(seed).uniform(self.compact_at - self.compact_jitter, self.compact_at)
        return dataclasses.replace(self, compact_at=at, compact_jitter=0.0)

    # ---- per turn

    def observation(self, text: str) -> tuple[str, int]:
        """An observation cut to `max_observation_chars`: (text, elided characters)."""
        return cap_output(text, self.max_observation_chars)

    def mask(self, w: ContextWindow) -> bool:
        """Mask old observations when `mask_every` have piled up past `mask_keep`; True if history was rewritten."""
        if self.mask_keep is None:
            return False
        live = [i for i, e in enumerate(w.entries) if e.kind == "observation" and not e.masked]
        if len(live) < self.mask_keep + self.mask_every:
            return False
        old = set(live[: len(live) - self.mask_keep])
        out = []
        for i, e in enumerate(w.entries):
            if i in old:
                note = f"[output of step {e.turn} ({len(e.content)} chars) elided; recall can search it]"
                m = w.codec.entry("observation", note, e.turn, e.name, e.call_id)
                m.masked = True
                out.append(m)
            else:
                out.append(e)
        w.replace(out)
        return True

    def trigger(self) -> int | None:
        """The context size at which compaction starts, in tokens (None: no compaction)."""
        if self.compact_at is None or self.budget_tokens is None:
            return None
        return int(self.compact_at * self.budget_tokens)

    def fits(self, w: ContextWindow, max_tokens: int) -> bool:
        return self.budget_tokens is None or w.tokens + max_tokens <= self.budget_tokens

    def wants_compaction(self, w: ContextWindow, max_tokens: int) -> bool:
        trigger = self.trigger()
        if trigger is None:
            return False
        return w.tokens > trigger or not self.fits(w, max_tokens)

    def compacted(self, w: ContextWindow, summary: Entry, max_tokens: int) -> list[Entry] | None:
        """The view after a compaction: prefix, task, summary and as many of the last `keep_turns` turns as fit
        under the trigger; None when even prefix + task + summary + the completion's room do not fit."""
        head = [e for e in w.entries[:2]]
        turns = sorted({e.turn for e in w.entries[2:] if e.kind in ("assistant", "observation", "error")})
        limit = min(self.trigger() or w.tokens, (self.budget_tokens or w.tokens) - max_tokens)
        for keep in range(min(self.keep_turns, len(turns)), -1, -1):
            kept_turns = set(turns[len(turns) - keep:]) if keep else set()
            tail = [e for e in w.entries[2:] if e.turn in kept_turns and e.kind in ("assistant", "observation", "error")]
            view = head + [summary] + tail
            if sum(e.n_tokens for e in view) <= limit:
                return view
        return None

    def extractive_summary(self, w: ContextWindow) -> str:
        """A summary without a model call: the previous summary, then one line per step (call -> first output line)."""
        lines: list[str] = []
        for e in w.entries[2:]:
            if e.kind == "summary":
                lines.append(e.content)
            elif e.kind == "assistant":
                calls = ", ".join(f"{c.name}({_short(str(c.arguments))})" for c in e.calls) or _short(e.content)
                lines.append(f"step {e.turn}: {calls}")
            elif e.kind in ("observation", "error"):
                first = next((ln for ln in e.content.splitlines() if ln.strip()), "")
                lines.append(f"  -> {_short(first)}")
        text = "\n".join(lines)
        return text if len(text) <= self.summary_max_chars else "...\n" + text[-self.summary_max_chars:]


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."
