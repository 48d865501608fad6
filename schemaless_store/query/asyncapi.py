"""The async API, in Django's own conventions (``aget``, ``acreate``, ``asave``, ``async for``).

As Django's async ORM does, every async method runs its sync twin through
``asgiref.sync.sync_to_async`` (``thread_sensitive=True``, Django's default): the store's
connections, transactions and row locks stay in the one thread Django gives database work, and
each method has exactly its twin's behaviour and errors. An ``await`` does not make a shard
answer sooner; it frees the event loop while the shard works.

The sync methods refuse to run in an event loop's thread with Django's
``SynchronousOnlyOperation``, as the ORM does (:func:`sync_only`): where a read is answered from
the entity cache no connection would be opened, so Django's own check on connecting would not
catch it. ``DJANGO_ALLOW_ASYNC_UNSAFE`` lifts the check, as it does for the ORM.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.utils.asyncio import async_unsafe

F = TypeVar("F", bound=Callable[..., Any])

SYNC_ONLY_MESSAGE = (
    "You cannot call this from an async context - use a thread or sync_to_async, or the "
    "store's async twin of the method (aget, acreate, asave, async for, ...)."
)


def sync_only(func: F) -> F:
    """Raise Django's ``SynchronousOnlyOperation`` when ``func`` is called in a thread that
    runs an event loop (``django.utils.asyncio.async_unsafe``)."""
    return async_unsafe(SYNC_ONLY_MESSAGE)(func)


class AsyncManager:
    """``Entity.objects``' async methods."""

    get: Callable[..., Any]
    get_many: Callable[..., Any]
    create: Callable[..., Any]
    bulk_put: Callable[..., Any]
    modify: Callable[..., Any]

    async def aget(self, *args: Any, **kwargs: Any) -> Any:
        """``await Entity.objects.aget(id=...)``: :meth:`get`'s twin."""
        return await sync_to_async(self.get)(*args, **kwargs)

    async def aget_many(self, ids: Iterable[Any]) -> dict[Any, Any]:
        return await sync_to_async(self.get_many)(list(ids))

    async def acreate(self, placed_with: str | None = None, **properties: Any) -> Any:
        return await sync_to_async(self.create)(placed_with=placed_with, **properties)

    async def abulk_put(
        self,
        entities: Iterable[Mapping[str, Any] | Any],
        batch_size: int = 500,
        placed_with: str | None = None,
    ) -> list[Any]:
        return await sync_to_async(self.bulk_put)(
            list(entities), batch_size=batch_size, placed_with=placed_with
        )

    async def amodify(self, id: Any, fn: Callable[[Any], Any], attempts: int = 10) -> Any:
        """:meth:`modify`'s twin; ``fn`` is called in the database thread, not the loop."""
        return await sync_to_async(self.modify)(id, fn, attempts)


class AsyncEntity:
    """An entity's async methods (they replace ``Model.asave``/``adelete``, which know nothing
    of ``if_unchanged``)."""

    save: Callable[..., Any]
    delete: Callable[..., Any]
    refresh_from_db: Callable[..., Any]

    async def asave(self, *args: Any, **kwargs: Any) -> None:
        """``save()``'s twin: every keyword the instance's ``save()`` takes, passed on as
        given (an entity's ``if_unchanged`` and ``update_fields``; a kind's ``validate`` and
        ``expect`` too), with the same errors (an unknown keyword is ``save()``'s TypeError)."""
        await sync_to_async(self.save)(*args, **kwargs)

    async def adelete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        """``delete()``'s twin, its keywords (``if_unchanged``) passed on as given."""
        result: tuple[int, dict[str, int]] = await sync_to_async(self.delete)(*args, **kwargs)
        return result

    async def arefresh_from_db(
        self, using: str | None = None, fields: Any = None, from_queryset: Any = None
    ) -> None:
        await sync_to_async(self.refresh_from_db)(
            using=using, fields=fields, from_queryset=from_queryset
        )


class AsyncResults:
    """A lazy query's async methods (``filter_index(...)``, ``all()``): ``async for`` reads
    every result once and keeps them, as iterating the query does (as Django's
    ``QuerySet.__aiter__``)."""

    _fetch_all: Callable[[], list[Any]]
    first: Callable[[], Any]
    count: Callable[[], int]
    exists: Callable[[], bool]
    page: Callable[..., Any]

    def __aiter__(self) -> AsyncIterator[Any]:
        async def results() -> AsyncIterator[Any]:
            for item in await sync_to_async(self._fetch_all)():
                yield item

        return results()

    async def afirst(self) -> Any:
        return await sync_to_async(self.first)()

    async def acount(self) -> int:
        return await sync_to_async(self.count)()

    async def aexists(self) -> bool:
        return await sync_to_async(self.exists)()

    async def apage(self, size: int = 30, cursor: str | None = None) -> Any:
        """``page(after=cursor, size=size)``'s twin: a :class:`~.indexquery.Page`."""
        return await sync_to_async(self.page)(after=cursor, size=size)


class AsyncChunks:
    """``aiterator(chunk_size)``, the twin of ``iterator()`` (``Entity.objects.all()``): a
    chunk at a time, nothing kept, as Django's ``QuerySet.aiterator``."""

    iterator: Callable[..., Iterator[Any]]
    chunk_size: int

    async def aiterator(self, chunk_size: int | None = None) -> AsyncIterator[Any]:
        size = self.chunk_size if chunk_size is None else chunk_size
        # Made and advanced in Django's database thread, where its connection lives.
        found = await sync_to_async(self.iterator)(size)
        take = sync_to_async(lambda: list(islice(found, size)))
        while chunk := await take():
            for item in chunk:
                yield item
