"""The throttle the cleaner and a bucket move share (schemaless_store.throttle)."""

from __future__ import annotations

import math
import time

import pytest

from schemaless_store.throttle import Throttle


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
    ("sleep", "duty", "message"),
    [
        (-1, 1.0, "sleep must be a number of seconds"),
        (math.nan, 1.0, "sleep must be a number of seconds"),
        ("1", 1.0, "sleep must be a number of seconds"),
        (True, 1.0, "sleep must be a number of seconds"),
        (0, 0, "duty must be a share of the time above 0 and at most 1"),
        (0, 1.5, "duty must be a share of the time above 0 and at most 1"),
        (0, math.nan, "duty must be a share of the time above 0 and at most 1"),
        (0, None, "duty must be a share of the time above 0 and at most 1"),
    ],
)
def test_bad_values_are_refused(sleep, duty, message):
    with pytest.raises(ValueError, match=message):
        Throttle(sleep, duty)


def test_after_waits_the_pause_by_the_given_wait():
    waited: list[float] = []
    Throttle(sleep=0.25).after(time.monotonic(), waited.append)
    Throttle().after(time.monotonic(), waited.append)  # no pause: no wait at all
    began = time.monotonic() - 1.0  # a batch that took a second, at half duty
    Throttle(duty=0.5).after(began, waited.append)
    assert waited[0] == 0.25 and len(waited) == 2 and waited[1] == pytest.approx(1.0, abs=0.05)
