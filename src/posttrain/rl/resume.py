"""Checkpoints of a run and the exact resume from the newest one.

Covers: `state_of` (the `TrainerState` of a step), `save` (the step's weights and `TrainerState`; under torchrun
rank 0 saves, with every rank's sampler state, and checkpoints beyond `train.keep_checkpoints` are pruned) and
`restore` (weights, learner and curriculum state, every rank's sampler state where the checkpoint has it, and
what `Restored` gives back to the trainer; the run store cut back to the checkpoint's step).
Does not cover: the checkpoint format (`store/checkpoints.py`), when to checkpoint (the trainer).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from posttrain.config import RunConfig
from posttrain.rl.backends import DataParallel
from posttrain.rl.build import Components
from posttrain.rl.selection import Best
from posttrain.store.checkpoints import (
    TrainerState,
    checkpoint_dir,
    latest_checkpoint,
    load_trainer_state,
    prune_checkpoints,
    save_checkpoint,
)
from posttrain.store.run_store import RunStore


@dataclass
class Restored:
    """What a checkpoint gives back to the trainer besides the components' own state."""

    step: int
    informative_rate: float
    best: Best | None
    async_state: dict[str, Any] = field(default_factory=dict)


def restore(run_dir: Path, cfg: RunConfig, parts: Components, dp: DataParallel, store: RunStore) -> Restored:
    from posttrain.models.io import load_model

    found = latest_checkpoint(run_dir)
    assert found is not None  # checked by the trainer
    step, path = found
    model, _ = load_model(path)
    if cfg.rl.lora is not None:  # checkpoints hold merged weights: they become the base, adapters restart at 0
        from posttrain.models.lora import load_merged

        load_merged(parts.model, model.state_dict())
    else:
        parts.model.load_state_dict(model.state_dict())
    state = load_trainer_state(path)
    parts.learner.load_state_dict(state.learner)
    parts.curriculum.load_state_dict(state.curriculum)
    engine_rng, torch_rng = state.engine_rng, state.torch_rng
    ranks = state.extra.get("ranks")  # a torchrun run: every rank's own sampler state
    if dp.world > 1 and ranks and len(ranks) == dp.world:
        engine_rng, torch_rng = ranks[dp.rank]["engine_rng"], ranks[dp.rank]["torch_rng"]
    elif dp.world > 1 and not dp.lead:
        engine_rng = None  # another world size, or a one-process checkpoint: this rank samples afresh
    if dp.world > 1 and dp.lead and not (ranks and len(ranks) == dp.world):
        warnings.warn(f"resuming step {step} on {dp.world} ranks from a checkpoint of "
                      f"{len(ranks) if ranks else 1}: the other ranks' sampling starts from fresh states", stacklevel=3)
    if engine_rng is not None:
        parts.engine.load_sampler_state(engine_rng)
    torch.set_rng_state(torch_rng)
    parts.engine.load_weights(parts.learner.policy_state(), version=step)
    store.truncate_after(step)
    store.set_info(resumed_from=step, alerts=[a for a in store.alerts() if a["step"] <= step])
    return Restored(step, state.informative_rate, Best(**state.best) if state.best else None,
                    state.extra.get("async", {}))


def state_of(step: int, parts: Components, informative_rate: float, best: Best | None, async_loop: Any = None
             ) -> TrainerState:
    """Everything besides the weights that an exact resume needs at `step`."""
    return TrainerState(
        step=step,
        learner=parts.learner.state_dict(),
        curriculum=parts.curriculum.state_dict(),
        engine_rng=parts.engine.sampler_state(),
        torch_rng=torch.get_rng_state(),
        informative_rate=informative_rate,
        best=asdict(best) if best else None,
        extra={"async": async_loop.state_dict()} if async_loop is not None else {},
    )


def save(run_dir: Path, cfg: RunConfig, parts: Components, dp: DataParallel, store: RunStore,
         state: TrainerState) -> Path:
    """The step's checkpoint (under torchrun: rank 0 saves, with every rank's sampler state)."""
    if dp.world > 1:
        ranks = dp.gather_to_lead({"engine_rng": state.engine_rng, "torch_rng": state.torch_rng})
        if not dp.lead:
            return checkpoint_dir(run_dir, state.step)
        state.extra["ranks"] = ranks
    path = save_checkpoint(run_dir, state.step, parts.model, parts.tokenizer, state)
    store.log_checkpoint(state.step, str(path))
    for removed in prune_checkpoints(run_dir, cfg.train.keep_checkpoints):
        store.forget_checkpoint(removed)
    return path
