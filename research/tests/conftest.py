"""What the studies' tests share: a seeded generator (as tests/conftest.py gives the main suite)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
