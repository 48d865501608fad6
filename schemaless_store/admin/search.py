"""The admin's search box: an entity id in any form ``uuid.UUID`` reads, routed to its shard;
conditions ``property=value`` (or ``property:value``), with optional ``__lookup``, joined by
`` & ``, and ``order_by=-property``, through ``filter_index``; or a JSON object of the same. The
admin shows the query's ``explain()`` with the answer or the refusal. See ``docs/admin.md``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from ..config.indexes import registry
from ..exceptions import InvalidEntityId, SchemalessError
from ..models.entity import Entity
from ..tables import index_rows as index_table
from ..tables import lifecycle
from ..topology import shards
from ..values import entity_ids, jsonview
from .entity_rows import decode_column


class SearchError(SchemalessError, ValueError):
    """The search text is neither an entity id nor index conditions."""


_CONDITION = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(.*)\Z", re.DOTALL)
# Conditions are joined by " & " (spaces around it: a value such as a link may hold "&").
_JOIN = re.compile(r"\s+&\s+")
ORDER_KEY = "order_by"


@dataclass
class Search:
    text: str
    entity_id: bytes | None = None
    conditions: dict[str, Any] = field(default_factory=dict)
    order: str | None = None  # "published" or "-published"

    @property
    def by_id(self) -> bool:
        return self.entity_id is not None


def _entity_id(text: str) -> bytes | None:
    try:
        return entity_ids.entity_id_bytes(text)
    except InvalidEntityId:
        pass
    try:  # the forms uuid.UUID reads besides hex and dashed: {braces}, urn:uuid:...
        return uuid.UUID(text).bytes
    except ValueError:
        return None


def _value(text: str) -> Any:
    """A condition value: JSON (with the $-forms of :mod:`..values.jsonview`) if it parses, else
    text."""
    try:
        data = jsonview.parse(text)
    except jsonview.JSONViewError:
        return text
    return jsonview.from_json(data, "value")


def _order(value: Any) -> str:
    if not isinstance(value, str) or not value.lstrip("-"):
        raise SearchError(f"order_by takes a property name, such as -published, not {value!r}")
    return value


def parse_search(text: str) -> Search:
    """What the admin search box asks for (see the module docs); :class:`SearchError` if unclear."""
    text = text.strip()
    search = Search(text=text)
    if not text:
        return search
    search.entity_id = _entity_id(text)
    if search.entity_id is not None:
        return search
    try:
        if text.startswith("{"):
            data = jsonview.parse(text)
            if not isinstance(data, dict) or not data:
                raise SearchError("a JSON search is an object of conditions")
            if ORDER_KEY in data:
                search.order = _order(data.pop(ORDER_KEY))
            search.conditions = {k: jsonview.from_json(v, k) for k, v in data.items()}
            return search
        for part in _JOIN.split(text):
            match = _CONDITION.match(part)
            if not match:
                raise SearchError(
                    f"{part!r} is neither an entity id nor a condition like property=value; "
                    "see the help under the search box"
                )
            name, value = match.group(1), match.group(2).strip()
            if name == ORDER_KEY:
                search.order = _order(value)
            elif name in search.conditions:
                raise SearchError(f"{name} is given twice")
            else:
                search.conditions[name] = _value(value)
        if not search.conditions:
            raise SearchError("order_by needs at least one condition to go with it")
        return search
    except jsonview.JSONViewError as exc:
        raise SearchError(str(exc)) from None


def index_query(search: Search) -> Any:
    """The ``filter_index`` query of a search by conditions (not evaluated: no index is chosen
    yet, so :meth:`explain` works even when no index serves it)."""
    query = Entity.objects.filter_index(**search.conditions)
    return query.order_by(search.order) if search.order else query


def index_results(
    query: Any, aliases: Sequence[str], offset: int, size: int
) -> tuple[list[Any], bool]:
    """Entities of an index query, on ``aliases`` only: (entities, whether more follow).

    ``offset`` counts matching entities on those shards. Errors of the query (no index, not
    ready, bad value) raise.
    """
    if set(aliases) == set(shards.shard_aliases()):
        found = list(query[offset : offset + size + 1])
        return found[:size], len(found) > size
    wanted = set(aliases)
    kept = list(islice(_on_shards(query, wanted), offset, offset + size + 1))
    return kept[:size], len(kept) > size


def _on_shards(query: Any, wanted: set[str], chunk: int = 200) -> Iterator[Any]:
    # Sliced chunks keep the limit pushed down: the query reads no further than the page needs.
    start = 0
    while True:
        batch = list(query[start : start + chunk])
        yield from (e for e in batch if e.shard in wanted)
        if len(batch) < chunk:
            return
        start += chunk


def search_examples(limit: int = 6) -> list[str]:
    """Searches that work on the data: for each ready index over entities that holds a row, its
    properties with the values of its first row (the last one as the ordering)."""
    states = lifecycle.states()
    found = []
    for index in sorted(registry.valid(), key=lambda i: i.name):
        if index.column is not None or states.get(index.name) != lifecycle.READY:
            continue
        values = index_table.first(index)
        if values is None:
            continue
        shown = [
            f"{prop}={jsonview.dumps_value(decode_column(index, prop, value))}"
            for prop, value in zip(index.properties, values, strict=False)
        ]
        if len(shown) > 1:
            shown[-1] = f"{ORDER_KEY}=-{index.properties[-1]}"
        found.append(" & ".join(shown))
        if len(found) >= limit:
            break
    return found
