"""Fixtures of the reliability suite (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import child


@pytest.fixture(scope="module")
def writer(django_db_setup: Any) -> Iterator[child.CrashWriter]:
    """A writer process for the module, killed and started again by the tests (SIGKILL before
    a chosen statement). Made after the test databases exist: the child is handed their names."""
    process = child.CrashWriter()
    yield process
    process.close()
