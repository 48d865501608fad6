"""The single-server peer: MariaDB's own answer to "index a property of a JSON document".

One table on one server holds every entity with a JSON body; virtual generated columns expose
``user_id``, ``published`` and ``link``, and a secondary index on ``(user_id, published)`` serves
a user's page in one SQL query. Its rows are the store's rows (see :mod:`bench.data`), generated
server-side.
"""

from __future__ import annotations

import json
from typing import Any

from .data import Stage

TABLE = "json_entities"
CREATE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
  added_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  id BINARY(16) NOT NULL,
  updated DATETIME(6) NOT NULL,
  body JSON NOT NULL,
  user_id BIGINT AS (JSON_VALUE(body, '$.user_id')) VIRTUAL,
  published BIGINT AS (JSON_VALUE(body, '$.published')) VIRTUAL,
  link VARCHAR(255) AS (JSON_VALUE(body, '$.link')) VIRTUAL,
  UNIQUE KEY json_entities_id (id),
  KEY json_entities_user_published (user_id, published)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""
# Rows per server-side INSERT ... SELECT while loading: short transactions, flat memory.
LOAD_CHUNK = 50_000

PAGE = (
    f"SELECT added_id, id, updated, body FROM {TABLE} WHERE user_id = %s "
    "ORDER BY published DESC LIMIT %s"
)
ALL_OF_USER = f"SELECT added_id, id, updated, body FROM {TABLE} WHERE user_id = %s"


def create(conn: Any) -> None:
    conn.cursor().execute(CREATE)


def load(conn: Any, stage: Stage) -> None:
    """Insert the stage's entities, computed by the server, in chunks of :data:`LOAD_CHUNK`."""
    cursor = conn.cursor()
    for lo in range(stage.lo, stage.hi, LOAD_CHUNK):
        hi = min(stage.hi, lo + LOAD_CHUNK)
        cursor.execute(f"INSERT INTO {TABLE} (id, updated, body) {stage.sql_select(lo, hi)}")
        conn.commit()


class Peer:
    """Queries on the peer's table over one mysqlclient connection, JSON decoded."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _rows(self, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        cursor = self.conn.cursor()
        cursor.execute(sql, args)
        return [json.loads(body) for _added_id, _id, _updated, body in cursor.fetchall()]

    def page(self, user: int, size: int = 30) -> list[dict[str, Any]]:
        return self._rows(PAGE, (user, size))

    def all_of_user(self, user: int) -> list[dict[str, Any]]:
        return self._rows(ALL_OF_USER, (user,))
