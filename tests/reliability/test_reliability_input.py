"""Hostile and bad input (issue 8): what users, operators and attackers can hand the store.

Four classes, each measured in ``tests.support.reliability_report.recording`` (its row is recorded,
with what it counted, before the test fails):

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

from schemaless_store import Index, checks, feed
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
from schemaless_store.query.cursors import CURSOR_SALT
from schemaless_store.query.cursors import CursorSerializer as _CursorSerializer
from schemaless_store.tables import ddl
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE
from tests.support.admin import VIEW, client_for
from tests.support.buckets import ids_on
from tests.support.factories import PostFactory
from tests.support.reliability_report import Tally, recording
from tests.support.values import same

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
    """Every row of ``entities`` and of every index table, per shard, plus the table lists (a
    store table that is gone has no entry)."""
    out: dict[tuple[str, str], list[tuple]] = {}
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            names = sorted(conn.introspection.table_names(cursor))
            out[(alias, "<tables>")] = [(name,) for name in names]
            for table in store_tables():
                if table not in names:
                    continue
                cursor.execute(f"SELECT * FROM {conn.ops.quote_name(table)}")
                out[(alias, table)] = sorted(
                    tuple(bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row)
                    for row in cursor.fetchall()
                )
    out[("default", "<tables>")] = [
        (n,) for n in sorted(connections["default"].introspection.table_names())
    ]
    return out


def check_unchanged(tally: Tally, before: dict, what: str) -> dict:
    """Count what changed since ``before``: a table or a row gone is data lost, a table or a row
    added (something a refused input wrote) a wrong result. Returns the snapshot now, for the
    next case to compare with (so one change is counted once)."""
    after = snapshot()
    for key in sorted(before.keys() | after.keys()):
        alias, table = key
        old, new = set(before.get(key, [])), set(after.get(key, []))
        if table != "<tables>" and (key not in before or key not in after):
            continue  # the table itself came or went: counted with the table list
        gone, added = old - new, new - old
        noun = "table" if table == "<tables>" else f"row of {table}"
        if gone:
            tally.lost(f"{what}: {len(gone)} {noun}(s) gone on {alias}", count=len(gone))
        if added:
            tally.wrong(f"{what}: {len(added)} {noun}(s) added on {alias}", count=len(added))
    return after


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
                alias = bucket_map.alias_for(index.routing_key(values[index.shard_position]))
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
            # Three posts per user, tags shared by four: index reads find several entities.
            PostFactory(id=entity_id, user_id=n % 4, tags=[f"t{n % 3}", "all"], username=f"u{n}")
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
    with recording("Codec fuzz: random bags put, replaced, read and queried") as tally:

        def check(entity_id: uuid.UUID, bag: dict[str, Any], old: dict[str, Any] | None) -> None:
            back = Entity.objects.get(id=entity_id).properties
            del back["id"]
            tally.expect(same(back, bag), f"read back {back!r} for {bag!r}", "lost")
            for probe in index_probes(bag):
                tally.expect(entity_id in found_ids(**probe), f"{probe!r} does not find {bag!r}")
            for probe in index_probes(old or {}):
                if probe not in index_probes(bag):
                    tally.expect(
                        entity_id not in found_ids(**probe),
                        f"{probe!r} still finds the entity after it became {bag!r}",
                    )

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
            tally.cases += 1

        run()
        implied, stored = rows_by_entity()
        tally.expect(
            implied == stored,
            f"index rows differ: missing {implied - stored}, extra {stored - implied}",
        )


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
    with recording("Unsupported values: refused before any write") as tally:
        before = snapshot()
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
                "save over an existing entity": lambda bad=bad: Entity(
                    id=existing.id, **bad
                ).save(),
                "bulk_put after a good item": lambda bad=bad: Entity.objects.bulk_put(
                    [{"user_id": "fine", "link": "fine", "username": "fine"}, bad]
                ),
            }
            for how, write in writes.items():
                tally.refuses(UnsupportedValue, write, f"{how} with a {name}")
                before = check_unchanged(tally, before, f"{how} with a {name}")
                tally.cases += 1
        back = Entity.objects.get(id=existing.id).properties
        tally.expect(same(back, existing.properties), f"{existing.id} became {back!r}", "lost")


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
    with recording("Corrupt or truncated bodies: read, admin, cleaner") as tally:
        for n, (kind, corrupt) in enumerate(CORRUPTIONS.items()):
            target = seeded[n % len(seeded)]
            if kind == "truncated compressed":
                target["blob"] = os.urandom(300).hex()  # compressible hex: a zlib body
                target.save()
                assert bytes(Entity.objects.get(id=target.id).row_body)[0] == FORMAT_MSGPACK_ZLIB
            raw_set_body(target, corrupt(bytes(Entity.objects.get(id=target.id).row_body)))
            name = str(target.id)

            # Reading it: a CorruptBody naming the entity, from every read path.
            reads = {
                "get()": lambda t=target: Entity.objects.get(id=t.id).properties,
                "get_many()": lambda t=target: Entity.objects.get_many([t.id])[t.id]["title"],
                "a query": lambda t=target: list(Entity.objects.filter_index(link=t["link"])),
            }
            for path, read in reads.items():
                tally.refuses(CorruptBody, read, f"{kind}: {path}", match=name)
            # Other entities read as before.
            other = seeded[(n + 1) % len(seeded)]
            found = found_ids(link=other["link"])
            tally.expect(found == {other.id}, f"{kind}: {other['link']} finds {found}")

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
                bucket_map.alias_for(
                    registry.get("index_link").routing_key(
                        registry.get("index_link").column_value("link", victim["link"])
                    )
                )
            ]
            with conn.cursor() as cursor:  # a missing row the cleaner must put back
                cursor.execute("DELETE FROM index_link WHERE entity_id = %s", [victim.id.bytes])
            its_rows = rows_of(target.id.bytes)
            out, err = io.StringIO(), io.StringIO()
            call_command("runcleaner", "--once", "--nice=0", stdout=out, stderr=err)  # exits 0
            assert target.id.hex in err.getvalue() and "corrupt body" in err.getvalue()
            assert its_rows
            tally.expect(
                rows_of(target.id.bytes) == its_rows,
                f"{kind}: the cleaner changed the index rows of an entity it cannot read",
                "lost",
            )  # left alone: unknowable
            implied, stored = rows_by_entity(skip=target.id.bytes)
            tally.expect(
                implied == stored,
                f"{kind}: other entities' rows after the cleaner: missing {implied - stored}, "
                f"extra {stored - implied}",
            )

            properties = seeded[n].properties
            del properties["id"]
            raw_set_body(target, MsgpackCodec().encode(properties))
            tally.cases += 1


# --- 3. SQL injection, one test per entry point ----------------------------------------------


def test_injection_in_property_names_and_values_is_stored_as_data(seeded):
    with recording("SQL injection: property names and values in put") as tally:
        before = raw_entities()
        created = {}
        for text in INJECTIONS:
            entity = Entity.objects.create(**{text: text, "link": text, "tags": [text]})
            created[entity.id] = text
        for entity_id, text in created.items():
            got = Entity.objects.get(id=entity_id).properties.get(text)
            tally.expect(got == text, f"{text!r} read back as {got!r}", "lost")
            for probe in ({"link": text}, {"tags": text}):
                found = found_ids(**probe)
                tally.expect(found == {entity_id}, f"{probe!r} finds {found}")
            tally.cases += 1
        after = raw_entities()
        for entity_id, properties in before.items():  # nothing else touched
            tally.expect(
                after.get(entity_id) == properties, f"{entity_id.hex()} was changed", "lost"
            )
        tally.expect(
            len(after) == len(before) + len(INJECTIONS),
            f"{len(after)} entities, not {len(before) + len(INJECTIONS)}",
        )
        implied, stored = rows_by_entity()
        tally.expect(
            implied == stored,
            f"index rows differ: missing {implied - stored}, extra {stored - implied}",
        )


def test_injection_in_index_declarations_is_refused(seeded):
    with recording("SQL injection: Index table, property, shard_on and type names") as tally:
        before = snapshot()
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
                tally.expect(bool(index.errors), f"{kwargs}: declared without errors")
                tally.refuses(
                    ConfigurationError,
                    lambda index=index: ddl.create_statements(index, "mysql", lambda n: f"`{n}`"),
                    f"{kwargs}: create_statements()",
                    match="invalid",
                )
                registry.register(index, module="tests.evil")
                try:
                    tally.expect(index not in registry.valid(), f"{kwargs}: a valid index")
                    tally.expect(
                        any(m.id == "schemaless.E101" for m in checks.check_indexes()),
                        f"{kwargs}: no schemaless.E101",
                    )
                    for alias in shards.shard_aliases():  # migrate skips it
                        call_command("migrate", database=alias, verbosity=0)
                    query = Entity.objects.filter_index(**{index.properties[0]: "x"})
                    try:  # queries never use it
                        chosen = query.index
                    except NoIndexForQuery:
                        chosen = None
                    tally.expect(chosen is not index, f"{kwargs}: a query uses it")
                    if chosen is not None and chosen is not index:
                        list(query)  # runs on the valid index it chose
                finally:
                    registry.unregister(index.name)
                    registry.duplicates.clear()
                tally.cases += 1
        check_unchanged(tally, before, "invalid index declarations")


def test_injection_in_lookups_is_refused(seeded):
    with recording("SQL injection: filter_index lookup names and values") as tally:
        before = snapshot()
        for text in INJECTIONS:
            for key in (
                f"user_id__gt); {text}",
                f"user_id__{text}",
                text,
                f"{text}__exact",
                f"link__in{text}",
            ):
                tally.refuses(
                    (InvalidQuery, NoIndexForQuery),
                    lambda key=key: list(Entity.objects.filter_index(**{key: 1})),
                    f"lookup {key!r}",
                )
                tally.cases += 1
            found = found_ids(link=text)  # as a value: a parameter, matching nothing
            tally.expect(found == set(), f"link={text!r} finds {found}")
            found = found_ids(link__in=[text, seeded[1]["link"]])
            tally.expect(found == {seeded[1].id}, f"link__in=[{text!r}, ...] finds {found}")
            tally.refuses(  # an int column: a text value is refused, not quoted
                InvalidQuery,
                lambda text=text: list(Entity.objects.filter_index(user_id=1, published__gt=text)),
                f"published__gt={text!r}",
            )
            tally.cases += 3
        check_unchanged(tally, before, "hostile lookups")


def test_injection_in_order_by_is_refused(seeded):
    with recording("SQL injection: order_by names") as tally:
        before = snapshot()
        for text in INJECTIONS:
            for name in (text, f"-{text}"):
                tally.refuses(
                    (InvalidQuery, NoIndexForQuery),
                    lambda name=name: list(Entity.objects.filter_index(user_id=1).order_by(name)),
                    f"order_by({name!r})",
                )
                tally.cases += 1
        check_unchanged(tally, before, "hostile order_by")


def test_tampered_forged_and_hostile_cursors(seeded):
    with recording("SQL injection: tampered, forged and hostile page cursors") as tally:
        before = snapshot()
        query = Entity.objects.filter_index(tags="all")
        first = query.page(size=3)
        cursor = first.next_cursor
        assert cursor
        fingerprint, key = signing.loads(cursor, salt=CURSOR_SALT, serializer=_CursorSerializer)
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
            tally.refuses(
                InvalidCursor,
                lambda text=text: query.page(after=text, size=3),
                f"cursor {text!r}",
            )
            tally.cases += 1
        # Signed with the real key (as if it leaked): hostile key values are still parameters,
        # and a key of the wrong shape or out of the columns' range is an InvalidCursor, not a
        # driver error.
        by_published = Entity.objects.filter_index(user_id=1).order_by("published")  # int column
        queries = [
            (query, lambda e: "all" in e["tags"]),
            (by_published, lambda e: e["user_id"] == 1),
        ]
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
                    except Exception as exc:
                        tally.wrong(f"signed cursor {forged_key!r}: {type(exc).__name__}: {exc}")
                    else:
                        for entity in page.entities:
                            tally.expect(
                                belongs(entity),
                                f"signed cursor {forged_key!r} gave {entity.properties}",
                            )
                    tally.cases += 1
        check_unchanged(tally, before, "hostile cursors")


def test_injection_in_the_admin_search_box_and_shard_parameter(seeded):
    client = client_for(*VIEW)
    with recording("SQL injection: admin search box, shard, cursor and page parameters") as tally:
        before = snapshot()
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
                if tally.expect(response.status_code == 200, f"q={q!r}: {response.status_code}"):
                    shown = [e.id for e in seeded if str(e.id) in response.content.decode()]
                    tally.expect(not shown, f"q={q!r} shows {shown}", "wrong")
                tally.cases += 1
            response = client.get(LIST, {"shard": text})
            tally.expect(
                response.status_code == 200 and "There is no shard" in response.content.decode(),
                f"shard={text!r}: {response.status_code}, no error message",
            )
            for param in ("after", "before", "p"):
                status = client.get(LIST, {param: text}).status_code
                tally.expect(status in (200, 302), f"{param}={text!r}: {status}")
            tally.cases += 4
        check_unchanged(tally, before, "hostile admin searches")


def test_injection_in_management_command_arguments(seeded):
    with recording("SQL injection: runcleaner --index/--shard, dropindex names") as tally:
        before = snapshot()
        for text in INJECTIONS:
            for args in (
                ["runcleaner", "--once", "--nice=0", f"--index={text}"],
                ["runcleaner", "--once", "--nice=0", f"--shard={text}"],
                ["dropindex", "--noinput", text],
                ["dropindex", "--noinput", "index_link", text],
            ):
                tally.refuses(
                    CommandError,
                    lambda args=args: call_command(
                        *args, stdout=io.StringIO(), stderr=io.StringIO()
                    ),
                    " ".join(args),
                )
                tally.cases += 1
        check_unchanged(tally, before, "hostile command arguments")


def test_injection_in_cell_columns_and_feed_positions(seeded):
    with recording("SQL injection: cell column names, feed positions") as tally:
        before = snapshot()
        row = uuid.uuid4()
        for text in INJECTIONS:
            column = text[:64]
            Cell.objects.put(row, column, {"v": text})  # a column name is a parameter
            body = Cell.objects.get_cell(row, column).body
            tally.expect(body == {"v": text}, f"cell {column!r} read back as {body!r}", "lost")
            tally.cases += 1
            tally.refuses(  # a feed position is a number or nothing
                InvalidQuery,
                lambda text=text: feed.changes(shards.shard_aliases()[0], after=text),  # type: ignore[arg-type]
                f"feed position {text!r}",
            )
            tally.cases += 1
        columns = len(Cell.objects.row(row))
        tally.expect(
            columns == len({text[:64] for text in INJECTIONS}), f"the row has {columns} columns"
        )
        for alias in shards.shard_aliases():  # the cells just written are expected; nothing else
            with connections[alias].cursor() as cursor:
                cursor.execute("DELETE FROM cell WHERE row_key = %s", [row.bytes])
                cursor.execute("DELETE FROM cell_head WHERE row_key = %s", [row.bytes])
        check_unchanged(tally, before, "hostile cell columns and feed positions")


def test_injection_in_the_cell_admin_and_tailchanges(seeded):
    client = client_for("view_cell")
    with recording("SQL injection: cell admin row parameter, tailchanges --shard") as tally:
        before = snapshot()
        for text in INJECTIONS:
            response = client.get("/admin/schemaless_store/cell/", {"row": text})
            tally.expect(
                response.status_code == 200 and "is not a row key" in response.content.decode(),
                f"cell admin row={text!r}: {response.status_code}, no error message",
            )
            tally.refuses(
                CommandError,
                lambda text=text: call_command(
                    "tailchanges",
                    "--once",
                    "--shard",
                    text,
                    stdout=io.StringIO(),
                    stderr=io.StringIO(),
                ),
                f"tailchanges --shard {text!r}",
            )
            tally.cases += 2
        check_unchanged(tally, before, "hostile cell admin rows and tailchanges shards")


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
    with recording("Unicode: 4-byte characters in values and indexed strings") as tally:
        made = {}
        for text in EMOJI:
            entity = Entity.objects.create(
                link=text, user_id=text, tags=[text, "x"], title=text * 3, **{text: text}
            )
            made[text] = entity.id
        for text, entity_id in made.items():
            back = Entity.objects.get(id=entity_id)
            tally.expect(
                back["title"] == text * 3 and back[text] == text,
                f"{text!r} read back as {back.properties!r}",
                "lost",
            )
            # Each finds its own entity only: no collation folds 😀 and 😁, or é and e+◌́.
            for prop in ("link", "user_id", "tags"):
                found = found_ids(**{prop: text})
                tally.expect(found == {entity_id}, f"{prop}={text!r} finds {found}")
            tally.cases += 4
        found = found_ids(tags="x")
        tally.expect(len(found) == len(EMOJI), f"tags='x' finds {len(found)} entities")
        by_code_point = [
            e["link"] for e in Entity.objects.filter_index(link__gte="").order_by("link")
        ]
        tally.expect(by_code_point == sorted(EMOJI), f"code-point order is {by_code_point}")
        tally.cases += 1
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
                    tally.cases += 1


def test_long_values_and_index_column_limits():
    fault = "Sizes: 1 MB values, index values at and past the column length, body limit"
    with recording(fault) as tally:
        big = os.urandom(512 * 1024).hex()  # 1 MiB of text that does not compress much
        entity = Entity.objects.create(text=big, emoji="\N{GRINNING FACE}" * 100_000, link="big")
        back = Entity.objects.get(id=entity.id)
        tally.expect(
            back["text"] == big and back["emoji"] == "\N{GRINNING FACE}" * 100_000,
            "the 1 MB values read back different",
            "lost",
        )
        tally.expect(found_ids(link="big") == {entity.id}, "link='big' does not find it")
        tally.cases += 1

        column = registry.get("index_link").columns["link"].max_bytes  # 255: tag byte + UTF-8
        fits, too_long = "a" * (column - 1), "a" * column
        emoji_fit = "\N{GRINNING FACE}" * ((column - 1) // 4)
        ok = [Entity.objects.create(link=value) for value in (fits, emoji_fit)]
        for value, made in zip((fits, emoji_fit), ok, strict=True):
            found = found_ids(link=value)
            tally.expect(found == {made.id}, f"a {len(value)}-character link finds {found}")
            tally.cases += 1
        middle = snapshot()
        refused = (too_long, emoji_fit + "\N{GRINNING FACE}", "x" * 1_000_000)
        for value in refused:
            what = f"a link of {len(value.encode())} bytes"
            tally.refuses(
                IndexValueTooLong,
                lambda value=value: Entity.objects.create(link=value),
                what,
                match=f"holds {column}",
            )
            tally.refuses(  # never truncated into a match
                InvalidQuery,
                lambda value=value: list(Entity.objects.filter_index(link=value)),
                f"a query for {what}",
            )
            middle = check_unchanged(tally, middle, f"{what}, refused")
            tally.cases += 1

        small = {"BUCKETS": 4096, "MAX_BODY_BYTES": 1000}
        with override_settings(SCHEMALESS=small):
            tally.refuses(
                BodyTooLarge,
                lambda: Entity.objects.create(text=os.urandom(1000).hex()),
                "a body over MAX_BODY_BYTES",
            )
        check_unchanged(tally, middle, "a body over MAX_BODY_BYTES")
        tally.cases += 1


def test_empty_strings_none_and_missing_properties():
    with recording("Empty strings, None and missing properties") as tally:
        empty = Entity.objects.create(**{"": "", "link": "", "user_id": "", "tags": [""]})
        back = Entity.objects.get(id=empty.id)
        tally.expect(back[""] == "" and back["link"] == "", f"read back {back.properties}", "lost")
        for probe in ({"link": ""}, {"tags": ""}):
            found = found_ids(**probe)
            tally.expect(found == {empty.id}, f"{probe!r} finds {found}")
        tally.cases += 1

        # A property that is missing is absent from the indexes on it (docs/design.md#data-model)...
        missing = Entity.objects.create(title="no link")
        rows = [row for row in rows_by_entity()[1] if row[3] == missing.id.bytes]
        tally.expect(rows == [], f"an entity without indexed properties has rows {rows}")
        tally.cases += 1
        # ... while None is a value: the default "key" column holds it (it sorts first,
        # docs/queries.md) and a query for None finds it; a typed column refuses it and nothing
        # is written.
        none = Entity.objects.create(link=None, tags=[None, "n"], title=None)
        link = Entity.objects.get(id=none.id)["link"]
        tally.expect(link is None, f"link None read back as {link!r}", "lost")
        for probe in ({"link": None}, {"tags": None}, {"link__lt": ""}):  # None sorts first
            found = found_ids(**probe)
            tally.expect(found == {none.id}, f"{probe!r} finds {found}")
        tally.cases += 1
        before = snapshot()
        tally.refuses(
            IndexValueError,
            lambda: Entity.objects.create(user_id=1, published=None),
            "None in an int column",
            match="int column",
        )
        check_unchanged(tally, before, "None in an int column")
        tally.cases += 1
        implied, stored = rows_by_entity()
        tally.expect(
            implied == stored,
            f"index rows differ: missing {implied - stored}, extra {stored - implied}",
        )


def test_nesting_at_and_past_the_limit():
    client = client_for(*VIEW)
    with recording(f"Nesting: {MAX_NESTING} levels stored, deeper refused") as tally:
        deepest = nested(MAX_NESTING)
        entity = Entity.objects.create(deep=deepest, link="deep")
        back = Entity.objects.get(id=entity.id)["deep"]
        tally.expect(same(back, deepest), f"{MAX_NESTING} levels read back different", "lost")
        tally.expect(found_ids(link="deep") == {entity.id}, "link='deep' does not find it")
        assert client.get(f"{LIST}{entity.id}/change/").status_code == 200  # the admin shows it
        assert (
            call_command(
                "runcleaner", "--once", "--nice=0", stdout=io.StringIO(), stderr=io.StringIO()
            )
            is None
        )
        tally.cases += 1
        before = snapshot()
        loop: list = []
        loop.append(loop)
        too_deep = (nested(MAX_NESTING + 1), {"wrapped": nested(MAX_NESTING)}, loop)
        for n, bad in enumerate(too_deep):
            tally.refuses(
                UnsupportedValue,
                lambda bad=bad: Entity.objects.create(deep=bad, link="too deep"),
                f"too deep value {n}",
                match="levels deep",
            )
            before = check_unchanged(tally, before, f"too deep value {n}")
            tally.cases += 1
