"""The load test's figure for the target "the feed page's p99 ≤ 1 s at the flip" (issue 37):
which requests count as at the flip (load/run.py ``at_flip``)."""

from __future__ import annotations

from load.run import at_flip

FENCE, FLIP = 1000.0, 1000.3  # a move's fence and flip, wall clock


def test_requests_under_way_around_the_fence_and_the_flip_count_and_others_do_not():
    times = [
        [998.5, "GET /", 100, 200],  # ended 1.4 s before the fence: before the window
        [999.2, "GET /", 50, 200],  # ended in the margin before the fence
        [1000.9, "GET /", 800, 200],  # held by the fence: started before it, ended after
        [1002.5, "GET /", 1900, 200],  # started in the margin after the flip (at 1000.6)
        [1003.0, "GET /", 40, 200],  # started 1.7 s after the window
        [1000.2, "GET /u/[username]/", 5000, 200],  # another page
    ]
    figures = at_flip(times, [(FENCE, FLIP)], margin=1.0)
    assert figures["windows"] == [[999.0, 1001.3]]
    assert figures["requests"] == 3
    assert figures["max"] == 1900
    assert figures["p99"] == 1900
    assert figures["p50"] == 800
    assert figures["met"] is False


def test_several_moves_each_bring_their_window_and_an_empty_one_says_no_request():
    times = [[1000.5, "GET /", 300, 200], [2000.5, "GET /", 200, 200], [1500.0, "GET /", 9, 200]]
    figures = at_flip(times, [(FENCE, FLIP), (2000.0, 2000.2)], margin=0.5)
    assert figures["requests"] == 2
    assert figures["p99"] == 300 and figures["met"] is True
    assert at_flip(times, [(5000.0, 5000.1)])["met"] is None
