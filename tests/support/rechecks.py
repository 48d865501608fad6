"""The server's verdicts on (index row, entity) pairs, for the property test of
:func:`schemaless_store.tables.rechecks.implies_sql` (tests/queries/test_server_recheck.py):
the pairs as a derived table joined to ``entities`` by id, the verdict in the select list and
the refuted pairs left out by ``HAVING``, as a pinned scan's join judges its rows. (The store
fetched the entities of a hashed page this way until 2026-11-28; measured, Python's re-check of
an ``IN`` fetch was cheaper there, docs/performance.md#re-check-on-the-server-issue-45-item-4.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemaless_store.config.indexes import Index
from schemaless_store.tables.entities import UPDATED_TEXT
from schemaless_store.tables.rechecks import implies_sql
from schemaless_store.topology import shards


def judged(alias: str, index: Index, rows: Sequence[tuple[Any, ...]], conn: Any) -> list[Any]:
    """``(added_id, id, updated, body, place, verdict)`` of the entities on ``alias`` that
    ``rows`` (``(*values, entity_id)`` of ``index``) found, without the pairs the server
    refutes (``verdict``: TRUE or NULL)."""
    binary = tuple(type(value) is bytes for value in rows[0])
    quote = conn.ops.quote_name
    names = [quote(c) for c in (*index.properties, "entity_id")]
    check = implies_sql(index, "r", quote)
    assert check is not None
    condition, check_params = check
    # Bytes as binary literals: a derived table's column of plain string literals would be
    # text in the connection's character set, which an id or a key is not.
    marks = ["_binary %s" if is_bytes else "%s" for is_bytes in binary]
    first = "SELECT %s AS place, " + ", ".join(
        f"{mark} AS {name}" for mark, name in zip(marks, names, strict=True)
    )
    derived = first + (" UNION ALL SELECT %s, " + ", ".join(marks)) * (len(rows) - 1)
    sql = (
        f"SELECT e.added_id, e.id, {UPDATED_TEXT.replace('updated', 'e.updated')}, e.body, "
        f"r.place, ({condition}) AS recheck "
        f"FROM ({derived}) r JOIN entities e ON e.id = r.{quote('entity_id')} "
        "HAVING recheck IS NOT FALSE"
    )
    params = [*check_params]
    for n, row in enumerate(rows):
        params.append(n)
        params.extend(row)
    return shards.read(alias, sql, params, conn)
