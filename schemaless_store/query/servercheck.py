"""Whether a query's re-check runs on the server (docs/design.md, "Re-check on the server").

It does when the store writes JSON bodies (``SCHEMALESS["CODEC"]`` is
:class:`~..values.codec.JsonCodec`), the shards' server reads them (MariaDB's JSON functions),
the query's fetcher joins entities to a pinned scan (entities, not a cell column's rows) and
every column of its index is of a type the server compares exactly as Python does
(:func:`..tables.rechecks.plain`). The server then judges the entities the scan joins (those
on the index row's own shard); Python re-checks every other entity, as it always did, and
what the server leaves undecided (a body in another format, lists, floats, tagged values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import conf
from ..config.indexes import Index
from ..sql import dialects
from ..tables import rechecks
from ..topology import shards
from ..values.bucket_hash import bucket_of
from ..values.codec import JsonCodec


def server_checks(query: Any) -> bool:
    """Whether ``query`` (an :class:`~.indexquery.IndexQuery`) is re-checked on the server."""
    if not isinstance(conf.get().codec, JsonCodec):
        return False
    if not query.fetcher.join_entities or not rechecks.plain(query.index):
        return False
    aliases = shards.shard_aliases()
    return bool(aliases) and all(
        dialects.of(shards.connection(alias)).json_functions for alias in aliases
    )


def pinned_buckets(
    index: Index, values: Sequence[tuple[str, str, Any]], total: int
) -> list[int] | None:
    """The buckets of the ``shard_on`` values an exact or ``in`` condition pins (``values``:
    the conditions as column values), or None when nothing pins them."""
    for prop, lookup, value in values:
        if prop == index.shard_on and lookup in ("exact", "in"):
            found = value if lookup == "in" else [value]
            return sorted({bucket_of(index.routing_key(v), total) for v in found})
    return None
