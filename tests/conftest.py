"""Fixtures shared by the pyg_edgedot tests; plain helpers live in ``_helpers.py``."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _helpers import make_gen, seed_for  # noqa: E402


@pytest.fixture
def gen(request) -> torch.Generator:
    """A CPU generator seeded from the test's node id: fresh, reproducible data per test."""
    return make_gen(seed_for(request.node.nodeid))


@pytest.fixture
def deterministic_algorithms():
    """Turns on torch.use_deterministic_algorithms(True) and restores the previous state."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@pytest.fixture
def fresh_dynamo():
    """Resets dynamo's caches before and after a compile test."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
