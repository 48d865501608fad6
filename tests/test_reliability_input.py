"""Hostile and bad input (issue 8): what users, operators and attackers can hand the store.

Four classes, each recorded with ``tests.reliability_report.record``:

- **Codec fuzz**: random property bags of every supported type go through the store (create,
  then replace) and read back equal; their indexed values find them, old values no longer do.
  Unsupported values, wherever they sit in a bag, raise ``UnsupportedValue`` and write nothing.
- **Corrupt bodies**: bytes written straight into ``entities.body``. Reading the entity raises
  ``CorruptBody`` naming it; the admin's list and detail pages still render and show the
  problem; ``runcleaner --once`` reports and skips it and repairs every other entity.
- **SQL injection**: one test per entry point that takes a name or a value from outside;
  each is refused with a clear error or passed as a parameter, and the shards' tables hold the
  same rows afterwards.
- **Unicode and sizes**: 4-byte characters in values and indexed strings, 1 MB values, index
  values at and past their column's length, empty strings, ``None``, nesting at and past
  ``codec.MAX_NESTING``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import os
import random
import uuid
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from django.core import signing
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemaless_store import Index, checks, feed, shards
from schemaless_store.codec import FORMAT_MSGPACK, FORMAT_MSGPACK_ZLIB, MAX_NESTING, MsgpackCodec
from schemaless_store.exceptions import (
    BodyTooLarge,
    ConfigurationError,
    CorruptBody,
    IndexValueError,
    IndexValueTooLong,
    InvalidCursor,
    InvalidQuery,
    NoIndexForQuery,
    UnsupportedValue,
)
from schemaless_store.indexes import registry
from schemaless_store.models import Cell, Entity
from schemaless_store.query import CURSOR_SALT, _CursorSerializer
from tests.conftest import STORE
from tests.reliability_report import record
from tests.test_admin import VIEW, client_for
from tests.test_codec import same
from tests.test_unique import ids_on

pytestmark = [STORE, pytest.mark.reliability]

FUZZ_EXAMPLES = int(os.environ.get("SCHEMALESS_RELIABILITY_FUZZ", "100"))
LIST = "/admin/schemaless_store/entity/"
INDEXED = frozenset({"id"} | {p for index in registry.all() for p in index.properties})
INJECTIONS = [
    "x`; DROP TABLE entities; --",
    "x'; DROP TABLE entities; --",
    'x"; DROP TABLE entities; --',
    "x); DROP TABLE entities; --",
    "x\\'; DELETE FROM entities; --",
    "1 OR 1=1",
    "x' OR '1'='1",
    "index_link; DROP TABLE entities",
]


# --- looking at the shards without the store -----------------------------------------------


def store_tables() -> list[str]:
    return ["entities", "cell", "cell_head", *(index.name for index in registry.valid())]


def snapshot() -> dict[tuple[str, str], list[tuple]]:
    """Every row of ``entities`` and of every index table, per shard, plus the table lists."""
    out: dict[tuple[str, str], list[tuple]] = {}
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            names = sorted(conn.introspection.table_names(cursor))
            out[(alias, "<tables>")] = [(name,) for name in names]
            for table in store_tables():
                cursor.execute(f"SELECT * FROM {conn.ops.quote_name(table)}")
                out[(alias, table)] = sorted(
                    tuple(bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row)
                    for row in cursor.fetchall()
                )
    out[("default", "<tables>")] = [
        (n,) for n in sorted(connections["default"].introspection.table_names())
    ]
    return out


def assert_unchanged(before: dict, what: str) -> None:
    after = snapshot()
    for table in store_tables():
        for alias in shards.shard_aliases():
            assert (alias, table) in after, f"{what}: table {table} on {alias} is gone"
    changed = sorted(
        key for key in before.keys() | after.keys() if before.get(key) != after.get(key)
    )
    assert not changed, f"{what} changed {changed}"


def raw_entities(skip: bytes | None = None) -> dict[bytes, dict[str, Any]]:
    from schemaless_store.codec import decode_body

    found = {}
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT id, body FROM entities")
            for entity_id, body in cursor.fetchall():
                if bytes(entity_id) != skip:
                    found[bytes(entity_id)] = decode_body(bytes(body))
    return found


def rows_by_entity(skip: bytes | None = None) -> tuple[set, set]:
    """(implied, stored) index rows of every entity but ``skip``, with their shards."""
    implied, stored = set(), set()
    for index in registry.valid():
        for entity_id, props in raw_entities(skip).items():
            for values in index.rows_for(props):
                alias = shards.alias_for(index.routing_key(values[index.shard_position]))
                implied.add((index.name, alias, values, entity_id))
        for alias in shards.shard_aliases():
            conn = connections[alias]
            with conn.cursor() as cursor:
                cursor.execute(f"SELECT * FROM {conn.ops.quote_name(index.name)}")
                for row in cursor.fetchall():
                    row = tuple(
                        bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row
                    )
                    if row[-1] != skip:
                        stored.add((index.name, alias, row[:-1], row[-1]))
    return implied, stored


def rows_of(entity_id: bytes) -> set[tuple]:
    """The index rows (table, shard, row) of one entity, read raw."""
    out = set()
    for index in registry.valid():
        for alias in shards.shard_aliases():
            conn = connections[alias]
            with conn.cursor() as cursor:
                table = conn.ops.quote_name(index.name)
                cursor.execute(f"SELECT * FROM {table} WHERE entity_id = %s", [entity_id])
                for row in cursor.fetchall():
                    out.add(
                        (
                            index.name,
                            alias,
                            tuple(
                                bytes(v) if isinstance(v, bytearray | memoryview) else v
                                for v in row
                            ),
                        )
                    )
    return out


def found_ids(**conditions: Any) -> set[uuid.UUID]:
    return {e.id for e in Entity.objects.filter_index(**conditions)}


@pytest.fixture
def seeded() -> list[Entity]:
    """Twelve entities on both shards, each in every test index."""
    aliases = shards.shard_aliases()
    ids = [i for alias in aliases for i in ids_on(alias, 12 // len(aliases))]
    return Entity.objects.bulk_put(
        [
            {
                "id": entity_id,
                "user_id": n % 4,
                "link": f"https://example.com/{n}",
                "tags": [f"t{n % 3}", "all"],
                "published": 1_700_000_000 + n,
                "username": f"user-{n}",
                "title": f"post {n}",
            }
            for n, entity_id in enumerate(ids)
        ]
    )


# --- 1. codec fuzz through the store -------------------------------------------------------

timezones = (
    st.just(dt.UTC)
    | st.integers(-86_399, 86_399).map(lambda s: dt.timezone(dt.timedelta(seconds=s)))
    | st.timezones()
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["\N{GRINNING FACE}", "\U0001d11e clef", "👩‍👩‍👧", "\x00nul", ""])
    | st.binary(max_size=12)
    | st.uuids()
    | st.datetimes(timezones=timezones)
    # The ends of datetime's range, where the UTC instant of a valid local time can overflow.
    | st.tuples(
        st.sampled_from([dt.datetime.min, dt.datetime.max]), st.integers(-86_399, 86_399)
    ).map(lambda t: t[0].replace(tzinfo=dt.timezone(dt.timedelta(seconds=t[1]))))
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.text(max_size=10).filter(lambda n: n not in INDEXED)
key_values = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.text(max_size=16)
    | st.sampled_from(["\N{GRINNING FACE}", "\N{GRINNING FACE WITH SMILING EYES}", ""])
    | st.binary(max_size=16)
    | st.uuids()
)
indexed = st.fixed_dictionaries(
    {},
    optional={
        "user_id": key_values,
        "link": key_values,
        "tags": st.lists(st.text(max_size=8), max_size=3),
        "published": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    },
)
bags = st.tuples(st.dictionaries(names, values, max_size=5), indexed).map(
    lambda t: {**t[0], **t[1]}
)


def index_probes(bag: dict[str, Any]) -> list[dict[str, Any]]:
    """The queries that must find an entity with these properties."""
    probes = []
    if "user_id" in bag:
        probes.append({"user_id": bag["user_id"]})
        if "published" in bag:
            probes.append({"user_id": bag["user_id"], "published": bag["published"]})
    if "link" in bag:
        probes.append({"link": bag["link"]})
    probes.extend({"tags": tag} for tag in bag.get("tags", []))
    return probes


def test_fuzzed_property_bags_round_trip_through_the_store():
    counts = {"cases": 0, "lost": 0, "wrong": 0}
    failures: list[str] = []

    def check(entity_id: uuid.UUID, bag: dict[str, Any], old: dict[str, Any] | None) -> None:
        back = Entity.objects.get(id=entity_id).properties
        del back["id"]
        if not same(back, bag):
            counts["lost"] += 1
            failures.append(f"read back {back!r} for {bag!r}")
        for probe in index_probes(bag):
            if entity_id not in found_ids(**probe):
                counts["wrong"] += 1
                failures.append(f"{probe!r} does not find {bag!r}")
        for probe in index_probes(old or {}):
            if probe not in index_probes(bag) and entity_id in found_ids(**probe):
                counts["wrong"] += 1
                failures.append(f"{probe!r} still finds the entity after it became {bag!r}")

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(first=bags, second=bags)
    def run(first: dict[str, Any], second: dict[str, Any]) -> None:
        entity = Entity.objects.create(**first)
        check(entity.id, first, None)
        Entity(id=entity.id, **second).save()  # replace the whole bag
        check(entity.id, second, first)
        counts["cases"] += 1

    run()
    implied, stored = rows_by_entity()
    if implied != stored:
        counts["wrong"] += 1
        failures.append(f"index rows differ: missing {implied - stored}, extra {stored - implied}")
    record(
        "Codec fuzz: random bags put, replaced, read and queried",
        counts["cases"],
        counts["lost"],
        counts["wrong"],
    )
    assert not failures, failures[:5]


class Opaque:
    pass


UNSUPPORTED: dict[str, Callable[[], Any]] = {
    "set": lambda: {1, 2},
    "frozenset": lambda: frozenset({"a"}),
    "tuple": lambda: (1, 2),
    "object": Opaque,
    "naive datetime": lambda: dt.datetime(2020, 1, 1),
    "date": lambda: dt.date(2020, 1, 1),
    "time": lambda: dt.time(12),
    "timedelta": lambda: dt.timedelta(1),
    "decimal": lambda: decimal.Decimal("1.5"),
    "complex": lambda: 1 + 2j,
    "int above 2**64-1": lambda: 2**64,
    "int below -2**63": lambda: -(2**63) - 1,
    "bytearray": lambda: bytearray(b"x"),
    "lone surrogate": lambda: "\ud800",
    "sub-second UTC offset": lambda: dt.datetime(
        2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(microseconds=1))
    ),
    "list subclass": lambda: type("MyList", (list,), {})([1]),
    "nested past MAX_NESTING": lambda: nested(MAX_NESTING + 1),
}


def nested(depth: int, leaf: Any = "leaf") -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def hide(value: Any, rng: random.Random) -> Any:
    """``value`` somewhere inside up to three levels of lists and dicts."""
    for _ in range(rng.randint(0, 3)):
        value = [1, value] if rng.random() < 0.5 else {"ok": 1, "bad": value}
    return value


def test_unsupported_values_raise_and_write_nothing(seeded):
    rng = random.Random(8)
    existing = seeded[0]
    before = snapshot()
    cases = 0
    for name, make in UNSUPPORTED.items():
        good = {
            "user_id": f"u-{name}",
            "link": f"https://example.com/{name}",
            "tags": [name],
            "published": 1,
            "username": f"name-{name}",
        }
        bad = {**good, "extra": hide(make(), rng)}
        writes = {
            "create": lambda bad=bad: Entity.objects.create(**bad),
            "save over an existing entity": lambda bad=bad: Entity(id=existing.id, **bad).save(),
            "bulk_put after a good item": lambda bad=bad: Entity.objects.bulk_put(
                [{"user_id": "fine", "link": "fine", "username": "fine"}, bad]
            ),
        }
        for how, write in writes.items():
            try:
                write()
            except UnsupportedValue:
                pass
            else:
                pytest.fail(f"{how} with a {name} was accepted")
            assert_unchanged(before, f"{how} with a {name}")
            cases += 1
    assert same(Entity.objects.get(id=existing.id).properties, existing.properties)
    record("Unsupported values: refused before any write", cases, 0, 0)


# --- 2. corrupt bodies in the database ------------------------------------------------------

CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda body: body[: len(body) // 2],
    "truncated compressed": lambda body: body[: len(body) // 2],
    "garbage": lambda body: b"\x00not a body",
    "empty": lambda body: b"",
    "unknown format byte": lambda body: b"\x7f" + body[1:],
    "bad zlib": lambda body: bytes([FORMAT_MSGPACK_ZLIB]) + b"nope",
    "a list, not a dict": lambda body: bytes([FORMAT_MSGPACK]) + msgpack.packb([1, 2]),
    "unknown extension": lambda body: (
        bytes([FORMAT_MSGPACK]) + msgpack.packb({"x": msgpack.ExtType(9, b"?")})
    ),
}


def raw_set_body(entity: Entity, body: bytes) -> None:
    with connections[entity.shard].cursor() as cursor:
        cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [body, entity.id.bytes])


def test_corrupt_bodies_are_named_shown_and_skipped(seeded):
    client = client_for(*VIEW)
    cases = wrong = 0
    for n, (kind, corrupt) in enumerate(CORRUPTIONS.items()):
        target = seeded[n % len(seeded)]
        if kind == "truncated compressed":
            target["blob"] = os.urandom(300).hex()  # compressible hex: a zlib body
            target.save()
            assert bytes(Entity.objects.get(id=target.id).row_body)[0] == FORMAT_MSGPACK_ZLIB
        raw_set_body(target, corrupt(bytes(Entity.objects.get(id=target.id).row_body)))
        name = str(target.id)

        # Reading it: a CorruptBody naming the entity, from every read path.
        with pytest.raises(CorruptBody, match=name):
            Entity.objects.get(id=target.id).properties  # noqa: B018
        with pytest.raises(CorruptBody, match=name):
            Entity.objects.get_many([target.id])[target.id]["title"]
        with pytest.raises(CorruptBody, match=name):
            list(Entity.objects.filter_index(link=target["link"]))
        # Other entities read as before.
        other = seeded[(n + 1) % len(seeded)]
        assert found_ids(link=other["link"]) == {other.id}

        # The admin's list (that shard) and detail page render and show the problem.
        listing = client.get(LIST, {"shard": target.shard})
        assert listing.status_code == 200
        text = listing.content.decode()
        assert f"entity {name}: " in text and "sls-bad" in text  # the error, as its preview
        detail = client.get(f"{LIST}{name}/change/")
        assert detail.status_code == 200
        page = detail.content.decode()
        assert 'class="errornote' in page and f"entity {name}: " in page

        # The cleaner reports and skips it, and still repairs the others.
        victim = seeded[(n + 2) % len(seeded)]
        conn = connections[
            shards.alias_for(
                registry.get("index_link").routing_key(
                    registry.get("index_link").column_value("link", victim["link"])
                )
            )
        ]
        with conn.cursor() as cursor:  # a missing row the cleaner must put back
            cursor.execute("DELETE FROM index_link WHERE entity_id = %s", [victim.id.bytes])
        its_rows = rows_of(target.id.bytes)
        out, err = io.StringIO(), io.StringIO()
        call_command("runcleaner", "--once", "--nice=0", stdout=out, stderr=err)  # no CommandError
        assert target.id.hex in err.getvalue() and "corrupt body" in err.getvalue()
        assert its_rows and rows_of(target.id.bytes) == its_rows  # left alone: unknowable
        implied, stored = rows_by_entity(skip=target.id.bytes)
        if implied != stored:
            wrong += 1
        assert implied == stored

        properties = seeded[n].properties
        del properties["id"]
        raw_set_body(target, MsgpackCodec().encode(properties))
        cases += 1
    record("Corrupt or truncated bodies: read, admin, cleaner", cases, 0, wrong)


# --- 3. SQL injection, one test per entry point ----------------------------------------------


def test_injection_in_property_names_and_values_is_stored_as_data(seeded):
    before = raw_entities()
    created = {}
    for text in INJECTIONS:
        entity = Entity.objects.create(**{text: text, "link": text, "tags": [text]})
        created[entity.id] = text
    for entity_id, text in created.items():
        assert Entity.objects.get(id=entity_id)[text] == text
        assert found_ids(link=text) == {entity_id}
        assert found_ids(tags=text) == {entity_id}
    after = raw_entities()
    assert {k: v for k, v in after.items() if k in before} == before  # nothing else touched
    assert len(after) == len(before) + len(INJECTIONS)
    implied, stored = rows_by_entity()
    assert implied == stored
    record("SQL injection: property names and values in put", len(INJECTIONS), 0, 0)


def test_injection_in_index_declarations_is_refused(seeded):
    before = snapshot()
    cases = 0
    for text in INJECTIONS:
        for kwargs in (
            {"table": text, "properties": ["link"], "shard_on": "link"},
            {"table": "index_evil", "properties": [text], "shard_on": text},
            {"table": "index_evil", "properties": ["link"], "shard_on": text},
            {
                "table": "index_evil",
                "properties": ["link"],
                "shard_on": "link",
                "types": {text: "int"},
            },
            {
                "table": "index_evil",
                "properties": ["link"],
                "shard_on": "link",
                "types": {"link": text},
            },
        ):
            index = Index(**kwargs)
            assert index.errors, kwargs
            with pytest.raises(ConfigurationError, match="invalid"):
                index.create_sql("mysql", lambda n: f"`{n}`")
            registry.register(index, module="tests.evil")
            try:
                assert index not in registry.valid()
                assert any(m.id == "schemaless.E101" for m in checks.check_indexes())
                for alias in shards.shard_aliases():  # migrate skips it
                    call_command("migrate", database=alias, verbosity=0)
                query = Entity.objects.filter_index(**{index.properties[0]: "x"})
                try:  # queries never use it
                    chosen = query.index
                except NoIndexForQuery:
                    chosen = None
                assert chosen is not index
                if chosen is not None:
                    list(query)  # runs on the valid index it chose
            finally:
                registry.unregister(index.name)
                registry.duplicates.clear()
            cases += 1
    assert_unchanged(before, "invalid index declarations")
    record("SQL injection: Index table, property, shard_on and type names", cases, 0, 0)


def test_injection_in_lookups_is_refused(seeded):
    before = snapshot()
    cases = 0
    for text in INJECTIONS:
        for key in (
            f"user_id__gt); {text}",
            f"user_id__{text}",
            text,
            f"{text}__exact",
            f"link__in{text}",
        ):
            with pytest.raises((InvalidQuery, NoIndexForQuery)):
                list(Entity.objects.filter_index(**{key: 1}))
            cases += 1
        assert found_ids(link=text) == set()  # as a value: a parameter, matching nothing
        assert found_ids(link__in=[text, "https://example.com/1"]) == {seeded[1].id}
        with pytest.raises(InvalidQuery):  # an int column: a text value is refused, not quoted
            list(Entity.objects.filter_index(user_id=1, published__gt=text))
        cases += 3
    assert_unchanged(before, "hostile lookups")
    record("SQL injection: filter_index lookup names and values", cases, 0, 0)


def test_injection_in_order_by_is_refused(seeded):
    before = snapshot()
    for text in INJECTIONS:
        with pytest.raises((InvalidQuery, NoIndexForQuery)):
            list(Entity.objects.filter_index(user_id=1).order_by(text))
        with pytest.raises((InvalidQuery, NoIndexForQuery)):
            list(Entity.objects.filter_index(user_id=1).order_by(f"-{text}"))
    assert_unchanged(before, "hostile order_by")
    record("SQL injection: order_by names", 2 * len(INJECTIONS), 0, 0)


def test_tampered_forged_and_hostile_cursors(seeded):
    before = snapshot()
    query = Entity.objects.filter_index(tags="all")
    first = query.page(size=3)
    cursor = first.next_cursor
    assert cursor
    fingerprint, key = signing.loads(cursor, salt=CURSOR_SALT, serializer=_CursorSerializer)
    cases = 0
    bad = [
        cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB"),  # tampered signature
        cursor[:10] + ("x" if cursor[10] != "x" else "y") + cursor[11:],  # tampered payload
        "",
        "not a cursor",
        *INJECTIONS,
        # Forged without the secret key:
        signing.dumps(
            [fingerprint, key], key="guessed", salt=CURSOR_SALT, serializer=_CursorSerializer
        ),
        # Another query's cursor:
        Entity.objects.filter_index(user_id=1).page(size=1).next_cursor,
    ]
    for text in bad:
        with pytest.raises(InvalidCursor):
            query.page(after=text, size=3)
        cases += 1
    # Signed with the real key (as if it leaked): hostile key values are still parameters, and a
    # key of the wrong shape or out of the columns' range is an InvalidCursor, not a driver error.
    by_published = Entity.objects.filter_index(user_id=1).order_by("published")  # an int column
    queries = [(query, lambda e: "all" in e["tags"]), (by_published, lambda e: e["user_id"] == 1)]
    for hostile, belongs in queries:
        fingerprint = signing.loads(
            hostile.page(size=1).next_cursor, salt=CURSOR_SALT, serializer=_CursorSerializer
        )[0]
        for text in INJECTIONS:
            for forged_key in (
                [text, text],
                [text],
                [text, b"\x00" * 16, text],
                [1, 2.5, None],
                [],
                [text.encode(), b"\x00" * 16],  # the right shape: runs, as parameters
                [text.encode(), b"\x00" * 15],
                [2**64 - 1, b"\x00" * 16],
                [float("nan"), b"\x00" * 16],
                [[text], b"\x00" * 16],
            ):
                forged = signing.dumps(
                    [fingerprint, forged_key],
                    salt=CURSOR_SALT,
                    serializer=_CursorSerializer,
                    compress=True,
                )
                try:
                    page = hostile.page(after=forged, size=3)
                except (InvalidCursor, InvalidQuery):
                    pass
                else:
                    assert all(belongs(e) for e in page.entities)
                cases += 1
    assert_unchanged(before, "hostile cursors")
    record("SQL injection: tampered, forged and hostile page cursors", cases, 0, 0)


def test_injection_in_the_admin_search_box_and_shard_parameter(seeded):
    client = client_for(*VIEW)
    before = snapshot()
    cases = 0
    for text in INJECTIONS:
        for q in (
            text,
            f"link={text}",
            f'link="{text}"',
            f"link:{text}",
            f"{text}=1",
            f"user_id__gt); {text}=1",
            f'{{"link": "{text}"}}',
            f'{{"{text}": 1}}',
        ):
            response = client.get(LIST, {"q": q})
            assert response.status_code == 200, q
            assert not any(str(e.id) in response.content.decode() for e in seeded), q
            cases += 1
        response = client.get(LIST, {"shard": text})
        assert response.status_code == 200
        assert "There is no shard" in response.content.decode()
        for param in ("after", "before", "p"):
            assert client.get(LIST, {param: text}).status_code in (200, 302)
        cases += 4
    assert_unchanged(before, "hostile admin searches")
    record("SQL injection: admin search box, shard, cursor and page parameters", cases, 0, 0)


def test_injection_in_management_command_arguments(seeded):
    before = snapshot()
    cases = 0
    for text in INJECTIONS:
        for args in (
            ["runcleaner", "--once", "--nice=0", f"--index={text}"],
            ["runcleaner", "--once", "--nice=0", f"--shard={text}"],
            ["dropindex", "--noinput", text],
            ["dropindex", "--noinput", "index_link", text],
        ):
            with pytest.raises(CommandError):
                call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
            cases += 1
    assert_unchanged(before, "hostile command arguments")
    record("SQL injection: runcleaner --index/--shard, dropindex names", cases, 0, 0)


def test_injection_in_cell_columns_and_feed_positions(seeded):
    before = snapshot()
    row = uuid.uuid4()
    cases = 0
    for text in INJECTIONS:
        column = text[:64]
        Cell.objects.put(row, column, {"v": text})  # a column name is a parameter
        assert Cell.objects.get_cell(row, column).body == {"v": text}
        cases += 1
        with pytest.raises(InvalidQuery):  # a feed position is a number or nothing
            feed.changes(shards.shard_aliases()[0], after=text)  # type: ignore[arg-type]
        cases += 1
    assert len(Cell.objects.row(row)) == len({text[:64] for text in INJECTIONS})
    for alias in shards.shard_aliases():  # the cells just written are expected; nothing else
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM cell WHERE row_key = %s", [row.bytes])
            cursor.execute("DELETE FROM cell_head WHERE row_key = %s", [row.bytes])
    assert_unchanged(before, "hostile cell columns and feed positions")
    record("SQL injection: cell column names, feed positions", cases, 0, 0)


def test_injection_in_the_cell_admin_and_tailchanges(seeded):
    client = client_for("view_cell")
    before = snapshot()
    cases = 0
    for text in INJECTIONS:
        response = client.get("/admin/schemaless_store/cell/", {"row": text})
        assert response.status_code == 200 and "is not a row key" in response.content.decode()
        with pytest.raises(CommandError):
            call_command(
                "tailchanges", "--once", "--shard", text, stdout=io.StringIO(), stderr=io.StringIO()
            )
        cases += 2
    assert_unchanged(before, "hostile cell admin rows and tailchanges shards")
    record("SQL injection: cell admin row parameter, tailchanges --shard", cases, 0, 0)


# --- 4. Unicode and sizes ------------------------------------------------------------------

EMOJI = [
    "\N{GRINNING FACE}",
    "\N{GRINNING FACE WITH SMILING EYES}",
    "👩‍👩‍👧",
    "\U0001d11e",
    "é",
    "e\u0301",
]


def test_four_byte_characters_in_values_and_indexed_strings(backend):
    made = {}
    for text in EMOJI:
        entity = Entity.objects.create(
            link=text, user_id=text, tags=[text, "x"], title=text * 3, **{text: text}
        )
        made[text] = entity.id
    for text, entity_id in made.items():
        back = Entity.objects.get(id=entity_id)
        assert back["title"] == text * 3 and back[text] == text
        # Each finds its own entity only: no collation folds 😀 and 😁, or é and e+◌́.
        assert found_ids(link=text) == {entity_id}
        assert found_ids(user_id=text) == {entity_id}
        assert found_ids(tags=text) == {entity_id}
    assert len(found_ids(tags="x")) == len(EMOJI)
    by_code_point = [e["link"] for e in Entity.objects.filter_index(link__gte="").order_by("link")]
    assert by_code_point == sorted(EMOJI)
    cases = 4 * len(EMOJI) + 1
    if backend == "mariadb":
        for alias in shards.shard_aliases():
            with connections[alias].cursor() as cursor:
                cursor.execute(
                    "SELECT @@character_set_client, @@character_set_connection, "
                    "@@character_set_results"
                )
                assert set(cursor.fetchone()) == {"utf8mb4"}
                cursor.execute(
                    "SELECT table_name, table_collation FROM information_schema.tables "
                    "WHERE table_schema = DATABASE()"
                )
                collations = dict(cursor.fetchall())
                for table in store_tables():
                    assert collations[table].startswith("utf8mb4"), (table, collations[table])
                cases += 1
    record("Unicode: 4-byte characters in values and indexed strings", cases, 0, 0)


def test_long_values_and_index_column_limits():
    big = os.urandom(512 * 1024).hex()  # 1 MiB of text that does not compress much
    entity = Entity.objects.create(text=big, emoji="\N{GRINNING FACE}" * 100_000, link="big")
    back = Entity.objects.get(id=entity.id)
    assert back["text"] == big and back["emoji"] == "\N{GRINNING FACE}" * 100_000
    assert found_ids(link="big") == {entity.id}

    column = registry.get("index_link").columns["link"].max_bytes  # 255: a tag byte + UTF-8
    fits, too_long = "a" * (column - 1), "a" * column
    emoji_fit = "\N{GRINNING FACE}" * ((column - 1) // 4)
    ok = [Entity.objects.create(link=value) for value in (fits, emoji_fit)]
    assert found_ids(link=fits) == {ok[0].id} and found_ids(link=emoji_fit) == {ok[1].id}
    middle = snapshot()
    refused = (too_long, emoji_fit + "\N{GRINNING FACE}", "x" * 1_000_000)
    for value in refused:
        with pytest.raises(IndexValueTooLong, match=f"holds {column}"):
            Entity.objects.create(link=value)
        with pytest.raises(InvalidQuery):  # never truncated into a match
            list(Entity.objects.filter_index(link=value))
    assert_unchanged(middle, "index values longer than their column")

    small = {"BUCKETS": 4096, "MAX_BODY_BYTES": 1000}
    with override_settings(SCHEMALESS=small), pytest.raises(BodyTooLarge):
        Entity.objects.create(text=os.urandom(1000).hex())
    assert_unchanged(middle, "a body over MAX_BODY_BYTES")
    cases = 1 + len(ok) + len(refused) + 1
    record(
        "Sizes: 1 MB values, index values at and past the column length, body limit", cases, 0, 0
    )


def test_empty_strings_none_and_missing_properties():
    empty = Entity.objects.create(**{"": "", "link": "", "user_id": "", "tags": [""]})
    back = Entity.objects.get(id=empty.id)
    assert back[""] == "" and back["link"] == ""
    assert found_ids(link="") == {empty.id} and found_ids(tags="") == {empty.id}

    # A property that is missing is absent from the indexes on it (DESIGN section 1)...
    missing = Entity.objects.create(title="no link")
    assert [row for row in rows_by_entity()[1] if row[3] == missing.id.bytes] == []
    # ... while None is a value: the default "key" column holds it (it sorts first, docs/queries.md)
    # and a query for None finds it; a typed column refuses it and nothing is written.
    none = Entity.objects.create(link=None, tags=[None, "n"], title=None)
    assert Entity.objects.get(id=none.id)["link"] is None
    assert found_ids(link=None) == {none.id} and found_ids(tags=None) == {none.id}
    assert found_ids(link__lt="") == {none.id}  # None sorts before every string
    before = snapshot()
    with pytest.raises(IndexValueError, match="int column"):
        Entity.objects.create(user_id=1, published=None)
    assert_unchanged(before, "None in an int column")
    implied, stored = rows_by_entity()
    assert implied == stored
    record("Empty strings, None and missing properties", 4, 0, 0)  # the four entities above


def test_nesting_at_and_past_the_limit():
    client = client_for(*VIEW)
    deepest = nested(MAX_NESTING)
    entity = Entity.objects.create(deep=deepest, link="deep")
    assert same(Entity.objects.get(id=entity.id)["deep"], deepest)
    assert found_ids(link="deep") == {entity.id}
    assert client.get(f"{LIST}{entity.id}/change/").status_code == 200  # the admin shows it
    assert (
        call_command("runcleaner", "--once", "--nice=0", stdout=io.StringIO(), stderr=io.StringIO())
        is None
    )
    before = snapshot()
    loop: list = []
    loop.append(loop)
    too_deep = (nested(MAX_NESTING + 1), {"wrapped": nested(MAX_NESTING)}, loop)
    for bad in too_deep:
        with pytest.raises(UnsupportedValue, match="levels deep"):
            Entity.objects.create(deep=bad, link="too deep")
    assert_unchanged(before, "nesting past MAX_NESTING")
    record(f"Nesting: {MAX_NESTING} levels stored, deeper refused", 1 + len(too_deep), 0, 0)
