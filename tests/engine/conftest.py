"""Fixtures shared by the engine's tests."""

import pytest
import torch


@pytest.fixture
def one_thread():
    """One intra-op thread for the test. Batch-1 steps are bound by per-op overhead, and on an oversubscribed
    machine a second OpenMP thread only spins; the C cascade attention is taken at every width on one thread
    (kv.native_attention_pays)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
