"""Receipts' horizon, attacked again after issue 43's fix (docs/design.md#receipts, "The
horizon"): the guard judged "absent" against this process's ``RECEIPT_RETENTION``, while the
receipt may have been removed by another process's. The shard's pruned line closes it (a
strict xfail until then; tests/core/test_receipt_line.py has the line on both backends)."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.test import override_settings

from schemaless_store.exceptions import OutcomeUnknown
from schemaless_store.models import Entity
from schemaless_store.writes import receipts as write_receipts
from tests.core.test_receipt_horizon import _add_one, _Clock, _n
from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]

SLOW = 200  # seconds between the receipt's time and its retry's read, by the shard's clock


def test_a_pruner_with_a_shorter_retention_cannot_make_a_landed_write_run_again(monkeypatch):
    """This process keeps receipts 600 s; another process of the same store, deployed with
    ``RECEIPT_RETENTION`` 60 (a rolling deploy lowering it), prunes by the shard's clock
    between a ``modify``'s landed commit and its retry, which comes ``SLOW`` s after the
    receipt's time (the writer's clock set back by as much stands for the slow retry, as in
    tests/core/test_receipt_horizon.py). The receipt is gone; 200 s is well within this
    process's horizon, so before the line "absent" was taken as "did not land": +1 became
    +2. It must be 1, or ``OutcomeUnknown``, never 2: the pruner raised the line over the
    receipt, so the retry's "absent" is at or below it."""
    from schemaless_store.testing.faults import lost_commit_answers

    entity = Entity.objects.create(n=0)
    alias = entity.shard
    monkeypatch.setattr(write_receipts, "time", _Clock(-SLOW))
    pruned: list[int] = []

    def prune_in_a_process_keeping_60_s() -> None:
        shorter = override_settings(SCHEMALESS={**settings.SCHEMALESS, "RECEIPT_RETENTION": 60})
        with shorter, monkeypatch.context() as patched:
            patched.setattr(write_receipts, "time", time)
            pruned.append(write_receipts.prune(alias))

    try:
        with lost_commit_answers(aliases=[alias], after_commit=prune_in_a_process_keeping_60_s):
            Entity.objects.modify(entity.id, _add_one)
    except OutcomeUnknown:
        pass  # the honest answer
    monkeypatch.undo()
    assert pruned and pruned[0] >= 1
    assert _n(entity.id) == 1, "the landed modify ran again: another process pruned its receipt"
