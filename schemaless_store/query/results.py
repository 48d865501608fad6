"""What a lazy query does once it is evaluated, as a Django ``QuerySet`` does: iteration,
``len()`` and ``bool()`` read every result once and keep them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
