"""An engine wrapper that adopts newer policy weights before each call (`[rollout] on_new_weights = "update"`).

Covers: `FollowWeights`, which delegates the whole `Engine` protocol to the
engine it wraps and calls `refresh(engine)` before every generate, agenerate
and stream, so that a multi-turn episode samples each turn with the newest
published weights and every completion carries the version that produced it.
Does not cover: where the weights come from (the caller's `refresh`: the
async loop's board in this process, shared memory in a producer process).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from posttrain.engine.base import Engine


class FollowWeights:
    """An engine that adopts newer published weights before each call (`on_new_weights = "update"`).

    A multi-turn episode then samples each turn with the newest weights; every
    completion carries the version that produced it, so the correction and the
    group's staleness (its oldest token) see every turn's own policy.
    `refresh(engine)` loads newer weights into `engine` when there are any.
    """

    def __init__(self, engine: Engine, refresh: Callable[[Engine], None]) -> None:
        self.inner, self.refresh = engine, refresh
        self.tokenizer, self.usage = engine.tokenizer, engine.usage
        self.max_context, self.max_concurrency = engine.max_context, engine.max_concurrency

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        self.inner.policy_version = version

    def encode(self, prompts: list[str]) -> list[list[int]] | None:
        return self.inner.encode(prompts)

    def generate(self, prompts: list[Any], params: Any) -> list[list[Any]]:
        self.refresh(self.inner)
        return self.inner.generate(prompts, params)

    async def agenerate(self, prompts: list[Any], params: Any) -> list[list[Any]]:
        self.refresh(self.inner)
        return await self.inner.agenerate(prompts, params)

    def stream(self, prompts: list[Any], params: Any) -> Any:
        self.refresh(self.inner)
        return self.inner.stream(prompts, params)

    def load_weights(self, state: Mapping[str, Any], version: int) -> None:
        self.inner.load_weights(state, version)

    def sampler_state(self) -> Any:
        return self.inner.sampler_state()

    def load_sampler_state(self, state: Any) -> None:
        self.inner.load_sampler_state(state)
