"""posttrain: post-training language models with reinforcement learning from verifiable rewards."""

__version__ = "0.1.0"
