"""``manage.py importentities FILE``: through bulk_put's code (index rows maintained), rerunnable
(same ids, nothing written twice), every bad line reported with its number and reason, in the
reject file or (``--strict``) as the place the import stopped with nothing of its batch
written."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

from django.test import override_settings

from schemaless_store.backup.importer import Importer
from schemaless_store.backup.jsonfile import JsonLinesFile
from schemaless_store.models import Cell, Entity
from tests.support import STORE, child
from tests.support.backups import answers, command, entities, export, wipe
from tests.support.factories import NumberedFactory
from tests.support.invariants import assert_exact
from tests.support.values import same

pytestmark = STORE


def ids(n: int) -> list[str]:
    return [str(uuid.UUID(int=0xA000 + k)) for k in range(n)]


def line(entity_id: str, **properties) -> str:
    return json.dumps({"id": entity_id, "properties": properties})


def write(path: Path, lines: list[str | bytes]) -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


def stored_ids() -> set[str]:
    return {str(i) for i in entities()}


def test_import_maintains_indexes_and_reruns_write_nothing(tmp_path):
    path = write(
        tmp_path / "in.jsonl",
        [
            line(i, user_id={"$bytes": "0102"}, published=n, link=f"https://x/{n}", tags=["a"])
            for n, i in enumerate(ids(12))
        ],
    )
    first = command("importentities", str(path), "--batch-size", "5")
    assert first.error is None, first
    assert "imported 12 entities (12 new, 0 already stored) from 12 lines" in first.stdout
    assert stored_ids() == set(ids(12))
    assert_exact()
    found = Entity.objects.filter_index(user_id=b"\x01\x02").order_by("published")
    assert [str(e.id) for e in found] == ids(12)
    stamps = {e.id: e.row_updated for e in Entity.objects.all()}

    again = command("importentities", str(path))
    assert again.error is None
    assert "imported 12 entities (0 new, 12 already stored) from 12 lines" in again.stdout
    assert {e.id: e.row_updated for e in Entity.objects.all()} == stamps  # not rewritten
    assert Entity.objects.all().count() == 12


def test_a_changed_line_is_written_on_rerun(tmp_path):
    (one,) = ids(1)
    command("importentities", str(write(tmp_path / "a.jsonl", [line(one, title="old")])))
    run = command("importentities", str(write(tmp_path / "b.jsonl", [line(one, title="new")])))
    assert "(0 new, 1 changed, 0 already stored)" in run.stdout
    assert Entity.objects.get(id=one)["title"] == "new"


@override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})
def test_with_history_on_a_rerun_adds_no_version(tmp_path):
    path = write(tmp_path / "h.jsonl", [line(i, n=1) for i in ids(3)])
    command("importentities", str(path))
    command("importentities", str(path))
    for i in ids(3):
        assert [v.properties["n"] for v in Entity.objects.get(id=i).history()] == [1]


@override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})
def test_cells_and_history_are_restored_as_they_were(tmp_path):
    with child.declared("index_cell_email"):
        restore_cells_and_history(tmp_path)


def restore_cells_and_history(tmp_path):
    entity = Entity.objects.create(title="one")
    entity["title"] = "two"
    entity.save()
    Cell.objects.put(entity.id, "users", {"email": "a@example.com", "school": "x", "year": 1})
    Cell.objects.put(entity.id, "users", {"email": "b@example.com", "school": "x", "year": 2})
    history = [(v.ref_key, v.created_at, v.properties) for v in entity.history()]
    versions = [
        (c.ref_key, c.created_at, c.body) for c in Cell.objects.versions(entity.id, "users")
    ]
    path = tmp_path / "cells.jsonl"
    export(path, "--cells")
    wipe()
    for _ in range(2):  # the second run finds everything stored
        run = command("importentities", str(path))
        assert run.error is None, run
        restored = Entity.objects.get(id=entity.id)
        assert restored["title"] == "two"
        assert [(v.ref_key, v.created_at, v.properties) for v in restored.history()] == history
        assert [
            (c.ref_key, c.created_at, c.body) for c in Cell.objects.versions(entity.id, "users")
        ] == versions
    found = Cell.objects.filter_index("users", email="b@example.com")
    assert [c.row_key for c in found] == [entity.id]
    assert list(Cell.objects.filter_index("users", email="a@example.com")) == []


def bad_lines(good: list[str]) -> list[tuple[str | bytes, str]]:
    """(line, the reason it is refused): every kind of bad line."""
    return [
        ('{"id": "' + good[0] + '", "properties": {"a": ', "invalid JSON"),
        (line(good[0], a={"$when": "now"}), "unknown tag"),
        (line(good[0], a=2**64), "UnsupportedValue: cannot store a value of type int"),
        (line(good[0], user_id="u", published="soon"), "IndexValueError"),
        (line(good[0], big={"$bytes": random.Random(5).randbytes(5000).hex()}), "BodyTooLarge"),
        (line("1234", a=1), "id is a UUID string"),
        (json.dumps({"properties": {"a": 1}}), "not an entity line"),
        (b'{"id": "\xff"}', "not UTF-8"),
        (line(good[0], username="taken"), "UniqueViolation: index 'index_users_username'"),
    ]


@override_settings(SCHEMALESS={"BUCKETS": 4096, "MAX_BODY_BYTES": 4096})
def test_every_bad_line_goes_to_the_reject_file_with_its_number_and_reason(tmp_path):
    holder = Entity.objects.create(username="taken")
    good = ids(20)
    cases = bad_lines(good)
    body: list[str | bytes] = []
    where: dict[int, str] = {}
    for n, entity_id in enumerate(good[1:], start=1):
        body.append(line(entity_id, n=n))
        if n <= len(cases):
            text, reason = cases[n - 1]
            body.append(text)
            where[len(body)] = reason
    path = write(tmp_path / "mixed.jsonl", body)
    run = command("importentities", str(path), "--batch-size", "7")
    assert run.error and f"{len(cases)} items were rejected" in run.error, repr(run.stderr)
    assert "the others were imported" in run.error
    assert stored_ids() == set(good[1:]) | {str(holder.id)}
    rejects = [
        json.loads(x) for x in (tmp_path / "mixed.jsonl.rejects.jsonl").read_text().split("\n") if x
    ]
    assert [r["line"] for r in rejects] == sorted(where)
    for reject in rejects:
        assert where[reject["line"]] in reject["reason"], reject
        assert f"line {reject['line']}: " in run.stderr
    original = path.read_bytes().split(b"\n")
    assert rejects[0]["text"] == original[rejects[0]["line"] - 1].decode()
    assert Entity.objects.get(id=holder.id)["username"] == "taken"
    assert_exact()


def test_two_lines_of_one_batch_claiming_one_unique_value(tmp_path):
    first, second = ids(2)
    path = write(tmp_path / "u.jsonl", [line(first, username="x"), line(second, username="x")])
    run = command("importentities", str(path))
    assert run.error and "1 item was rejected" in run.error
    assert stored_ids() == {first}
    assert "line 2: UniqueViolation" in run.stderr and "claimed by line 1" in run.stderr


def test_strict_stops_at_the_first_bad_line_with_nothing_of_its_batch_written(tmp_path):
    good = ids(10)
    body = [line(i, n=n) for n, i in enumerate(good)]
    body.insert(5, line(good[0], a={"$when": "now"}))  # line 6
    body.insert(7, "not json")  # line 8: after the first, not reported
    path = write(tmp_path / "strict.jsonl", body)
    run = command("importentities", str(path), "--strict", "--batch-size", "4")
    assert run.error and run.error.startswith("--strict: line 6: ")
    assert "unknown tag" in run.error
    assert stored_ids() == set(good[:4])  # the first batch (lines 1-4); lines 5-8 none
    assert "nothing of its batch was written" in run.error
    assert "line 6" not in run.stderr  # said once, by the error
    assert not (tmp_path / "strict.jsonl.rejects.jsonl").exists()


def test_strict_stops_at_a_unique_conflict_before_writing_its_batch(tmp_path):
    Entity.objects.create(username="taken")
    good = ids(3)
    path = write(
        tmp_path / "s.jsonl", [line(good[0]), line(good[1], username="taken"), line(good[2])]
    )
    run = command("importentities", str(path), "--strict")
    assert run.error and "line 2: UniqueViolation" in run.error
    assert not (stored_ids() & set(good))


def test_a_conflict_that_appears_while_writing_is_rejected_and_the_rest_written(
    tmp_path, monkeypatch
):
    """A unique value claimed between the check and the write (a concurrent writer): the
    claim itself refuses it; that line is rejected and the batch written without it."""
    from schemaless_store.backup import batch_checks

    holder = Entity.objects.create(username="raced")
    monkeypatch.setattr(batch_checks, "unique_conflicts", lambda rows: {})
    good = ids(4)
    body = [line(good[0]), line(good[1], username="raced"), line(good[2]), line(good[3])]
    run = command("importentities", str(write(tmp_path / "r.jsonl", body)))
    assert run.error and "1 item was rejected" in run.error
    assert "line 2: UniqueViolation" in run.stderr
    assert stored_ids() == {str(holder.id), good[0], good[2], good[3]}
    assert_exact()


def test_a_conflict_on_a_later_shard_counts_the_batches_written_before_it(tmp_path, monkeypatch):
    """The first shard's batch commits, the second's claim is refused and the batch retried
    without that line: the first shard's entities count as written, not as already stored."""
    from schemaless_store.backup import batch_checks
    from schemaless_store.topology import bucket_map, shards

    Entity.objects.create(username="raced-late")
    monkeypatch.setattr(batch_checks, "unique_conflicts", lambda rows: {})
    aliases = shards.shard_aliases()
    on = {
        alias: [i for i in ids(40) if bucket_map.alias_for(uuid.UUID(i).bytes) == alias]
        for alias in aliases
    }
    first, second = on[aliases[0]], on[aliases[1]]
    body = [line(first[0]), line(second[0], username="raced-late"), line(first[1]), line(second[1])]
    summary = Importer(Entity).run(JsonLinesFile(write(tmp_path / "late.jsonl", body)))
    assert summary.rejected == 1
    assert (summary.written, summary.unchanged) == (3, 0)


def test_an_interrupted_import_resumes_by_running_it_again(tmp_path):
    path = write(tmp_path / "i.jsonl", [line(i, n=n) for n, i in enumerate(ids(9))])
    importer = Importer(Entity, batch_size=3)
    real = importer._apply

    def stop_after_first(checked, summary):
        importer.stop()  # as SIGINT does: this batch finishes, the next does not start
        return real(checked, summary)

    importer._apply = stop_after_first  # type: ignore[method-assign]
    summary = importer.run(JsonLinesFile(path))
    assert summary.interrupted and summary.written == 3
    assert "run the same command again" in " ".join(summary.warnings())
    run = command("importentities", str(path))
    assert "imported 9 entities (6 new, 3 already stored)" in run.stdout
    assert stored_ids() == set(ids(9))


def test_a_truncated_export_is_imported_and_said_to_be_incomplete(tmp_path):
    NumberedFactory.create_batch(4)
    path = tmp_path / "t.jsonl"
    export(path)
    before = entities()
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    wipe()
    run = command("importentities", str(path))
    assert run.error is None
    assert "no end line" in run.stderr
    assert entities() == before


def test_options_that_do_not_go_together():
    assert "FILE" in command("importentities").error
    assert "not both" in command("importentities", "x.jsonl", from_model="testapp.LegacyPost").error
    assert (
        "--json-field goes with --from-model"
        in command("importentities", "x.jsonl", json_field="data").error
    )


def test_stdin(tmp_path, monkeypatch):
    import io
    import sys

    text = line(ids(1)[0], a=1) + "\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    run = command("importentities", "-")
    assert run.error is None and stored_ids() == set(ids(1))


def test_the_store_answers_the_same_after_a_restore(tmp_path):
    props = [
        {"user_id": bytes([n % 3]), "published": n, "link": f"l{n % 4}", "tags": ["a", str(n)]}
        for n in range(30)
    ]
    Entity.objects.bulk_put(props)
    before, asked = entities(), answers(entities())
    path = tmp_path / "r.jsonl"
    export(path)
    wipe()
    assert command("importentities", str(path)).error is None
    assert set(entities()) == set(before)
    assert all(same(entities()[i], p) for i, p in before.items())
    assert answers(entities()) == asked
    assert_exact()
