"""The re-check on the server (issue 45, item 4; docs/design.md, "Re-check on the server").

Where the store writes JSON bodies on MariaDB, a query's re-check (the entity implies the index
row that found it) runs in the page's statements: the server proves a row (Python then does not
decode the body to check it), refutes it (the entity is not sent), or leaves it to Python.

Proven on generated data (hypothesis, MariaDB):

- every verdict the server gives, on every pair of a generated index row and a generated body
  (JSON, or MessagePack as in a store mid-``rewritebodies``), is the one Python's
  ``Index.implies`` gives, for every column type; values chosen where SQL and Python are
  known to part (case, accents composed or not, NUL, ints against floats, 2**53 and beyond,
  -0.0, bools against ints, null against missing, lists, tagged values);
- pages with the server's re-check are the pages of Python's re-check, entity for entity and
  cursor for cursor, with entities changed behind the index (stale rows), some of their bodies
  left in MessagePack, placed (joined to a pinned scan) and not.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from schemaless_store.config.indexes import Index
from schemaless_store.exceptions import IndexValueError
from schemaless_store.models import Entity
from schemaless_store.query import cursors, servercheck
from schemaless_store.tables import index_rows, rechecks
from schemaless_store.topology import shards
from schemaless_store.values import entity_ids
from schemaless_store.values.codec import JsonCodec, MsgpackCodec, decode_body
from schemaless_store.values.index_values import COLUMN_TYPES
from tests.support import STORE
from tests.support.child import declared
from tests.support.queries import wipe
from tests.support.rechecks import judged

JSON = override_settings(
    SCHEMALESS={"BUCKETS": 4096, "CODEC": "schemaless_store.values.codec.JsonCodec"}
)
MSGPACK = override_settings(
    SCHEMALESS={"BUCKETS": 4096, "CODEC": "schemaless_store.values.codec.MsgpackCodec"}
)
UTC, EAST = dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30))

# Values where SQL and Python are known to part, shared by bodies and rows so they meet.
POOL: list[Any] = [
    "a", "A", "b", "é", "e\u0301", "ß", "SS", "ss", "", " ", "a ", "\x00", "\n", '"', "\\",
    "😀", "\u2028", "1", "true", "null",
    0, 1, -1, 2, 2**53 - 1, 2**53, -(2**53), 2**63 - 1, 2**63, -(2**63), 2**64 - 1,
    0.0, -0.0, 1.0, 1.5, -2.0, 2.0, 2.0**53, 1e300, float("inf"), float("nan"), 0.1 + 0.2,
    True, False, None,
    b"", b"a", b"\x00\xff",
    uuid.UUID(int=1), uuid.UUID(int=2),
    dt.datetime(2009, 2, 26, 1, tzinfo=UTC), dt.datetime(2009, 2, 26, 6, 30, tzinfo=EAST),
    {"a": 1}, {"$uuid": "x"}, {1: "a"},
]  # fmt: skip
scalars = st.one_of(
    st.sampled_from(POOL),
    st.text(alphabet="aAéß\x00😀", max_size=3),
    st.integers(-3, 3),
    st.floats(-3, 3),
)
values = st.one_of(scalars, st.lists(scalars, max_size=3))
# Values of each column type's own type, so that rows and bodies of that type meet often.
OWN: dict[str, list[Any]] = {
    "key": [True, 1, "a", "A", 1.0, None, *POOL],
    "int": [0, 1, 2, 2**53, 2**63 - 1, -(2**63), True],
    "float": [0, 1, 1.0, 1.5, -0.0, 2**53, 2**53 + 1, 0.1 + 0.2, 0.30000000000000004],
    "str": ["a", "A", "é", "e\u0301", "\x00", "😀", ""],
    "bytes": [b"", b"a", b"A", b"\x00\xff"],
    "uuid": [uuid.UUID(int=1), uuid.UUID(int=2)],
    "datetime": [
        dt.datetime(2009, 2, 26, 1, tzinfo=UTC),
        dt.datetime(2009, 2, 26, 6, 30, tzinfo=EAST),  # the same instant
        dt.datetime(2009, 2, 26, 1, 0, 0, 1, tzinfo=UTC),
    ],
}


def bags_of(column_type: str) -> st.SearchStrategy:
    own = st.sampled_from(OWN[column_type])
    few = st.sampled_from(OWN[column_type][:3])  # a body and a row alike but for one property
    return st.fixed_dictionaries(
        {"g": st.sampled_from(["x", "X", "y"])},
        optional={
            "v": st.one_of(few, own, values, st.lists(own, max_size=3)),
            "kind": st.sampled_from(["post", "Post", 1, ["post"]]),
        },
    )


TYPES = [name for name in COLUMN_TYPES if name != "decimal"]
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def rows_of(index: Index, bag: dict[str, Any]) -> set[tuple[Any, ...]]:
    try:
        return index.rows_for(bag)
    except IndexValueError:
        return set()


# --- which indexes the server re-checks (any backend) -----------------------------------------


def test_plain_indexes_are_those_of_column_types_the_server_compares():
    for name in TYPES:
        assert rechecks.plain(Index("t", ["g", "v"], "g", types={"v": name})), name
    assert not rechecks.plain(Index("t", ["g", "v"], "g", types={"v": "decimal"}))
    assert rechecks.implies_sql(Index("t", ["v"], "v", types={"v": "decimal"}), "i", str) is None


@pytest.mark.django_db(databases="__all__")
def test_the_server_rechecks_only_json_bodies_on_mariadb(backend):
    query = Entity.objects.filter_index(user_id=b"u", published=3)
    with MSGPACK:  # nothing the server reads (whatever SCHEMALESS_TEST_CODEC is)
        assert not servercheck.server_checks(query)
    with JSON:
        assert servercheck.server_checks(query) is (backend == "mariadb")


# --- every verdict is Python's (MariaDB) -------------------------------------------------------


def verdicts(index: Index, alias: str, pairs: list[tuple[Any, ...]]) -> list[bool | None]:
    """The server's verdict on each (row, entity) pair: True, False (left out), None."""
    got: dict[int, bool | None] = {}
    for _a, _i, _u, _b, place, verdict in judged(alias, index, pairs, connections[alias]):
        got[place] = None if verdict is None else bool(verdict)
    return [got.get(n, False) for n in range(len(pairs))]


@pytest.mark.mariadb_only
@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.parametrize("column_type", TYPES)
@SETTINGS
@given(data=st.data(), kind=st.sampled_from([None, "post"]))
def test_every_server_verdict_is_pythons(column_type, data, kind):
    bags = bags_of(column_type)
    bodies = data.draw(st.lists(st.tuples(bags, st.booleans()), min_size=1, max_size=6), "bodies")
    extra = data.draw(st.lists(bags, max_size=6), "extra rows")
    index = Index("t", ["g", "v"], "g", types={"v": column_type}, kind=kind)
    alias = shards.shard_aliases()[0]
    stored = {}
    with connections[alias].cursor() as cursor:
        cursor.execute("DELETE FROM entities")
        for bag, as_json in bodies:
            body = (JsonCodec() if as_json else MsgpackCodec()).encode(bag)
            key = entity_ids.new_id()
            cursor.execute(
                "INSERT INTO entities (id, updated, body) VALUES (%s, NOW(6), %s)", (key, body)
            )
            stored[key] = body
    # The rows of the bodies, of the other bags, and of each body as if of the index's kind
    # (a body of another kind, "Post" for "post", meets a row of its own values).
    rows = set().union(
        *(rows_of(index, bag) for bag, _j in bodies),
        *map(extra_rows(index), extra + [bag for bag, _j in bodies]),
    )
    pairs = [(*row, key) for row in sorted(rows, key=repr) for key in stored]
    if not pairs:
        return
    for pair, verdict in zip(pairs, verdicts(index, alias, pairs), strict=True):
        python = index.implies(decode_body(stored[pair[-1]]), pair[:-1])
        note(f"{pair!r}: server {verdict}, Python {python}")
        if verdict is not None:
            assert verdict == python, (pair, decode_body(stored[pair[-1]]))
        else:
            # Undecided only where the docs say: a body not JSON, a list, a float, a tag.
            assert stored[pair[-1]][0] != 0x03 or not plain_value(
                decode_body(stored[pair[-1]]).get("v")
            ), pair


def extra_rows(index: Index) -> Any:
    return lambda bag: rows_of(index, {**bag, "kind": index.kind} if index.kind else bag)


def plain_value(value: Any) -> bool:
    """A value whose verdict the server gives (module docs of tables/rechecks.py)."""
    return (
        value is None
        or type(value) in (str, bool)
        or (type(value) is int and abs(value) <= 2**53 - 1)
    )


# --- pages are Python's pages (MariaDB) --------------------------------------------------------


@pytest.fixture
def rc_indexes():
    """(g, v) pinned on g (its placed entities join the scan), and n alone (an int column,
    sharded on n: a range reads every shard)."""
    pinned = Index("index_rc_g_v", ["g", "v"], "g")
    scatter = Index("index_rc_n", ["n"], "n", types={"n": "int"})
    with JSON, declared(pinned), declared(scatter):
        yield pinned, scatter


def pages(qs: Any, size: int) -> list[tuple[list[uuid.UUID], Any]]:
    """Each page's ids and its cursor's key (a cursor's text carries the time it was signed)."""
    found, cursor = [], None
    while True:
        page = qs.page(after=cursor, size=size)
        key = page.next_cursor and cursors.decode(
            page.next_cursor, qs._fingerprint(), len(qs.bound.sort_positions)
        )
        found.append(([e.id for e in page], key))
        if not page.has_next or len(found) > 60:
            return found
        cursor = page.next_cursor


def change_behind_the_index(entity: Entity, bag: dict[str, Any], as_json: bool) -> None:
    """Give an entity another body without touching its index rows (as a crash between a
    write's steps would, or a store mid-``rewritebodies`` for a MessagePack body)."""
    body = (JsonCodec() if as_json else MsgpackCodec()).encode(bag)
    alias = entity._state.db
    with connections[alias].cursor() as cursor:
        cursor.execute("UPDATE entities SET body = %s WHERE id = %s", (body, entity.id.bytes))


pinned_values = st.one_of(
    st.sampled_from([*POOL[:20], 0, 1, 2, 3, 1.0, True, None]), st.integers(0, 4)
)
int_values = st.integers(0, 6)


@pytest.mark.mariadb_only
@STORE
@SETTINGS
@given(
    stored=st.lists(
        st.tuples(st.sampled_from(["x", "y"]), pinned_values, int_values, st.booleans()),
        min_size=1,
        max_size=14,
    ),
    changed=st.lists(
        st.tuples(
            st.integers(0, 13),
            st.fixed_dictionaries(
                {}, optional={"g": st.sampled_from(["x", "y"]), "v": values, "n": values}
            ),
            st.booleans(),
        ),
        max_size=6,
    ),
    query=st.one_of(
        st.tuples(
            st.just("pinned"),
            st.sampled_from(["x", "y"]),
            st.sampled_from(
                [
                    {"v__gte": None},
                    {"v__gte": "a"},
                    {"v__lt": 2},
                    {"v__in": ["a", "A", 1, 1.0, None]},
                ]
            ),
        ),
        st.tuples(
            st.just("scatter"),
            st.none(),
            st.sampled_from([{"n__gte": 0}, {"n__lt": 4}, {"n__in": [1, 2, 5]}, {"n": 3}]),
        ),
    ),
    order=st.sampled_from([None, "v", "-v"]),
    size=st.integers(1, 4),
)
def test_pages_are_the_pages_of_the_python_recheck(
    rc_indexes, monkeypatch, stored, changed, query, order, size
):
    wipe()
    family, group, conditions = query
    made: list[Entity] = []
    for g, v, n, placed in stored:
        bag = {"g": g, "v": v, "n": n}
        made += Entity.objects.bulk_put([bag], placed_with="g" if placed else None)
    for n, bag, as_json in changed:
        if n < len(made):
            change_behind_the_index(made[n], bag, as_json)
    qs = Entity.objects.filter_index(**({"g": group} if group else {}), **conditions)
    if order is not None:
        qs = qs.order_by(order if family == "pinned" else order.replace("v", "n"))
    assert servercheck.server_checks(qs)
    on_server = pages(qs, size)
    with monkeypatch.context() as patched:
        patched.setattr("schemaless_store.query.indexquery.server_checks", lambda q: False)
        in_python = pages(qs, size)
    assert on_server == in_python


# --- what the server's check saves, and what it leaves to Python (MariaDB) ---------------------


@pytest.fixture
def built(monkeypatch):
    """The ids of the entities the read path builds from rows (sent by the server)."""
    ids: list[bytes] = []
    original = Entity.row_builder.__func__

    def row_builder(cls):
        build = original(cls)

        def counted(alias, added_id, key, updated, body):
            ids.append(bytes(key))
            return build(alias, added_id, key, updated, body)

        return counted

    monkeypatch.setattr(Entity, "row_builder", classmethod(row_builder))
    return ids


@pytest.mark.mariadb_only
@STORE
def test_a_refuted_entity_is_never_sent_and_a_proven_one_never_decoded(rc_indexes, built):
    """Placed entities: the pinned scan joins them, and the server judges each."""
    made = Entity.objects.bulk_put([{"g": "x", "v": n} for n in range(6)], placed_with="g")
    stale, old_format = made[1], made[2]
    change_behind_the_index(stale, {"g": "x", "v": 100}, as_json=True)
    change_behind_the_index(old_format, {"g": "x", "v": 100}, as_json=False)
    built.clear()
    page = Entity.objects.filter_index(g="x", v__gte=0).order_by("v").page(size=10)
    want = [made[n].id for n in (0, 3, 4, 5)]
    assert [e.id for e in page] == want
    assert stale.id.bytes not in built  # refuted by the server: not sent
    assert old_format.id.bytes in built  # MessagePack: the server cannot tell, Python did
    assert all(e._props is None for e in page)  # proven: the check decoded nothing
    assert [e["v"] for e in page] == [0, 3, 4, 5]


@pytest.mark.mariadb_only
@STORE
def test_entities_the_scan_does_not_join_are_fetched_by_id_and_rechecked_in_python(
    rc_indexes, built
):
    """Hashed entities live on their ids' shards: fetched by id (one ``IN`` per shard) and
    re-checked in Python, which measured cheaper than the server's check of a fetched batch
    (docs/performance.md#re-check-on-the-server-issue-45-item-4). Same page."""
    pinned, _scatter = rc_indexes
    home = index_rows.home(pinned, [pinned.column_value("g", "x")])
    made: list[Entity] = []
    while len([e for e in made if e.shard != home]) < 2:  # hashed ids: some land elsewhere
        made += Entity.objects.bulk_put([{"g": "x", "v": len(made) + n} for n in range(6)])
    away = [e for e in made if e.shard != home]  # not joined: the index rows' shard is home
    stale = away[0]
    change_behind_the_index(stale, {"g": "x", "v": 100}, as_json=True)
    built.clear()
    page = Entity.objects.filter_index(g="x", v__gte=0).order_by("v").page(size=len(made))
    assert [e.id for e in page] == [e.id for e in made if e is not stale]
    assert stale.id.bytes in built  # sent and built; Python's re-check dropped it
    decoded = {e.id: e._props is not None for e in page}
    assert all(decoded[e.id] for e in away[1:])  # each decoded to be re-checked
    assert [e["v"] for e in page] == [e["v"] for e in made if e is not stale]


@pytest.mark.mariadb_only
@STORE
def test_without_the_server_every_entity_is_sent_and_decoded(rc_indexes, built, monkeypatch):
    """The same page with the server's check off: the refuted entity is sent and built (the
    counter above counts what it should), and every answer was decoded to be checked."""
    monkeypatch.setattr("schemaless_store.query.indexquery.server_checks", lambda q: False)
    made = Entity.objects.bulk_put([{"g": "x", "v": n} for n in range(6)], placed_with="g")
    change_behind_the_index(made[1], {"g": "x", "v": 100}, as_json=True)
    built.clear()
    page = Entity.objects.filter_index(g="x", v__gte=0).order_by("v").page(size=10)
    assert len(page) == 5
    assert made[1].id.bytes in built
    assert all(e._props is not None for e in page)
