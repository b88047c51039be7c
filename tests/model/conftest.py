"""Settings for the model tests only (the shared builders and fixtures are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread_fixed_seed() -> Iterator[None]:
    """The models here are tiny: intra-op threads only add overhead, the more so on a busy two-core machine.
    Restored afterwards, so that other tests (which may compare runs across processes) see the default."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)
