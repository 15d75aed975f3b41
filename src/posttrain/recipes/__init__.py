"""Recipes: end-to-end procedures that train a model, built from the packages below them.

Covers: `builtin` (pre-training the built-in tiny base model into its band, cached per machine; the resolver
builds it when a spec names `builtin`), `quickstart` (`posttrain quickstart`: base model, before/after figures,
GRPO in between) and `distill` (`posttrain draft`: a speculative-decoding draft distilled from its target).
Does not cover: the parts they drive (models, engine, rl, eval), or the command line (`cli/`).
The recipes sit on different layers, so this package imports none of them: `builtin` is below `rl` (a run on the
built-in base reaches it through `resolve.py`), `quickstart` above it, `distill` above the engine.
"""
