"""The throttle of the store's background work: the cleaner's batches and a bucket move's copy
(docs/cleaner.md, docs/resharding.md). Both run batch after batch while the site's writers run,
and both are held back the same ways:

- ``sleep``: a fixed pause after each batch;
- ``duty``: below 1, as long a pause as keeps the worker busy at most that share of wall time;
- ``max_latency``: after each batch, while the servers answer a probe (the round trip of a
  trivial statement, :func:`schemaless_store.topology.servers.probe_latency`) slower than this, wait
  (backing off up to half a second, for at most ``max_hold`` seconds), so the work yields to
  the writers when the servers are busy, as gh-ost's ``--max-load`` and django-mysql's
  ``chunk_time`` do. The probe runs on a thread of its own all along (:class:`LatencyProbe`),
  so it sees the servers as the writers do *while* a batch runs: a probe sent between
  batches would find the servers idle, the batch that loaded them being over.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..values import bounds

# The first wait when a probe is too slow, and the longest (doubling in between).
FIRST_HOLD = 0.01
LONGEST_HOLD = 0.5


@dataclass(frozen=True)
class Throttle:
    """``sleep`` seconds after each batch, plus ``t*(1-duty)/duty`` after a batch that took
    ``t`` seconds, plus, with ``max_latency`` (seconds), as long as the probe stays slower
    than that (at most ``max_hold``). The defaults never pause."""

    sleep: float = 0.0
    duty: float = 1.0
    max_latency: float | None = None
    max_hold: float = 30.0

    def __post_init__(self) -> None:
        if not bounds.number(self.sleep, 0):
            raise ValueError(f"sleep must be a number of seconds (0 or more), not {self.sleep!r}")
        if not bounds.number(self.duty, 0, 1, above=True):
            raise ValueError(
                f"duty must be a share of the time above 0 and at most 1, not {self.duty!r}"
            )
        if self.max_latency is not None and not bounds.number(self.max_latency, 0, above=True):
            raise ValueError(
                f"max_latency must be a number of seconds above 0, not {self.max_latency!r}"
            )
        if not bounds.number(self.max_hold, 0):
            raise ValueError(
                f"max_hold must be a number of seconds (0 or more), not {self.max_hold!r}"
            )

    def pause(self, busy: float) -> float:
        """Seconds to pause after a batch that took ``busy`` seconds (``sleep`` and ``duty``)."""
        pause = float(self.sleep)
        if self.duty < 1:
            pause += busy * (1 - self.duty) / self.duty
        return pause

    def after(
        self,
        began: float,
        wait: Callable[[float], object] = time.sleep,
        probe: Callable[[], float] | None = None,
    ) -> float:
        """Pause after a batch begun at ``began`` (``time.monotonic()``), by ``wait`` (an
        ``Event.wait``, to be woken by a stop: a true result ends the pause); with
        ``max_latency``, then hold while ``probe()`` (seconds) is slower. The seconds paused."""
        pause = self.pause(time.monotonic() - began)
        if pause > 0 and wait(pause):
            return pause
        return pause + self.hold(wait, probe)

    def hold(self, wait: Callable[[float], object], probe: Callable[[], float] | None) -> float:
        """Wait while ``probe()`` is slower than ``max_latency``; the seconds waited."""
        if self.max_latency is None or probe is None:
            return 0.0
        held, step = 0.0, FIRST_HOLD
        while held < self.max_hold and probe() > self.max_latency:
            step = min(step, self.max_hold - held)
            held += step
            if wait(step):
                break
            step = min(step * 2, LONGEST_HOLD)
        return held


class LatencyProbe:
    """Runs ``probe`` (seconds it took) every ``every`` seconds on a thread of its own between
    :meth:`start` and :meth:`stop`; :meth:`recent` is the 90th percentile of the samples of
    the last ``window`` seconds. ``on_exit`` runs on the thread as it ends (closing its
    database connections). A probe that fails counts as slow (``inf``): a server in trouble
    is a reason to hold back, and the work itself will meet the error."""

    def __init__(
        self,
        probe: Callable[[], float],
        *,
        every: float = 0.01,
        window: float = 0.1,
        on_exit: Callable[[], object] | None = None,
    ) -> None:
        self._probe, self._every, self._window, self._on_exit = probe, every, window, on_exit
        self._samples: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="throttle-probe", daemon=True)

    def start(self) -> LatencyProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def recent(self) -> float:
        """The 90th percentile of the last ``window`` seconds' samples (0 without any)."""
        horizon = time.monotonic() - self._window
        with self._lock:
            found = [latency for at, latency in self._samples if at >= horizon]
        if len(found) < 2:
            return found[0] if found else 0.0
        return statistics.quantiles(found, n=10, method="inclusive")[-1]

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._every):
                try:
                    latency = self._probe()
                except Exception:  # a failing probe counts as slow (the class docs)
                    latency = float("inf")
                now = time.monotonic()
                with self._lock:
                    self._samples.append((now, latency))
                    while self._samples and self._samples[0][0] < now - self._window:
                        self._samples.popleft()
        finally:
            if self._on_exit is not None:
                self._on_exit()
