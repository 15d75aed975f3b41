"""The package's version, in a module of its own so that `provenance.py` need not import the package root
(whose `__init__` wires the domain registry)."""

__version__ = "0.1.0"
