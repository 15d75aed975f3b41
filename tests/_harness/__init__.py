"""Test harnesses shared by the tests and the benchmarks: checks that exercise posttrain from outside, not part of it.

Covers: `equivalence` (2 ranks under torchrun against one process: the learner alone, `_equivalence.py`, and
`posttrain train`'s loop, `_train_equivalence.py`; both scripts run by path in the ranks) and `tito` (token in,
token out: an engine's own record of every call, and the episode check against it).
Does not cover: anything a run needs; nothing under `src/` imports this package. Tests import it as `_harness`
(`tests/` is on the path under pytest); a benchmark puts `tests/` on `sys.path` first.
"""
