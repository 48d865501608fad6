"""What a lazy query does once it is evaluated, as a Django ``QuerySet`` does: iteration,
``len()`` and ``bool()`` read every result once and keep them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..exceptions import InvalidQuery
from ..tables.buckets import retrying_stale
from .asyncapi import sync_only


class CachedResults:
    """A mixin: ``_all_results()`` yields the results; the first of ``iter()``, ``len()`` and
    ``bool()`` stores them in ``_cache`` (None until then), which the others reuse."""

    _cache: list[Any] | None

    def _all_results(self) -> Iterator[Any]:
        raise NotImplementedError

    @sync_only
    def _fetch_all(self) -> list[Any]:
        if self._cache is None:
            # A read routed by a map a bucket move has overtaken starts again (nothing was
            # returned yet), by the map read again.
            self._cache = retrying_stale(lambda: list(self._all_results()))
        return self._cache

    def __iter__(self) -> Iterator[Any]:
        return iter(self._fetch_all())

    def __len__(self) -> int:
        return len(self._fetch_all())

    def __bool__(self) -> bool:
        return bool(self._fetch_all())


def check_index(item: Any) -> None:
    """What a query's ``[...]`` takes, as Django's ``QuerySet``: an int or a slice, never a
    negative bound (``TypeError``, ``InvalidQuery``)."""
    if not isinstance(item, int | slice):
        raise TypeError(f"query indices must be integers or slices, not {type(item).__name__}")
    if (isinstance(item, int) and item < 0) or (
        isinstance(item, slice)
        and any(bound is not None and bound < 0 for bound in (item.start, item.stop))
    ):
        raise InvalidQuery("Negative indexing is not supported.")
