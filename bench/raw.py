"""The raw baseline: mysqlclient on its own connections, issuing the store's statements by hand.

This is what a careful user would write without the store: the same tables, the same body codec
and key encoding (they are the storage format), the same routing by bucket, and the same SQL
statements, with none of Django's or the store's machinery around them. Each shard gets two
connections, as the store uses: one for entity transactions and one in autocommit for index rows.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

import MySQLdb

from schemaless_store.config import conf
from schemaless_store.values import bucket_hash, entity_ids, index_values
from schemaless_store.values.codec import decode_body

ENTITY_COLUMNS = "added_id, id, updated, body"
INSERT_ENTITY = "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)"
INSERT_USER = (
    "INSERT INTO index_user_id (user_id, entity_id) VALUES (%s, %s) "
    "ON DUPLICATE KEY UPDATE entity_id = entity_id"
)
INSERT_USER_PUBLISHED = (
    "INSERT INTO index_user_published (user_id, published, entity_id) VALUES (%s, %s, %s) "
    "ON DUPLICATE KEY UPDATE entity_id = entity_id"
)
PAGE = (
    "SELECT user_id, published, entity_id FROM index_user_published WHERE user_id = %s "
    "ORDER BY published DESC, entity_id DESC LIMIT %s"
)
ALL_OF_USER = "SELECT user_id, entity_id FROM index_user_id WHERE user_id = %s"


def connect(settings_dict: dict[str, Any], autocommit: bool = True) -> Any:
    """A mysqlclient connection with the session settings Django's connection gets."""
    options = settings_dict.get("OPTIONS", {})
    conn = MySQLdb.connect(
        host=settings_dict["HOST"] or "127.0.0.1",
        port=int(settings_dict["PORT"] or 3306),
        user=settings_dict["USER"],
        passwd=settings_dict["PASSWORD"] or "",
        db=settings_dict["NAME"],
        charset=options.get("charset", "utf8mb4"),
        init_command=options.get("init_command", ""),
        connect_timeout=int(options.get("connect_timeout", 5)),
        autocommit=autocommit,
    )
    level = options.get("isolation_level")
    if level:
        conn.cursor().execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {level.upper()}")
    return conn


class RawStore:
    """The store's reads and writes, by hand."""

    def __init__(self, databases: dict[str, dict[str, Any]]) -> None:
        settings = conf.get()
        self.buckets = settings.buckets
        self.bucket_aliases = settings.bucket_aliases
        self.codec = settings.codec
        self.entity_conns = {alias: connect(databases[alias]) for alias in settings.shards}
        self.index_conns = {alias: connect(databases[alias]) for alias in settings.shards}

    def close(self) -> None:
        for conn in (*self.entity_conns.values(), *self.index_conns.values()):
            conn.close()

    def alias_for(self, key: bytes) -> str:
        return self.bucket_aliases[bucket_hash.bucket_of(key, self.buckets)]

    def index_alias_for(self, user_key: bytes) -> str:
        # The store routes an index row by the canonical encoding of its shard_on *column*
        # value (``Index.routing_key``), so an encoded key is encoded once more.
        return self.alias_for(index_values.encode_key(user_key))

    # --- writes -------------------------------------------------------------------------------

    def put(self, properties: dict[str, Any]) -> bytes:
        """One new entity and its two index rows, in the order ``Entity.objects.create`` uses:
        the entity row inserted (uncommitted), the index rows committed on the index
        connection, then the entity committed."""
        entity_id = entity_ids.new_id()  # as the store generates ids
        body = self.codec.encode(properties)
        user_key = index_values.encode_key(properties["user_id"])
        conn = self.entity_conns[self.alias_for(entity_id)]
        cursor = conn.cursor()
        cursor.execute("BEGIN")
        cursor.execute(INSERT_ENTITY, (entity_id, _now(), body))
        index_cursor = self.index_conns[self.index_alias_for(user_key)].cursor()
        index_cursor.execute(INSERT_USER, (user_key, entity_id))
        index_cursor.execute(INSERT_USER_PUBLISHED, (user_key, properties["published"], entity_id))
        conn.commit()
        return entity_id

    def put_batch(self, batch: list[dict[str, Any]], lock: bool = False) -> None:
        """New entities in batches: per entity shard one transaction, entities with one
        ``executemany``, index rows with one ``executemany`` per (index, shard), then commit.

        ``lock=True`` adds the ``SELECT ... FOR UPDATE`` of the batch's ids that ``bulk_put``
        issues first (it is an upsert): then the statements are exactly the store's.
        """
        by_alias: dict[str, list[tuple[bytes, dict[str, Any]]]] = defaultdict(list)
        for properties in batch:
            entity_id = entity_ids.new_id()  # as the store generates ids
            by_alias[self.alias_for(entity_id)].append((entity_id, properties))
        now = _now()
        for alias, items in by_alias.items():
            users: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
            published: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
            rows = []
            for entity_id, properties in items:
                user_key = index_values.encode_key(properties["user_id"])
                index_alias = self.index_alias_for(user_key)
                users[index_alias].append((user_key, entity_id))
                published[index_alias].append((user_key, properties["published"], entity_id))
                rows.append((entity_id, now, self.codec.encode(properties)))
            conn = self.entity_conns[alias]
            cursor = conn.cursor()
            cursor.execute("BEGIN")
            if lock:
                marks = ", ".join(["%s"] * len(rows))
                cursor.execute(
                    f"SELECT id, added_id, body FROM entities WHERE id IN ({marks}) FOR UPDATE",
                    [row[0] for row in rows],
                )
                cursor.fetchall()
            cursor.executemany(INSERT_ENTITY, rows)
            for index_alias, values in users.items():
                self.index_conns[index_alias].cursor().executemany(INSERT_USER, values)
            for index_alias, values in published.items():
                self.index_conns[index_alias].cursor().executemany(INSERT_USER_PUBLISHED, values)
            conn.commit()

    # --- reads --------------------------------------------------------------------------------

    def get(self, entity_id: bytes) -> dict[str, Any] | None:
        cursor = self.entity_conns[self.alias_for(entity_id)].cursor()
        cursor.execute(f"SELECT {ENTITY_COLUMNS} FROM entities WHERE id = %s", (entity_id,))
        row = cursor.fetchone()
        return None if row is None else decode_body(row[3])

    def get_many(self, ids: list[bytes]) -> dict[bytes, dict[str, Any]]:
        """Entities by id, one ``IN`` query per shard, decoded."""
        by_alias: dict[str, list[bytes]] = defaultdict(list)
        for entity_id in ids:
            by_alias[self.alias_for(entity_id)].append(entity_id)
        found = {}
        for alias, alias_ids in by_alias.items():
            cursor = self.entity_conns[alias].cursor()
            marks = ", ".join(["%s"] * len(alias_ids))
            cursor.execute(
                f"SELECT {ENTITY_COLUMNS} FROM entities WHERE id IN ({marks})", alias_ids
            )
            for _added_id, row_id, _updated, body in cursor.fetchall():
                found[row_id] = decode_body(body)
        return found

    def page(self, user: int, size: int = 30) -> list[dict[str, Any]]:
        """The ``size`` newest entities of a user: index rows, entities, decode, re-check."""
        user_key = index_values.encode_key(user)
        cursor = self.index_conns[self.index_alias_for(user_key)].cursor()
        cursor.execute(PAGE, (user_key, size))
        rows = cursor.fetchall()
        found = self.get_many([row[2] for row in rows])
        out = []
        for _user, published, entity_id in rows:
            properties = found.get(entity_id)
            if (
                properties is not None
                and properties.get("user_id") == user
                and properties.get("published") == published
            ):
                out.append(properties)
        return out

    def all_of_user(self, user: int) -> list[dict[str, Any]]:
        """Every entity of a user (~100): index rows, entities, decode, re-check."""
        user_key = index_values.encode_key(user)
        cursor = self.index_conns[self.index_alias_for(user_key)].cursor()
        cursor.execute(ALL_OF_USER, (user_key,))
        rows = cursor.fetchall()
        found = self.get_many([row[1] for row in rows])
        return [
            properties
            for _user, entity_id in rows
            if (properties := found.get(entity_id)) is not None
            and properties.get("user_id") == user
        ]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
