"""posttrain: post-training language models with reinforcement learning from verifiable rewards.

Importing the package wires the domain registry (`hooks.domains`: the registry runs `wiring.register_domains`
before it is first read, and each domain's module is imported only when that domain is first loaded), so any
process that imports posttrain, a command, a script, a spawned producer or a Ray actor, finds every domain. It
imports nothing else: the sandbox's fork-server imports this package and must stay lean.
"""

from posttrain import hooks as _hooks
from posttrain.version import __version__

__all__ = ["__version__"]


def _register_domains() -> None:
    from posttrain.wiring import register_domains

    register_domains()


_hooks.domains.append(_register_domains)
