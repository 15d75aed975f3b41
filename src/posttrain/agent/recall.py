"""`Memory`: full-text search over an episode's whole history and its task documents (SQLite FTS5).

Covers: indexing every call and its untruncated output as the runtime sees them, plus the task's
documents, in an in-memory FTS5 table (Python's sqlite3 ships it); `search(query, k)` ranks by
BM25 and returns snippets. The `recall` tool (`tools.py`) asks it, so what the context policy
truncated, masked or compacted away stays reachable on demand.
Does not cover: anything across episodes (one memory per episode), embeddings.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Hit:
    source: str  # "step 3: bash", "doc: README.md"
    snippet: str


class Memory:
    """>>> m = Memory(); m.add("doc: notes", "the port is 8231"); m.search("which port")[0].snippet
    'the [port] is 8231'
    """

    def __init__(self) -> None:
        # check_same_thread=False: tools run on the event loop, the runtime may index from a worker thread
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.execute("CREATE VIRTUAL TABLE memory USING fts5(source, body, tokenize='unicode61')")
        self.count = 0

    def add(self, source: str, body: str) -> None:
        if body:
            self.db.execute("INSERT INTO memory(source, body) VALUES (?, ?)", (source, body))
            self.count += 1

    def search(self, query: str, k: int = 5, width: int = 24, whole: bool = False, every: bool = False) -> list[Hit]:
        """The `k` best matches of any of the query's words (`every`: of all of them) by BM25, as snippets of about
        `width` words (`whole`: each match's whole text, unmarked)."""
        words = _WORD.findall(query)
        if not words:
            return []
        # quoted: no FTS5 syntax from the model
        match = (" AND " if every else " OR ").join('"' + w.replace('"', "") + '"' for w in words)
        if whole:
            rows = self.db.execute("SELECT source, body FROM memory WHERE memory MATCH ? ORDER BY bm25(memory) LIMIT ?",
                                   (match, k)).fetchall()
        else:
            rows = self.db.execute(
                "SELECT source, snippet(memory, 1, '[', ']', ' ... ', ?) FROM memory WHERE memory MATCH ? "
                "ORDER BY bm25(memory) LIMIT ?", (width, match, k)).fetchall()
        return [Hit(s, snip) for s, snip in rows]

    def close(self) -> None:
        self.db.close()
