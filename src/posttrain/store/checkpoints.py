"""Training checkpoints: HF-format weights plus everything needed to resume exactly.

Covers: `<run>/checkpoints/step_NNNNNN/` holding config.json,
model.safetensors and tokenizer.json (loadable by transformers and by
`posttrain.models.load_model`) and `trainer_state.pt` (a `TrainerState`:
optimizer, RNG streams, curriculum, loop counters, the best evaluation); atomic writes (a temp dir renamed into
place), so a crash mid-save leaves the previous checkpoint intact; pruning
to the newest K.
Does not cover: sharded or distributed checkpoints.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from posttrain.models.io import save_model
from posttrain.models.llama import CausalLM
from posttrain.models.tokenizer import Tokenizer

_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass
class TrainerState:
    """Everything beyond the weights that a resume needs to continue exactly where a run stopped."""

    step: int
    learner: dict[str, Any]  # optimizer state and update count
    curriculum: dict[str, Any]  # task statistics and RNG
    engine_rng: Any  # the sampling engine's RNG state
    torch_rng: Any  # torch's global RNG state
    informative_rate: float  # the running share of informative groups that sizes refills
    best: dict[str, Any] | None = None  # the best held-out evaluation so far: {"step", "metric", "value"}
    extra: dict[str, Any] = field(default_factory=dict)  # room for components added later

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainerState":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(
    run_dir: Path, step: int, model: CausalLM, tokenizer: Tokenizer, state: TrainerState
) -> Path:
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tokenizer, tmp)
    torch.save(state.to_dict(), tmp / "trainer_state.pt")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = run_dir / "checkpoints"
    if not root.exists():
        return []
    found = []
    for d in root.iterdir():
        m = _STEP_DIR.match(d.name)
        if m and (d / "trainer_state.pt").exists() and (d / "model.safetensors").exists():
            found.append((int(m.group(1)), d))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_trainer_state(path: Path) -> TrainerState:
    # Our own file, holding RNG states (tuples) and optimizer tensors: not weights-only loadable.
    return TrainerState.from_dict(torch.load(path / "trainer_state.pt", weights_only=False))


def prune_checkpoints(run_dir: Path, keep: int) -> list[int]:
    """Delete all but the newest `keep` checkpoints; returns the steps removed."""
    found = list_checkpoints(run_dir)
    removed = []
    for step, path in found[:-keep] if keep > 0 else []:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(step)
    return removed
