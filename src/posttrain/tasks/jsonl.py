"""Users' own tasks from JSONL files.

Schema, one JSON object per line (blank lines and lines starting with `//`
are ignored):

    {"id": "q1", "prompt": "2+2=", "answer": "4", "meta": {"tolerance": 0.01}}

`prompt` (string) is required, or a conversation instead: `messages`, a list of
`{"role": "system" | "user" | "assistant", "content": "..."}` (a system message
only first, a user message last), as TRL's conversational datasets and verl's
prompts hold them; HF's `{"prompt": [{"role": ..., "content": ...}]}` is read
the same way. A conversation goes to a chat model through its template
(`models/prompting.py`); the task's `prompt` is its plain rendering (the
contents joined by newlines), what a raw-format model is prompted with.
`id` (string or int) defaults to
`<file stem>:<line number>` and must be unique. `answer` (string or number)
is the gold answer; `meta` (object) is passed through to verifiers and the
curriculum. Any other top-level key is kept in `meta` too.

Error policy: by default (`on_error="fail"`) a file with any malformed line
fails to load, and the error lists every bad line as `file:line: reason`, so
nothing is trained on a silently shortened task set. With `on_error="skip"`
the good lines load and each bad one is reported as a warning.

Test-based code tasks (see docs/code_verifiers.md) carry their tests in `meta.tests`, or
in a file named by `meta.tests_file`, a path relative to the JSONL file, read at load time:

    {"id": "sq", "prompt": "Write sq(x).", "meta": {"verifier": "python_tests",
     "entry_point": "sq", "tests_file": "tests/test_sq.py"}}

Covers: loading, validation, test files, and the hash split of loaded tasks.
"""

from __future__ import annotations

import json
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from posttrain.errors import UserError
from posttrain.tasks.base import Split, split_of
from posttrain.types import MESSAGES_KEY, Task


class TaskFileError(UserError, ValueError):
    """A task file could not be loaded; the message lists every problem with file and line."""


def load_jsonl(path: str | Path, on_error: Literal["fail", "skip"] = "fail") -> list[Task]:
    path = Path(path)
    if not path.exists():
        raise TaskFileError(f"{path}: file not found")
    tasks: list[Task] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.strip()
            if not text or text.startswith("//"):
                continue
            try:
                task = _with_test_file(_parse_line(text, default_id=f"{path.stem}:{lineno}"), path.parent)
            except ValueError as exc:
                errors.append(f"{path}:{lineno}: {exc}")
                continue
            if task.id in seen:
                errors.append(f"{path}:{lineno}: duplicate id {task.id!r} (first on line {seen[task.id]})")
                continue
            seen[task.id] = lineno
            tasks.append(task)
    if errors and on_error == "fail":  # one bad line is one line: `file:line: reason`
        raise TaskFileError(errors[0] if len(errors) == 1 else f"{len(errors)} malformed lines:\n" + "\n".join(errors))
    for err in errors:
        warnings.warn(f"skipped {err}", stacklevel=2)
    if not tasks:
        raise TaskFileError(f"{path}: no tasks (the file is empty or every line is malformed)")
    return tasks


def _parse_line(text: str, default_id: str) -> Task:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    prompt = obj.pop("prompt", None)
    messages = obj.pop(MESSAGES_KEY, None)
    if isinstance(prompt, list):  # HF's conversational prompt
        if messages is not None:
            raise ValueError("give the conversation once: 'messages', or 'prompt' as a list of messages, not both")
        prompt, messages = None, prompt
    if messages is not None:
        if prompt is not None:
            raise ValueError("give either 'prompt' (a string) or 'messages' (a conversation), not both")
        obj[MESSAGES_KEY] = conversation = _conversation(messages)
        prompt = "\n".join(m["content"] for m in conversation)  # the plain rendering (models/prompting.py)
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("'prompt' is required and must be a non-empty string (or give 'messages', a conversation)")
    task_id = obj.pop("id", default_id)
    if not isinstance(task_id, (str, int)) or isinstance(task_id, bool):
        raise ValueError(f"'id' must be a string or integer, got {task_id!r}")
    answer = obj.pop("answer", None)
    if answer is not None and (not isinstance(answer, (str, int, float)) or isinstance(answer, bool)):
        raise ValueError(f"'answer' must be a string or number, got {type(answer).__name__}")
    meta = obj.pop("meta", {})
    if not isinstance(meta, dict):
        raise ValueError(f"'meta' must be an object, got {type(meta).__name__}")
    meta = {**obj, **meta}
    return Task(id=str(task_id), prompt=prompt, answer=None if answer is None else str(answer), meta=meta)


_ROLES = ("system", "user", "assistant")


def _conversation(messages: object) -> list[dict[str, str]]:
    """A task's conversation, checked: roles system/user/assistant, string contents, a system message only first,
    a user message last (the model answers it). Raises ValueError naming the message at fault."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list of {\"role\", \"content\"} objects")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] must be an object with 'role' and 'content', got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if role not in _ROLES:
            raise ValueError(f"messages[{i}].role = {role!r}: expected one of {', '.join(_ROLES)}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}].content must be a string, got {type(content).__name__}")
        if role == "system" and i > 0:
            raise ValueError(f"messages[{i}]: a system message may only come first")
        extra = sorted(set(m) - {"role", "content"})
        if extra:
            raise ValueError(f"messages[{i}]: unknown key(s) {', '.join(extra)} (a task message has role and content)")
        out.append({"role": role, "content": content})
    if out[-1]["role"] != "user":
        raise ValueError(f"messages[{len(out) - 1}].role = {out[-1]['role']!r}: a task's conversation ends with the "
                         "user message the model answers")
    if not any(m["content"] for m in out if m["role"] == "user"):
        raise ValueError("'messages' holds no user text")
    return out


def _with_test_file(task: Task, base: Path) -> Task:
    """`meta.tests_file` (relative to the JSONL file) read into `meta.tests`."""
    rel = task.meta.get("tests_file")
    if rel is None:
        return task
    if not isinstance(rel, str) or not rel:
        raise ValueError("'tests_file' must be a path relative to the JSONL file")
    try:
        tests = (base / rel).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"tests_file {rel!r}: {exc.strerror or exc}") from None
    return Task(task.id, task.prompt, task.answer, {**task.meta, "tests": tests})


@dataclass
class ListSource:
    """A finite set of tasks (from a file or built in code), split by a hash of each id.

    With `held_out_fraction == 0` every task is in both roles' reach: train
    draws from all of them and `take(..., "held_out")` returns nothing.
    """

    tasks: list[Task]
    name: str = "list"
    held_out_fraction: float = 0.0
    _by_split: dict[str, list[Task]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_split = {"train": [], "held_out": []}
        for t in self.tasks:
            s = split_of(t.id, self.held_out_fraction) if self.held_out_fraction > 0 else "train"
            self._by_split[s].append(t)
        if not self._by_split["train"]:
            raise TaskFileError(f"{self.name}: no training tasks after the held-out split")

    def split(self, split: Split) -> list[Task]:
        return self._by_split[split]

    def sample(self, rng: random.Random, split: Split = "train") -> Task:
        pool = self._by_split[split]
        if not pool:
            raise TaskFileError(f"{self.name}: the {split} split is empty")
        return pool[rng.randrange(len(pool))]

    def take(self, n: int, split: Split = "held_out", seed: int = 0) -> list[Task]:
        pool = list(self._by_split[split])
        random.Random(f"{self.name}:{split}:{seed}").shuffle(pool)
        return pool[:n]
