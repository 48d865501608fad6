"""``Book.objects.filter(...)``: a kind's queryset, read through the kind's indexes
(docs/kinds.md#querysets), as App Engine ndb's queries are.

A :class:`KindQuery` is lazy and chainable like Django's ``QuerySet``: ``filter``, ``exclude``,
``order_by``, slicing, ``count``, ``exists``, ``first``/``last``, ``get``, ``in_bulk``,
``page``, ``select_related``/``prefetch_related`` of references; its writes (``delete``,
``update``, ``get_or_create``, ``update_or_create``) are :mod:`.bulk`'s.

Each alternative of the conditions (:mod:`.lookups`) is one index query
(:class:`~..query.indexquery.IndexQuery`, which re-checks every entity), a ``get_many`` for
one named by id, or, with no condition at all, the kind's entities in ``all()``'s order. An
``OR`` reads every branch and merges them (by the ordering, each entity once). A query no
index serves raises :class:`NoIndexForQuery` naming the kind and the ``Index`` to declare.
``Meta.ordering`` (one property) orders a query that an index serves in that order; any other
query keeps its index's order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from ..exceptions import IndexNotReady, InvalidQuery, NoIndexForQuery
from ..query.allentities import AllEntities
from ..query.asyncapi import AsyncResults, sync_only
from ..query.indexquery import MAX_PAGE, IndexQuery, Page
from ..query.results import CachedResults, check_index
from ..values import bounds
from .asyncmethods import AsyncKindQuery
from .bulk import KindWrites
from .lookups import Branch, Lookups, sort_key
from .references import prefetch, reference_names
from .shapes import KindShapes

# Results get() reads to tell one from several (as Django's MAX_GET_RESULTS).
MAX_GET_RESULTS = 21
_UNKNOWN = object()


class KindQuery(AsyncKindQuery, KindWrites, KindShapes, AsyncResults, CachedResults):
    """A lazy query over one kind's entities (see the module docs)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._branches: list[Branch] = [Branch()]
        self._order: str | None = None
        self._descending = False
        self._explicit = False  # order_by() was called: Meta.ordering no longer applies
        self._offset = 0
        self._limit: int | None = None
        self._prefetch: tuple[str, ...] = ()
        self._alias: str | None = None
        self._cache: list[Any] | None = None
        self._default_order: Any = _UNKNOWN  # Meta.ordering, if it applies (chosen once)

    # --- building ---------------------------------------------------------------------------

    def _clone(self) -> KindQuery:
        clone = KindQuery.__new__(KindQuery)
        clone.__dict__.update(self.__dict__)
        clone._cache = None
        clone._default_order = _UNKNOWN
        return clone

    def _chained(self, what: str) -> KindQuery:
        if self._offset or self._limit is not None:
            raise InvalidQuery(f"{self.model.__name__}: cannot {what} once a slice has been taken")
        return self._clone()

    def all(self) -> KindQuery:
        return self._clone()

    def none(self) -> KindQuery:
        clone = self._clone()
        clone._branches = [Branch(ids=[])]
        return clone

    def filter(self, *args: Any, **kwargs: Any) -> KindQuery:
        """Entities meeting every condition (keyword lookups and ``Q`` objects)."""
        clone = self._chained("filter")
        more = Lookups(self.model).branches(args, kwargs)
        clone._branches = [a.merged(b) for a in self._branches for b in more]
        return clone

    def exclude(self, *args: Any, **kwargs: Any) -> KindQuery:
        """Leave out the entities meeting the conditions: each entity the rest of the query
        reads is re-checked (an exclude reads no index of its own)."""
        clone = self._chained("exclude")
        negation = Lookups(self.model).negation(args, kwargs)[0]
        clone._branches = [b.merged(negation) for b in self._branches]
        return clone

    def order_by(self, *fields: str) -> KindQuery:
        """Order by one property an index holds in that order (``"-published"``);
        ``order_by()`` clears the ordering, ``Meta.ordering`` included."""
        clone = self._chained("reorder")
        clone._explicit = True
        if not fields:
            clone._order, clone._descending = None, False
            return clone
        name = self.model.__name__
        if len(fields) > 1:
            raise InvalidQuery(
                f"{name}.objects.order_by{tuple(fields)!r}: a kind's query is ordered by one "
                "property, as its index holds it; order by the first and sort ties in Python"
            )
        field = fields[0]
        if not isinstance(field, str) or not field.lstrip("-"):
            raise InvalidQuery(f"{name}.objects.order_by() takes a property name, not {field!r}")
        if field.lstrip("-") in ("pk", "id", "?"):
            raise InvalidQuery(
                f"{name}.objects.order_by({field!r}): entities are not ordered by id across "
                "shards; order by an indexed property (a created DateTimeField, say)"
            )
        clone._order, clone._descending = field.lstrip("-"), field.startswith("-")
        return clone

    def reverse(self) -> KindQuery:
        clone = self._chained("reverse")
        order = clone._effective_order()
        if order is None:
            raise InvalidQuery(f"{self.model.__name__}: reverse() needs an ordering")
        clone._order, clone._descending, clone._explicit = order[0], not order[1], True
        return clone

    def select_related(self, *names: str) -> KindQuery:
        """Fetch the named references with the results: one ``get_many`` per page (one query
        per shard), not one read per instance (as :meth:`prefetch_related`)."""
        clone = self._clone()
        known = reference_names(self.model)
        for name in names:
            if name not in known:
                raise InvalidQuery(
                    f"{self.model.__name__}: {name!r} is not a ReferenceField of the kind "
                    f"(its references: {', '.join(known) or 'none'})"
                )
        clone._prefetch = (*self._prefetch, *names) if names else tuple(known)
        return clone

    prefetch_related = select_related

    def using(self, alias: str) -> KindQuery:
        """Only the matching entities stored on shard ``alias``."""
        from ..topology import shards

        clone = self._clone()
        clone._alias = shards.check_alias(alias)
        return clone

    @property
    def ordered(self) -> bool:
        return self._effective_order() is not None

    def __getitem__(self, item: int | slice) -> Any:
        check_index(item)
        if self._cache is not None:
            return self._cache[item]
        if isinstance(item, int):
            found = list(self[item : item + 1])
            if not found:
                raise IndexError(f"{self.model.__name__} query index out of range")
            return found[0]
        if item.step is not None:
            return list(self[item.start : item.stop])[:: item.step]
        clone = self._clone()
        start = item.start or 0
        clone._offset = self._offset + start
        if item.stop is not None:
            stop = self._offset + item.stop
            if self._limit is not None:
                stop = min(stop, self._offset + self._limit)
            clone._limit = max(0, stop - clone._offset)
        elif self._limit is not None:
            clone._limit = max(0, self._limit - start)
        return clone

    # --- the plan ---------------------------------------------------------------------------

    def _effective_order(self) -> tuple[str, bool] | None:
        if self._order is not None:
            return self._order, self._descending
        if self._explicit:
            return None
        if self._default_order is _UNKNOWN:
            self._default_order = self._meta_ordering()
        return self._default_order

    def _meta_ordering(self) -> tuple[str, bool] | None:
        ordering = self.model._meta.ordering
        if not ordering or not isinstance(ordering[0], str):
            return None
        first = ordering[0]
        order = (first.lstrip("-"), first.startswith("-"))
        # Meta.ordering orders a query an index serves in that order, and no other.
        for branch in self._branches:
            if branch.ids is None and not branch.empty:
                try:
                    self._index_query(branch, order).index  # noqa: B018 - choose it
                except (NoIndexForQuery, IndexNotReady):
                    return None
        return order

    def _index_query(self, branch: Branch, order: tuple[str, bool] | None) -> IndexQuery:
        query = self.model.objects.index_query(branch.conditions)
        if order is not None:
            query = query.order_by(("-" if order[1] else "") + order[0])
        return query

    def _source(self, branch: Branch, order: tuple[str, bool] | None) -> Any:
        """What reads a branch: an index query, the kind's ``all()``, or a list by id."""
        if branch.ids is not None:
            found = self.model.objects.get_many(branch.ids)
            entities = [found[i] for i in branch.ids if i in found]
            if order is not None:
                entities = _sorted(self.model, entities, order)
            return entities
        if not branch.conditions and order is None:
            return AllEntities(self.model, kind=self.model._kind.name)
        query = self._index_query(branch, order)
        try:
            query.index  # noqa: B018 - refuse now, naming the kind
        except NoIndexForQuery as exc:
            raise NoIndexForQuery(f"{self.model.__name__}.objects: {exc}") from None
        return query

    def _post_filtered(self, branch: Branch) -> bool:
        return bool(branch.negated or branch.rechecks or self._alias) or branch.ids is not None

    def _keeps(self, branch: Branch, entity: Any) -> bool:
        if self._alias is not None and entity.shard != self._alias:
            return False
        return branch.keeps(entity, self.model._kind.fields)

    def _branch_results(self, branch: Branch, want: int | None) -> Iterator[Any]:
        """The branch's matches in order, at least the first ``want`` (None: all)."""
        if branch.empty:
            return
        source = self._source(branch, self._effective_order())
        if not self._post_filtered(branch):
            yield from source if want is None else source[:want]
            return
        if isinstance(source, list) or want is None:
            yield from (e for e in source if self._keeps(branch, e))
            return
        size, kept = max(want, 1), []
        while True:  # read more until enough entities pass the re-check, or none are left
            read = list(source[:size])
            kept = [e for e in read if self._keeps(branch, e)]
            if len(kept) >= want or len(read) < size:
                break
            size *= 2
        yield from kept

    def _all_results(self) -> Iterator[Any]:
        want = None if self._limit is None else self._offset + self._limit
        live = [b for b in self._branches if not b.empty]
        if len(live) <= 1:
            found = list(self._branch_results(live[0], want)) if live else []
        else:
            found = self._merged(live)
        found = found[self._offset : want]
        if self._prefetch:
            prefetch(self.model, found, self._prefetch)
        return iter(found)

    def _merged(self, branches: list[Branch]) -> list[Any]:
        """An OR: every branch read and merged, each entity once, in the query's order
        (else in the order the branches found them)."""
        seen: dict[uuid.UUID, Any] = {}
        for branch in branches:
            for entity in self._branch_results(branch, None):
                seen.setdefault(entity.id, entity)
        order = self._effective_order()
        entities = list(seen.values())
        return entities if order is None else _sorted(self.model, entities, order)

    # --- evaluating -------------------------------------------------------------------------

    def __repr__(self) -> str:
        shown = list(self[:21])
        more = ", ...(remaining elements truncated)..." if len(shown) > 20 else ""
        return f"<KindQuery {shown[:20]!r}{more}>"

    @sync_only
    def iterator(self, chunk_size: int | None = None) -> Iterator[Any]:
        """The results, nothing kept on the query."""
        return self._all_results()

    @sync_only
    def count(self) -> int:
        """The number of matches (read and re-checked, as an index query counts)."""
        if self._cache is not None:
            return len(self._cache)
        live = [b for b in self._branches if not b.empty]
        if len(live) == 1 and not self._post_filtered(live[0]) and not self._prefetch:
            source = self._source(live[0], self._effective_order())
            if self._offset or self._limit is not None:
                stop = None if self._limit is None else self._offset + self._limit
                source = source[self._offset : stop]
            return int(source.count())
        return sum(1 for _ in self._all_results())

    @sync_only
    def exists(self) -> bool:
        return self.first() is not None

    @sync_only
    def first(self) -> Any | None:
        return next(iter(self[:1]), None)

    @sync_only
    def last(self) -> Any | None:
        """The last result: the first of the reversed order (unordered: read to the end)."""
        if self._effective_order() is None or self._offset or self._limit is not None:
            found = list(self)
            return found[-1] if found else None
        return self.reverse().first()

    @sync_only
    def earliest(self, field: str) -> Any:
        """The first match by ``field`` (an indexed property): ``DoesNotExist`` if none."""
        return self._end(self.order_by(field))

    @sync_only
    def latest(self, field: str) -> Any:
        return self._end(self.order_by(field[1:] if field.startswith("-") else "-" + field))

    def _end(self, query: KindQuery) -> Any:
        found = query.first()
        if found is None:
            raise self.model.DoesNotExist(f"{self.model.__name__} matching query does not exist.")
        return found

    @sync_only
    def get(self, *args: Any, **kwargs: Any) -> Any:
        """The one entity matching the conditions: ``DoesNotExist`` if none does,
        ``MultipleObjectsReturned`` if several do."""
        query = self.filter(*args, **kwargs) if args or kwargs else self
        found = list(query[:MAX_GET_RESULTS])
        name = self.model.__name__
        if len(found) == 1:
            return found[0]
        if not found:
            shown = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
            raise self.model.DoesNotExist(f"{name} matching query does not exist ({shown}).")
        more = "more than " if len(found) >= MAX_GET_RESULTS else ""
        raise self.model.MultipleObjectsReturned(
            f"get() returned more than one {name} -- it returned {more}{len(found)}!"
        )

    @sync_only
    def in_bulk(self, id_list: Any = None, *, field_name: str = "pk") -> dict[uuid.UUID, Any]:
        """The matches by id: among ``id_list`` (one ``get_many``), or all of them."""
        if field_name not in ("pk", "id"):
            raise InvalidQuery(
                f"{self.model.__name__}.objects.in_bulk() finds entities by id; for "
                f"{field_name!r} use filter({field_name}__in=[...]) through an index"
            )
        query = self if id_list is None else self.filter(pk__in=list(id_list))
        return {entity.id: entity for entity in query}

    @sync_only
    def page(self, after: str | None = None, size: int = 30) -> Page:
        """One page of ``size`` after a cursor (None: the first), by the store's signed
        keyset cursors: a query of one branch that an index, or ``all()``, reads alone."""
        live = [b for b in self._branches if not b.empty]
        if not live:
            return Page(entities=[], next_cursor=None)
        if len(live) > 1 or self._post_filtered(live[0]) or self._offset or self._limit:
            raise InvalidQuery(
                f"{self.model.__name__}: page() pages a query one index serves alone (no OR, "
                "exclude(), pk= or slice); slice this one instead ([n:n + size])"
            )
        if not bounds.whole(size, 1, MAX_PAGE):
            raise InvalidQuery(f"page size must be an int from 1 to {MAX_PAGE}, not {size!r}")
        found = self._source(live[0], self._effective_order()).page(after=after, size=size)
        if self._prefetch:
            prefetch(self.model, found.entities, self._prefetch)
        return found

    def explain(self) -> str:
        """How each branch would be read (an index query's ``explain()``)."""
        order = self._effective_order()
        lines = []
        for branch in self._branches:
            if branch.empty:
                lines.append("nothing can match")
            elif branch.ids is not None:
                lines.append(f"get_many of {len(branch.ids)} id(s), re-checked")
            elif not branch.conditions and order is None:
                lines.append(f"every {self.model.__name__}, in all()'s order")
            else:
                lines.append(self._index_query(branch, order).explain())
        return "\n--- OR ---\n".join(lines)


def _sorted(model: Any, entities: list[Any], order: tuple[str, bool]) -> list[Any]:
    """Entities in an ordering, as an index orders them; those without the property left
    out (an index holds no row for them)."""
    prop, descending = order
    model_field = model._kind.fields.get(prop)
    keyed = []
    for entity in entities:
        properties = entity.body_properties()
        if prop in properties:
            try:
                keyed.append(((sort_key(model_field, properties[prop]), entity.id.bytes), entity))
            except (ValueError, TypeError):
                continue
    keyed.sort(key=lambda pair: pair[0], reverse=descending)
    return [entity for _key, entity in keyed]
