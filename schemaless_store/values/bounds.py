"""The one bounds check of a count, a size or a number of seconds that a caller passes or a
setting holds: an ``int`` (or a number) in a range, and never a ``bool`` (``True`` is an
``int`` to Python, and 1 to a careless check). A NaN fails every bound.

The settings' rules (:class:`~..config.conf.Rule`) and every argument check of the package
(batch sizes, page sizes, attempts, positions, the throttle's seconds) ask these two."""

from __future__ import annotations

from typing import Any


def whole(value: Any, low: int | None = 1, high: int | None = None) -> bool:
    """Whether ``value`` is an ``int``, not a ``bool``, from ``low`` to ``high`` (both
    included; None: no bound)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (low is None or low <= value)
        and (high is None or value <= high)
    )


def number(
    value: Any, low: float | None = 0, high: float | None = None, *, above: bool = False
) -> bool:
    """Whether ``value`` is an ``int`` or a ``float``, not a ``bool``, from ``low`` (above it,
    with ``above``) to ``high`` (included; None: no bound)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value != value:  # NaN
        return False
    if low is not None and not (value > low if above else value >= low):
        return False
    return high is None or value <= high
