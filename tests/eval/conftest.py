"""Fakes for evaluation tests: an engine that answers from a table, counts its calls and can fail on demand."""

from __future__ import annotations

import json
import random

import pytest

from posttrain.types import Completion, FinishReason


class FakeEngine:
    """Answers `prompt` with `answers[prompt]` (or a seeded random digit), counting calls and prompts.

    `fail_after`: raise on the call after that many successful ones (an interrupted eval).
    `noise`: with this probability (drawn from an unseeded RNG) answer wrongly: a nondeterministic server.
    """

    def __init__(self, answers: dict[str, str] | None = None, fail_after: int | None = None, noise: float = 0.0) -> None:
        self.answers = answers or {}
        self.fail_after = fail_after
        self.noise = noise
        self.calls = 0
        self.prompts_seen: list[str] = []
        self._rng = random.Random()

    # the rest of the Engine protocol: a text-only engine without usage accounting
    policy_version = 0
    tokenizer = None
    usage = None
    max_context = None
    max_concurrency = 1

    def encode(self, prompts):
        return None

    async def agenerate(self, prompts, params):
        return self.generate(prompts, params)

    def stream(self, prompts, params):
        """The same completions as `generate`, each as one final delta."""
        from posttrain.engine.base import CompletionDelta

        for i, group in enumerate(self.generate(prompts, params)):
            for j, c in enumerate(group):
                yield CompletionDelta(i, j, i, c.token_ids, c.logprobs, c.text, c.finish_reason, c)

    def load_weights(self, state, version):
        self.policy_version = version

    def sampler_state(self):
        return None

    def load_sampler_state(self, state):
        pass

    def generate(self, prompts, params):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("injected failure")
        self.calls += 1
        self.prompts_seen += list(prompts)
        rng = random.Random(params.seed)
        out = []
        for p in prompts:
            group = []
            for _ in range(params.n):
                text = self.answers.get(p, str(rng.randint(0, 9)))
                if params.temperature > 0 and rng.random() < 0.3:
                    text = str(rng.randint(0, 9))
                if self.noise and self._rng.random() < self.noise:
                    text = "wrong"
                group.append(Completion(token_ids=list(range(len(text))), text=text, logprobs=[0.0] * len(text),
                                        finish_reason=FinishReason.STOP))
            out.append(group)
        return out


@pytest.fixture
def fake_engine_cls():
    return FakeEngine


@pytest.fixture
def jsonl_suite(tmp_path):
    """A 20-task JSONL suite (exact match): task i asks for str(i)."""
    path = tmp_path / "suite.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i:02d}", "prompt": f"say {i}", "answer": str(i)}) + "\n" for i in range(20)))
    return path
