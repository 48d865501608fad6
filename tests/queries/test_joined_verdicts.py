"""A server's verdict on an index row holds for the copy of the entity the scan joined to it,
not for one read later (review of issue 45, item 4's change). An entity with two index rows
in a chunk (a stale one and its current one) takes the joined copy for the first; the second
must not fetch it again and apply the first copy's verdict to what the fetch returns. No
database is touched: the scan's rows and verdicts are stubbed, as ``ShardScan`` leaves them
for an entity that lives on the scan's own shard."""

from __future__ import annotations

from typing import Any

import pytest

from schemaless_store.query import indexquery

E = b"E" * 16


class Entity:
    def __init__(self, **props: Any) -> None:
        self.props = props

    def body_properties(self) -> dict[str, Any]:
        return self.props


JOINED = Entity(g="x", v=2)  # what the scan joined and the server judged
NEWER = Entity(g="x", v=-5)  # written after the scan, before any later fetch


class Fetcher:
    join_entities = True

    def __init__(self) -> None:
        self.asked: list[bytes] = []

    def fetch(self, ids: list[bytes]) -> dict[bytes, Any]:
        self.asked += ids
        return {i: NEWER for i in ids}


class Index:
    properties = ("g", "v")

    def implies(self, props: dict[str, Any], row: tuple[Any, ...], memo: Any) -> bool:
        return props.get("g") == row[0] and props.get("v") == row[1]


class Bound:
    def meets(self, row: tuple[Any, ...]) -> bool:
        return row[1] >= 0


class Query:
    index, bound, descending = Index(), Bound(), False

    def __init__(self) -> None:
        self.fetcher = Fetcher()

    def _batch_size(self) -> int:
        return 10

    def _index_rows(self, batch: int, after: Any, joined: dict, verdicts: dict) -> Any:
        joined[E] = JOINED
        verdicts[("x", 1, E)] = False  # the stale row, refuted
        verdicts[("x", 2, E)] = True  # the current one, proven on JOINED
        return iter([((1,), ("x", 1, E)), ((2,), ("x", 2, E))])


def test_a_proven_row_answers_the_copy_it_was_proven_on(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(indexquery, "server_checks", lambda query: True)
    query = Query()
    found = [entity for _key, entity in indexquery.IndexQuery._matching_keyed(query)]
    assert found == [JOINED]
    assert query.fetcher.asked == []  # the joined copy was not read again
