"""The throttle the cleaner and a bucket move share (schemaless_store.guards.throttle)."""

from __future__ import annotations

import math
import threading
import time

import pytest

from schemaless_store.guards.throttle import LatencyProbe, Throttle
from tests.support import STORE


def test_the_defaults_never_pause():
    assert Throttle().pause(5.0) == 0.0


@pytest.mark.parametrize(
    ("sleep", "duty", "busy", "pause"),
    [
        (0.5, 1.0, 3.0, 0.5),  # a fixed pause, whatever the batch took
        (0.0, 0.5, 2.0, 2.0),  # half the time: as long as the batch took
        (0.0, 0.25, 1.0, 3.0),  # a quarter: three times as long
        (0.1, 0.5, 1.0, 1.1),  # the two add up
    ],
)
def test_the_pause_keeps_the_worker_busy_at_most_its_duty(sleep, duty, busy, pause):
    throttle = Throttle(sleep, duty)
    assert throttle.pause(busy) == pytest.approx(pause)
    if duty < 1:
        assert busy / (busy + throttle.pause(busy) - sleep) == pytest.approx(duty)


@pytest.mark.parametrize(
    ("sleep", "duty", "message", "more"),
    [
        (-1, 1.0, "sleep must be a number of seconds", {}),
        (math.nan, 1.0, "sleep must be a number of seconds", {}),
        ("1", 1.0, "sleep must be a number of seconds", {}),
        (True, 1.0, "sleep must be a number of seconds", {}),
        (0, 0, "duty must be a share of the time above 0 and at most 1", {}),
        (0, 1.5, "duty must be a share of the time above 0 and at most 1", {}),
        (0, math.nan, "duty must be a share of the time above 0 and at most 1", {}),
        (0, None, "duty must be a share of the time above 0 and at most 1", {}),
        (0, 1.0, "max_latency must be a number of seconds above 0", {"max_latency": 0}),
        (0, 1.0, "max_latency must be a number of seconds above 0", {"max_latency": "1"}),
        (0, 1.0, "max_hold must be a number of seconds", {"max_hold": -1}),
    ],
)
def test_bad_values_are_refused(sleep, duty, message, more):
    with pytest.raises(ValueError, match=message):
        Throttle(sleep, duty, **more)


def test_after_waits_the_pause_by_the_given_wait():
    waited: list[float] = []
    Throttle(sleep=0.25).after(time.monotonic(), waited.append)
    Throttle().after(time.monotonic(), waited.append)  # no pause: no wait at all
    began = time.monotonic() - 1.0  # a batch that took a second, at half duty
    Throttle(duty=0.5).after(began, waited.append)
    assert waited[0] == 0.25 and len(waited) == 2 and waited[1] == pytest.approx(1.0, abs=0.05)


class Probe:
    """A probe that answers the given latencies, then its last one forever."""

    def __init__(self, *latencies: float) -> None:
        self.latencies, self.calls = list(latencies), 0

    def __call__(self) -> float:
        self.calls += 1
        return self.latencies.pop(0) if len(self.latencies) > 1 else self.latencies[0]


def test_a_slow_probe_holds_the_work_backing_off_until_the_servers_answer_quickly():
    waited: list[float] = []
    probe = Probe(0.050, 0.050, 0.050, 0.001)  # three slow answers, then a quick one
    held = Throttle(max_latency=0.005).hold(waited.append, probe)
    assert waited == [0.01, 0.02, 0.04] and held == pytest.approx(0.07)
    assert probe.calls == 4


def test_a_quick_probe_or_no_max_latency_never_holds():
    waited: list[float] = []
    assert Throttle(max_latency=0.005).hold(waited.append, Probe(0.001)) == 0.0
    slow = Probe(1.0)
    assert Throttle().hold(waited.append, slow) == 0.0 and slow.calls == 0
    assert Throttle(max_latency=0.005).hold(waited.append, None) == 0.0
    assert waited == []


def test_the_hold_is_bounded_and_a_stop_ends_it():
    waited: list[float] = []
    held = Throttle(max_latency=0.005, max_hold=2.0).hold(waited.append, Probe(1.0))
    assert held == pytest.approx(2.0) and sum(waited) == pytest.approx(2.0)
    assert max(waited) == 0.5  # backing off doubles up to half a second
    stops: list[float] = []

    def stopped(seconds: float) -> bool:
        stops.append(seconds)
        return True  # an Event.wait that was woken: the worker is stopping

    assert Throttle(max_latency=0.005).hold(stopped, Probe(1.0)) == 0.01 and stops == [0.01]


def test_after_pauses_then_holds():
    waited: list[float] = []
    throttle = Throttle(sleep=0.25, max_latency=0.005)
    paused = throttle.after(time.monotonic(), waited.append, Probe(0.05, 0.001))
    assert waited == [0.25, 0.01] and paused == pytest.approx(0.26)


@STORE
def test_the_probe_times_a_trivial_statement_on_each_server():
    from schemaless_store.topology import servers, shards

    latency = servers.probe_latency(shards.shard_aliases())
    assert 0 < latency < 1.0
    assert servers.probe_latency([]) == 0.0


def test_the_latency_probe_samples_on_its_thread_and_reports_the_recent_90th_percentile():
    answers = iter([0.001] * 30 + [0.2] * 1000)
    exited = threading.Event()
    probe = LatencyProbe(lambda: next(answers), every=0.001, window=0.05, on_exit=exited.set)
    assert probe.recent() == 0.0  # nothing sampled yet
    probe.start()
    try:
        deadline = time.monotonic() + 5
        while probe.recent() < 0.2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert probe.recent() == 0.2  # the quick answers aged out of the window
    finally:
        probe.stop()
    assert exited.is_set()


def test_a_failing_probe_counts_as_slow():
    def broken() -> float:
        raise OSError("server gone")

    probe = LatencyProbe(broken, every=0.001).start()
    try:
        deadline = time.monotonic() + 5
        while probe.recent() == 0.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert probe.recent() == math.inf
    finally:
        probe.stop()
