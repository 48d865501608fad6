"""A pass's batches: connections kept from one to the next, and the pauses between them
(``--max-latency``, ``--duty``)."""

from __future__ import annotations

import itertools
import time

from django.db.backends.signals import connection_created

from schemaless_store.cleaner import Cleaner
from tests.support import STORE
from tests.support.cleaner import PUBLISHED, state
from tests.support.invariants import assert_exact

pytestmark = STORE


def test_connections_are_kept_from_batch_to_batch(published, posts):
    """Connections are renewed between passes, not per batch (that cost a fifth of a
    backfill): far fewer connects than batches."""
    opened = []

    def count(sender, connection, **kwargs):
        opened.append(connection.alias)

    connection_created.connect(count)
    try:
        summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=5).run()
    finally:
        connection_created.disconnect(count)

    batches = sum(-(-p.scanned // 5) for p in summary.passes)
    assert batches >= 100 and len(summary.passes) == 6
    assert len(opened) <= 4 * len(summary.passes) < batches
    assert state(PUBLISHED) == "ready"
    assert_exact([published])


def test_max_latency_holds_each_batch_while_the_servers_answer_slowly(
    published, posts, monkeypatch
):
    from schemaless_store.cleaner import worker

    class FakeProbe:
        """The probe thread run() keeps, answering slow, slow, quick after each batch."""

        made: list[FakeProbe] = []

        def __init__(self, probe, *, on_exit=None):
            self.probe, self.asked, self.running = probe, 0, False
            FakeProbe.made.append(self)

        def start(self):
            self.running = True
            return self

        def stop(self):
            self.running = False

        def recent(self):
            self.asked += 1
            return 1.0 if self.asked % 3 else 0.0

    cleaner = Cleaner(indexes=[PUBLISHED], once=True, batch_size=20, max_latency=0.005)
    holds: list[float] = []

    def wait(pause: float) -> bool:
        holds.append(pause)
        return False

    monkeypatch.setattr(worker, "LatencyProbe", FakeProbe)
    monkeypatch.setattr(cleaner._stop, "wait", wait)
    summary = cleaner.run()

    assert not summary.failed and state(PUBLISHED) == "ready"
    (probe,) = FakeProbe.made
    assert not probe.running  # stopped with the run
    assert 0 < probe.probe() < 1.0  # it probes the shard servers for real
    batches = sum(-(-p.scanned // 20) for p in summary.passes)
    assert probe.asked == 3 * batches  # after each batch: slow, slow, quick
    assert holds == [0.01, 0.02] * batches
    assert_exact([published])


def test_duty_pauses_after_each_batch_for_a_share_of_its_time(published, posts, monkeypatch):
    cleaner = Cleaner(indexes=[PUBLISHED], once=True, batch_size=20, duty=0.25)
    waits: list[tuple[float, float, float]] = []  # (asked at, pause, returned at)

    def wait(pause: float) -> bool:
        asked = time.monotonic()
        waits.append((asked, pause, time.monotonic()))
        return False

    monkeypatch.setattr(cleaner._stop, "wait", wait)
    summary = cleaner.run()

    assert not summary.failed and state(PUBLISHED) == "ready"
    batches = sum(-(-p.scanned // 20) for p in summary.passes)
    assert len(waits) == batches
    for (_, _, previous_end), (asked, pause, _) in itertools.pairwise(waits):
        # Working at most a quarter of the time: three times the batch's own time, which
        # began after the previous pause ended (or after a pass began).
        assert pause > 0
        assert pause <= 3 * (asked - previous_end) + 1e-6
    assert_exact([published])
