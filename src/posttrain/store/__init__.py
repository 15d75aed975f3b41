"""The embedded SQLite store of runs, steps, groups, samples, evals and checkpoints."""

from posttrain.store.run_store import EvalSampleRow, RunStore, SampleRow

__all__ = ["EvalSampleRow", "RunStore", "SampleRow"]
