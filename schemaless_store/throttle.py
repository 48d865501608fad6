"""The throttle of the store's background work: the cleaner's batches and a bucket move's copy
(docs/cleaner.md, docs/resharding.md). Both run batch after batch while the site's writers run,
and both are held back the same way: a fixed pause after each batch (``sleep``) plus, with a
``duty`` below 1, as long a pause as keeps the worker busy at most that share of wall time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Throttle:
    """``sleep`` seconds after each batch, plus ``t*(1-duty)/duty`` after a batch that took
    ``t`` seconds. The defaults (0 and 1) never pause."""

    sleep: float = 0.0
    duty: float = 1.0

    def __post_init__(self) -> None:
        if not _number(self.sleep) or not self.sleep >= 0:  # a NaN fails every bound
            raise ValueError(f"sleep must be a number of seconds (0 or more), not {self.sleep!r}")
        if not _number(self.duty) or not 0 < self.duty <= 1:
            raise ValueError(
                f"duty must be a share of the time above 0 and at most 1, not {self.duty!r}"
            )

    def pause(self, busy: float) -> float:
        """Seconds to pause after a batch that took ``busy`` seconds."""
        pause = float(self.sleep)
        if self.duty < 1:
            pause += busy * (1 - self.duty) / self.duty
        return pause

    def after(self, began: float, wait: Callable[[float], object] = time.sleep) -> None:
        """Pause after a batch begun at ``began`` (``time.monotonic()``), by ``wait`` (an
        ``Event.wait``, to be woken by a stop)."""
        pause = self.pause(time.monotonic() - began)
        if pause > 0:
            wait(pause)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
