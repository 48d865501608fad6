"""Whether a shard is a Galera node is read once per process (``topology.servers``), and what
runs only on Galera (a move's kept tables: docs/replicas.md#move-tables-stay-on-galera) relies
on it: only "unknown system variable" is taken for "no Galera build"; any other error of that
first look is raised, never kept as "not Galera"."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import OperationalError

from schemaless_store.topology import servers


@pytest.fixture
def looks(monkeypatch):
    """``servers``' first look at ``@@wsrep_on`` answers what the test sets."""
    answers: list[object] = []
    monkeypatch.setattr(servers, "_galera", {})
    monkeypatch.setattr(servers.dialects, "of", lambda conn: SimpleNamespace(may_be_galera=True))

    def settings(cursor):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(servers.sessions, "galera_settings", settings)
    return answers


@pytest.mark.django_db(databases="__all__")
def test_only_an_unknown_variable_says_no_galera(looks):
    looks.append(OperationalError(1193, "Unknown system variable 'wsrep_on'"))
    assert servers.is_galera("shard_0") is False
    assert servers.is_galera("shard_0") is False  # kept: asked once


@pytest.mark.django_db(databases="__all__")
def test_another_error_is_raised_and_the_next_look_asks_again(looks):
    looks.append(OperationalError(1205, "Lock wait timeout exceeded"))
    looks.append(("ON", 0))
    with pytest.raises(OperationalError):
        servers.is_galera("shard_0")
    assert servers.is_galera("shard_0") is True
