"""Colocated rollout and training on one GPU: vLLM sleeps around every update and wakes with the new weights.

Covers: `Colocation`, which the trainer wraps around each learner update (`with colocation.updating(): ...`):
with `[engine] kind = "vllm"`, the learner on a GPU (`rl.device` cuda: the one vLLM shares) and
`engine.sleep_level` > 0, the engine sleeps before the update (level 1: weights offloaded to host memory and
the KV cache dropped; level 2: both dropped) so the learner has the GPU's memory, and the trainer's
`engine.load_weights` after it wakes the weights' memory, loads the new weights into it and then restores the
KV cache (engine/remote/vllm_engine.py), so the peak never holds the learner's update and vLLM's cache
together (the OOM of verl#632 and TRL#2688). `colocated(cfg)` is the rule; `sleeps` and `sleep_s` count.
Does not cover: several GPUs (vLLM on its own GPU has no reason to sleep: set `engine.sleep_level = 0`), the
local engine (it samples with the learner's own module: nothing to free).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from posttrain.config import RunConfig


def colocated(cfg: RunConfig) -> bool:
    """vLLM shares the learner's GPU and may sleep: the trainer puts it to sleep around each update."""
    return cfg.engine.kind == "vllm" and cfg.rl.device.startswith("cuda") and cfg.engine.sleep_level > 0


class Colocation:
    """Puts `engine` to sleep at `level` for the duration of an update (level 0: does nothing)."""

    def __init__(self, engine: Any, level: int) -> None:
        self.engine, self.level = engine, level
        self.sleeps = 0
        self.sleep_s = 0.0  # seconds spent putting vLLM to sleep (the wake is part of the weight sync)

    @classmethod
    def for_run(cls, cfg: RunConfig, engine: Any) -> Colocation:
        return cls(engine, cfg.engine.sleep_level if colocated(cfg) else 0)

    @property
    def active(self) -> bool:
        return self.level > 0

    @contextlib.contextmanager
    def updating(self) -> Iterator[None]:
        """Inside: the update runs with vLLM asleep; the next `engine.load_weights` wakes it with new weights."""
        if self.active:
            t0 = time.perf_counter()
            self.engine.sleep(self.level)
            self.sleeps += 1
            self.sleep_s += time.perf_counter() - t0
        yield
