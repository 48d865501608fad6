"""The async twins of a kind's queryset methods (Django's ``aget``, ``acount``, ...), each the
sync method run by ``sync_to_async`` in Django's database thread: on :class:`~.query.KindQuery`
and, through it, on ``Book.objects``."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

# The methods with an ``a`` twin, on the query and on the manager.
TWINS = (
    "get",
    "count",
    "exists",
    "first",
    "last",
    "earliest",
    "latest",
    "in_bulk",
    "get_or_create",
    "update_or_create",
    "update",
    "delete",
)


def _twin(name: str) -> Any:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await sync_to_async(getattr(self, name))(*args, **kwargs)

    method.__name__ = method.__qualname__ = f"a{name}"
    method.__doc__ = f"``{name}()``, awaited."
    return method


def _on_manager(name: str) -> Any:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.query(), f"a{name}")(*args, **kwargs)

    method.__name__ = method.__qualname__ = f"a{name}"
    method.__doc__ = f"``{name}()`` of every entity of the kind, awaited."
    return method


class AsyncKindQuery:
    """A mixin: ``aget``, ``acount``, ... (:data:`TWINS`) on a kind's query."""


class AsyncKindManager:
    """A mixin: the same on ``Book.objects`` (``aget_many``, ``acreate`` and the like are the
    entity manager's)."""


for _name in TWINS:
    setattr(AsyncKindQuery, f"a{_name}", _twin(_name))
    if _name not in ("update", "delete"):
        setattr(AsyncKindManager, f"a{_name}", _on_manager(_name))
