"""Hostile and bad input (issue 8), **SQL injection**: one test per entry point that takes a
name or a value from outside; each is refused with a clear error or passed as a
parameter, and the shards' tables hold the same rows afterwards.

Measured in ``tests.support.reliability_report.recording`` (its row is recorded, with what
it counted, before the test fails); docs/reliability.md lists the classes."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core import signing
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from schemaless_store import Index, checks
from schemaless_store.cells import feed
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import (
    ConfigurationError,
    InvalidCursor,
    InvalidQuery,
    NoIndexForQuery,
)
from schemaless_store.models import Cell, Entity
from schemaless_store.query.cursors import CURSOR_SALT
from schemaless_store.query.cursors import CursorSerializer as _CursorSerializer
from schemaless_store.tables import ddl
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.admin import VIEW, client_for
from tests.support.hostile_input import (
    INJECTIONS,
    LIST,
    check_unchanged,
    found_ids,
    raw_entities,
    rows_by_entity,
    snapshot,
)
from tests.support.reliability_report import recording

pytestmark = [STORE, pytest.mark.reliability]


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
