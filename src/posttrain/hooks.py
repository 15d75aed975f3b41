"""What the package's root leaves for lower packages to run on first use, so that they need not import upward.

Covers: `domains`, the functions the domain registry (`tasks/domains.py`) runs, once each, before it is first
read: the package's `__init__` appends one that imports `posttrain/wiring.py` and hands the registry every
built-in domain (`wiring.register_domains`).
Does not cover: the plugins themselves (`wiring.py`). This module imports nothing: the package's `__init__`
imports it, and the sandbox's fork-server, which imports the package, must stay lean.
"""

domains: list = []  # zero-argument callables, each run once by the registry (and removed)
