"""The YCSB contenders, one class each, as a worker process drives them (:mod:`.worker`):

- ``store``: the store, no entity cache; a record is an entity with properties ``ns`` (the
  contender's namespace), ``ykey`` (the YCSB key) and ``field0``..``field9``, its id derived
  from the key (an insert with a given id); a scan reads ``index_ycsb_key`` (``ns``, ``ykey``;
  sharded on ``ns``: one index statement) then the entities;
- ``store_near``: the same with the Redis entity cache and the near cache on (another
  namespace: its own records);
- ``store_redis``: the same with the Redis entity cache only (optional);
- ``store_history``: the store with ``HISTORY`` on (what the demo's settings turn on);
- ``raw``: a table with the key and ten ``VARCHAR(100)`` columns (an update sets one column);
- ``json``: a table with the key and one ``JSON`` column (an update is ``JSON_SET`` of one
  path), the column every user of MariaDB could pick instead.

The two tables live on the bench's two servers (``json`` on the first, ``raw`` on the second);
the store's shards are on both. Every contender's connections autocommit, as YCSB's JDBC
binding does by default.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from typing import Any

from .workloads import FIELDS, Op, field_value, key_name

FIELD_NAMES = [f"field{i}" for i in range(FIELDS)]
RAW_TABLE = "usertable"
JSON_TABLE = "usertable_json"
CREATE_RAW = (
    f"CREATE TABLE IF NOT EXISTS {RAW_TABLE} (ykey VARCHAR(64) NOT NULL PRIMARY KEY, "
    + ", ".join(f"{name} VARCHAR(100) NOT NULL" for name in FIELD_NAMES)
    + ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
)
CREATE_JSON = (
    f"CREATE TABLE IF NOT EXISTS {JSON_TABLE} (ykey VARCHAR(64) NOT NULL PRIMARY KEY, "
    "doc JSON NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
)
NAMESPACES = {"store": "s", "store_near": "n", "store_redis": "r", "store_history": "h"}


VALUES = 512  # random field values made at start: making them is not the operation's cost


class Client:
    """One contender's operations on one key."""

    def __init__(self) -> None:
        self.rng = random.Random(11)
        self.values = [field_value(self.rng) for _ in range(VALUES)]

    def value(self) -> str:
        return self.values[self.rng.randrange(VALUES)]

    def record(self) -> dict[str, str]:
        return {name: self.value() for name in FIELD_NAMES}

    def do(self, op: Op) -> None:
        kind, keynum, field, length = op
        key = key_name(keynum)
        if kind == "read":
            self.read(key)
        elif kind == "update":
            self.update(key, FIELD_NAMES[field], self.value())
        elif kind == "insert":
            self.insert(key, self.record())
        elif kind == "scan":
            self.scan(key, length)
        elif kind == "rmw":
            self.rmw(key, FIELD_NAMES[field], self.value())
        else:
            raise ValueError(f"unknown YCSB operation {kind!r}")

    def read(self, key: str) -> dict[str, Any]:
        raise NotImplementedError

    def update(self, key: str, field: str, value: str) -> None:
        raise NotImplementedError

    def insert(self, key: str, fields: dict[str, str]) -> None:
        raise NotImplementedError

    def scan(self, key: str, length: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def rmw(self, key: str, field: str, value: str) -> None:
        self.read(key)
        self.update(key, field, value)

    def close(self) -> None:
        pass


class StoreClient(Client):
    def __init__(self, namespace: str) -> None:
        super().__init__()
        from schemaless_store.models import Entity

        self.Entity = Entity
        self.ns = namespace

    def entity_id(self, key: str) -> uuid.UUID:
        return uuid.UUID(bytes=hashlib.md5(f"{self.ns}:{key}".encode()).digest())

    def read(self, key: str) -> dict[str, Any]:
        entity = self.Entity.objects.get(id=self.entity_id(key))
        return {name: entity[name] for name in FIELD_NAMES}

    def update(self, key: str, field: str, value: str) -> None:
        # YCSB's update writes a field without reading the record: the store's partial update
        # (no get first; with JSON bodies the server sets the field, else the shard reads and
        # rewrites the body under its row lock).
        self.Entity.objects.filter(id=self.entity_id(key)).update(**{field: value})

    def rmw(self, key: str, field: str, value: str) -> None:
        entity = self.Entity.objects.get(id=self.entity_id(key))
        {name: entity[name] for name in FIELD_NAMES}
        entity[field] = value
        entity.save(update_fields=[field])  # writes the field it changed, as YCSB's does

    def insert(self, key: str, fields: dict[str, str]) -> None:
        self.Entity.objects.create(id=self.entity_id(key), ns=self.ns, ykey=key, **fields)

    def scan(self, key: str, length: int) -> list[dict[str, Any]]:
        query = self.Entity.objects.filter_index(ns=self.ns, ykey__gte=key).order_by("ykey")
        return [{name: e[name] for name in FIELD_NAMES} for e in query[:length]]


class SqlClient(Client):
    def __init__(self, settings_dict: dict[str, Any]) -> None:
        super().__init__()
        from ..raw import connect

        self.conn = connect(settings_dict, autocommit=True)
        self.cursor = self.conn.cursor()

    def close(self) -> None:
        self.conn.close()


class RawClient(SqlClient):
    def read(self, key: str) -> dict[str, Any]:
        columns = ", ".join(FIELD_NAMES)
        self.cursor.execute(f"SELECT {columns} FROM {RAW_TABLE} WHERE ykey = %s", (key,))
        return dict(zip(FIELD_NAMES, self.cursor.fetchone(), strict=True))

    def update(self, key: str, field: str, value: str) -> None:
        assert field in FIELD_NAMES  # an identifier: never from input
        self.cursor.execute(f"UPDATE {RAW_TABLE} SET {field} = %s WHERE ykey = %s", (value, key))

    def insert(self, key: str, fields: dict[str, str]) -> None:
        marks = ", ".join(["%s"] * (FIELDS + 1))
        self.cursor.execute(
            f"INSERT INTO {RAW_TABLE} (ykey, {', '.join(FIELD_NAMES)}) VALUES ({marks})",
            (key, *(fields[name] for name in FIELD_NAMES)),
        )

    def scan(self, key: str, length: int) -> list[dict[str, Any]]:
        self.cursor.execute(
            f"SELECT {', '.join(FIELD_NAMES)} FROM {RAW_TABLE} WHERE ykey >= %s "
            "ORDER BY ykey LIMIT %s",
            (key, length),
        )
        return [dict(zip(FIELD_NAMES, row, strict=True)) for row in self.cursor.fetchall()]


class JsonClient(SqlClient):
    def read(self, key: str) -> dict[str, Any]:
        self.cursor.execute(f"SELECT doc FROM {JSON_TABLE} WHERE ykey = %s", (key,))
        return json.loads(self.cursor.fetchone()[0])

    def update(self, key: str, field: str, value: str) -> None:
        assert field in FIELD_NAMES
        self.cursor.execute(
            f"UPDATE {JSON_TABLE} SET doc = JSON_SET(doc, %s, %s) WHERE ykey = %s",
            (f"$.{field}", value, key),
        )

    def insert(self, key: str, fields: dict[str, str]) -> None:
        self.cursor.execute(
            f"INSERT INTO {JSON_TABLE} (ykey, doc) VALUES (%s, %s)", (key, json.dumps(fields))
        )

    def scan(self, key: str, length: int) -> list[dict[str, Any]]:
        self.cursor.execute(
            f"SELECT doc FROM {JSON_TABLE} WHERE ykey >= %s ORDER BY ykey LIMIT %s", (key, length)
        )
        return [json.loads(doc) for (doc,) in self.cursor.fetchall()]
