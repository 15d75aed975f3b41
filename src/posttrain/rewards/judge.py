"""A reviewer model as a verifier: `LLMJudge` over any OpenAI-compatible chat endpoint.

Covers: a rubric prompt template filled from the task and the response; one
`POST {base_url}/chat/completions` per item via `httpx.AsyncClient`, all
items of a batch concurrently under a concurrency limit; a per-request
timeout (an item whose requests all time out is a TIMEOUT verdict); retries
with exponential backoff on 429, 5xx and connection errors; robust score
parsing ("Score: 7/10", `{"score": 0.7}`, "8 out of 10", a bare number),
normalised to [0, 1] by `scale`; an unparseable reply is an ERROR verdict
with the raw text in its details (never a silent 0); a response cache keyed
by (model, prompt) -- the prompt holds the response -- in memory and
optionally in an SQLite file, so re-judging the same response is free.
Does not cover: serving the judge model (any OpenAI-compatible server:
vLLM, `posttrain serve`, a hosted API) or pairwise comparison.

The judge's prompt template, model, scale and threshold are part of its
version hash: changing the rubric text changes the id on every verdict.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import re
import sqlite3
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.rewards.registry import register_verifier
from posttrain.types import Task, Verdict, VerdictStatus

DEFAULT_TEMPLATE = """You are grading a response to a task.

Task:
{prompt}

Reference answer (may be empty):
{answer}

Rubric:
{rubric}

Response to grade:
{response}

Judge the response against the rubric. End your reply with one line of the form
Score: N/{scale}
where N is a number from 0 to {scale}."""

DEFAULT_RUBRIC = "Correct, complete, and clearly reasoned responses score high; wrong or evasive ones score low."

_NUM = r"([-+]?\d+(?:\.\d+)?)"
_PATTERNS = [
    re.compile(rf"score\s*[:=]\s*\**\s*{_NUM}\s*(?:/|out\s+of)\s*{_NUM}", re.IGNORECASE),
    re.compile(rf"{_NUM}\s*(?:/|out\s+of)\s*{_NUM}", re.IGNORECASE),
    re.compile(rf"(?:score|rating|grade)\s*(?:is|:|=)?\s*\**\s*{_NUM}", re.IGNORECASE),
]


def parse_score(text: str, scale: float) -> float | None:
    """The judge's score normalised to [0, 1], or None when the reply holds no readable score.

    Reads, in order: a JSON object with a "score" key (anywhere in the
    reply), "Score: N/M" or "N out of M" (the last one wins; N/M is the
    fraction), "Score: N" (over `scale`), a reply that is a bare number.
    Out-of-range values are None, not clipped: a judge that says 12/10 is
    not following the rubric.
    """
    for blob in reversed(re.findall(r"\{[^{}]*\}", text)):
        try:
            obj = json.loads(blob)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("score"), (int, float)) and not isinstance(obj["score"], bool):
            return _in_range(float(obj["score"]) / scale)
    for pattern in _PATTERNS[:2]:
        found = pattern.findall(text)
        if found:
            num, den = (float(x) for x in found[-1])
            return _in_range(num / den) if den > 0 else None
    found = _PATTERNS[2].findall(text)
    if found:
        return _in_range(float(found[-1]) / scale)
    bare = text.strip().rstrip(".")
    if re.fullmatch(_NUM, bare):
        return _in_range(float(bare) / scale)
    return None


def _in_range(value: float) -> float | None:
    return value if 0.0 <= value <= 1.0 else None


class JudgeCache:
    """(model, prompt) -> reply text, in memory and optionally in an SQLite file shared across runs."""

    def __init__(self, path: str | None = None) -> None:
        self._memory: dict[str, str] = {}
        self._lock = threading.Lock()
        self._path = os.path.expanduser(path) if path else None
        self._conn: sqlite3.Connection | None = None

    @property
    def _db(self) -> sqlite3.Connection | None:
        """Opened on first use: building a judge (say, while a config is validated) touches no file."""
        if self._path and self._conn is None:
            os.makedirs(os.path.dirname(os.path.abspath(self._path)), exist_ok=True)
            self._conn = sqlite3.connect(self._path, timeout=30, check_same_thread=False)
            with self._conn:
                self._conn.execute("CREATE TABLE IF NOT EXISTS judge_cache (key TEXT PRIMARY KEY, reply TEXT NOT NULL)")
        return self._conn

    @staticmethod
    def key(model: str, prompt: str) -> str:
        return hashlib.sha256(json.dumps([model, prompt]).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
            db = self._db
            if db is not None:
                row = db.execute("SELECT reply FROM judge_cache WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    self._memory[key] = row[0]
                    return row[0]
        return None

    def put(self, key: str, reply: str) -> None:
        with self._lock:
            self._memory[key] = reply
            db = self._db
            if db is not None:
                with db:
                    db.execute("INSERT OR REPLACE INTO judge_cache(key, reply) VALUES (?, ?)", (key, reply))


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """Built once: httpx would load the CA bundle again for every batch's client (~0.1 s each)."""
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:
        return ssl.create_default_context()


@dataclass
class LLMJudge:
    """Scores responses by asking a reviewer model; see the module docstring.

    >>> judge = LLMJudge(base_url="http://localhost:8000/v1", model="qwen2.5-7b-instruct",
    ...                  rubric="Full marks only if the proof is complete.")
    """

    base_url: str
    model: str
    rubric: str = DEFAULT_RUBRIC
    template: str = DEFAULT_TEMPLATE
    scale: float = 10.0
    pass_threshold: float = 0.5
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 512
    request_timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 0.5
    concurrency: int = 8
    cache_path: str | None = None
    name: str = "judge"

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ValueError(f"judge: scale must be > 0, got {self.scale}")
        if self.concurrency < 1 or self.max_retries < 0 or self.request_timeout_s <= 0:
            raise ValueError("judge: concurrency >= 1, max_retries >= 0 and request_timeout_s > 0 are required")
        try:
            self.template.format(prompt="", answer="", rubric="", response="", scale="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"judge: bad template ({exc!r}); fields are prompt, answer, rubric, response, scale") from None
        self._cache = JudgeCache(self.cache_path)
        self.server_calls = 0  # requests actually sent (tests and cost accounting)

    def version_key(self) -> str:
        return json.dumps([self.model, self.template, self.rubric, self.scale, self.pass_threshold, self.temperature])

    def prompt_for(self, task: Task, response: str) -> str:
        rubric = task.meta.get("rubric", self.rubric)
        return self.template.format(
            prompt=task.prompt, answer=task.answer or "", rubric=rubric, response=response, scale=f"{self.scale:g}"
        )

    async def verify_batch(self, tasks: Sequence[Task], responses: Sequence[str]) -> list[Verdict]:
        import httpx

        headers = {"Content-Type": "application/json"}
        if self.api_key_env and os.environ.get(self.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        limit = asyncio.Semaphore(self.concurrency)
        async with httpx.AsyncClient(headers=headers, timeout=self.request_timeout_s, verify=_ssl_context()) as client:
            return list(await asyncio.gather(*(self._one(client, limit, t, r) for t, r in zip(tasks, responses))))

    async def _one(self, client: Any, limit: asyncio.Semaphore, task: Task, response: str) -> Verdict:
        start = time.perf_counter()
        prompt = self.prompt_for(task, response)
        key = JudgeCache.key(self.model, prompt)
        reply = self._cache.get(key)
        cached = reply is not None
        if reply is None:
            async with limit:
                reply_or_verdict = await self._ask(client, prompt)
            if isinstance(reply_or_verdict, Verdict):
                reply_or_verdict.latency_s = time.perf_counter() - start
                return reply_or_verdict
            reply = reply_or_verdict
        value = parse_score(reply, self.scale)
        if value is None:
            return Verdict(0.0, False, VerdictStatus.ERROR, details=f"unparseable judge reply: {reply[:500]!r}",
                           latency_s=time.perf_counter() - start)
        if not cached:
            self._cache.put(key, reply)  # only replies that parse: a garbled one is retried next time
        return Verdict(value, value >= self.pass_threshold, details=reply[-300:], latency_s=time.perf_counter() - start)

    async def _ask(self, client: Any, prompt: str) -> str | Verdict:
        import httpx

        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        url = self.base_url.rstrip("/") + "/chat/completions"
        last = ""
        timed_out = True
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            self.server_calls += 1
            try:
                resp = await client.post(url, json=body)
            except httpx.TimeoutException as exc:
                last = f"timed out after {self.request_timeout_s:g} s ({type(exc).__name__})"
                continue
            except httpx.TransportError as exc:
                timed_out, last = False, f"connection error: {type(exc).__name__}: {exc}"
                continue
            timed_out = False
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code != 200:
                return Verdict(0.0, False, VerdictStatus.ERROR, details=f"judge HTTP {resp.status_code}: {resp.text[:300]}")
            try:
                return str(resp.json()["choices"][0]["message"]["content"] or "")
            except (ValueError, KeyError, IndexError, TypeError):
                return Verdict(0.0, False, VerdictStatus.ERROR, details=f"malformed judge response: {resp.text[:300]!r}")
        status = VerdictStatus.TIMEOUT if timed_out else VerdictStatus.ERROR
        return Verdict(0.0, False, status, details=f"judge failed after {self.max_retries + 1} attempts: {last}")


@register_verifier("judge")
def _judge(**params: Any) -> LLMJudge:
    return LLMJudge(**params)
