"""Timing: contenders run in alternating rounds, and every ratio is computed inside a round.

The machine is noisy (2 cores, shared): a burst of load in the middle of the run must hit ours
and the baseline alike. So a comparison runs ``rounds`` rounds; in each, every contender runs its
ops back to back, in an order that rotates from round to round; a ratio is taken per round
(ours over that round's baseline) and the median over rounds is reported.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Op = Callable[[Any], Any]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass
class Timings:
    """Latencies (seconds) of one contender, kept per round."""

    units_per_op: int = 1  # e.g. 500 entities per bulk_put batch: throughput counts units
    rounds: list[list[float]] = field(default_factory=list)

    @property
    def latencies(self) -> list[float]:
        return [x for r in self.rounds for x in r]

    def round_throughput(self, n: int) -> float:
        spent = sum(self.rounds[n])
        return self.units_per_op * len(self.rounds[n]) / spent if spent else float("nan")

    def summary(self) -> dict[str, float]:
        lat = self.latencies
        spent = sum(lat)
        return {
            "ops": len(lat),
            "units_per_op": self.units_per_op,
            "throughput_per_s": self.units_per_op * len(lat) / spent if spent else float("nan"),
            "p50_ms": percentile(lat, 50) * 1000,
            "p99_ms": percentile(lat, 99) * 1000,
            "max_ms": max(lat) * 1000 if lat else float("nan"),
        }


@dataclass
class Contender:
    name: str
    op: Op
    ops_per_round: int
    units_per_op: int = 1
    # Entered around each turn of this contender (e.g. settings that only it runs under).
    around: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


def run_one(op: Op, args: Sequence[Any]) -> list[float]:
    out = []
    clock = time.perf_counter
    for arg in args:
        start = clock()
        op(arg)
        out.append(clock() - start)
    return out


def compare(
    contenders: Sequence[Contender],
    make_args: Callable[[int, int], list[Any]],
    rounds: int,
    warmup: int = 3,
) -> dict[str, Timings]:
    """Run the contenders in rotating order; ``make_args(round, n)`` gives n args for one
    contender's turn in that round (the same list for every contender, so they do equal work)."""
    timings = {c.name: Timings(units_per_op=c.units_per_op) for c in contenders}
    for contender in contenders:  # connections, caches, code paths: not what we measure
        with contender.around():
            run_one(contender.op, make_args(-1, min(warmup, contender.ops_per_round)))
    for number in range(rounds):
        shift = number % len(contenders)
        order = list(contenders[shift:]) + list(contenders[:shift])
        wanted = max(c.ops_per_round for c in contenders)
        args = make_args(number, wanted)
        for contender in order:
            with contender.around():
                timings[contender.name].rounds.append(
                    run_one(contender.op, args[: contender.ops_per_round])
                )
    return timings


def ratios(timings: dict[str, Timings], ours: str, baseline: str) -> dict[str, float]:
    """Medians over rounds of ours/baseline: throughput (above 1: ours faster) and p50 latency
    (below 1: ours faster)."""
    a, b = timings[ours], timings[baseline]
    n = min(len(a.rounds), len(b.rounds))
    throughput = [a.round_throughput(k) / b.round_throughput(k) for k in range(n)]
    p50 = [percentile(a.rounds[k], 50) / percentile(b.rounds[k], 50) for k in range(n)]
    return {
        "throughput": statistics.median(throughput),
        "p50_latency": statistics.median(p50),
        "rounds": n,
    }


def result(
    timings: dict[str, Timings], pairs: Sequence[tuple[str, str]], **extra: Any
) -> dict[str, Any]:
    """The JSON record of one comparison."""
    return {
        **extra,
        "contenders": {name: t.summary() for name, t in timings.items()},
        "ratios": {f"{a}/{b}": ratios(timings, a, b) for a, b in pairs},
    }
