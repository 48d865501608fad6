"""The fixtures of the kinds tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.mapping import forget_runs


@pytest.fixture
def fresh_runs() -> Iterator[None]:
    """No mapentities run's checkpoints from another test (a flush leaves them)."""
    yield
    forget_runs()
