"""posttrain: post-training language models with reinforcement learning from verifiable rewards.

Importing the package hands the domain registry every built-in domain (`wiring.register_domains`; each domain's
module is imported only when that domain is first loaded), so any process that imports posttrain, a command,
a script, a spawned producer or a Ray actor, finds them all.
"""

from posttrain.version import __version__
from posttrain.wiring import register_domains as _register_domains

__all__ = ["__version__"]

_register_domains()
