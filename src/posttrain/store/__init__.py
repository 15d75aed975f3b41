"""The embedded SQLite store of runs, steps, groups, samples, evals and checkpoints."""

from posttrain.store.run_store import RunStore

__all__ = ["RunStore"]
