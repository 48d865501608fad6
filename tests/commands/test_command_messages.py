"""What the store's management commands say when they refuse something, and their summaries,
as an operator reads them on the command line: a bad argument is one clear line and a
non-zero exit status, with no Python reprs (``['a', 'b']``, ``{'k': 1}``, ``[Errno 2]``), and
numbers carry their units.

Each command runs as ``manage.py`` runs it (``run_from_argv``: argparse's errors exit with
status 2, a ``CommandError`` prints ``CommandError: ...`` and exits with 1).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import dataclass

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import BaseCommand

from schemaless_store.config.metadata import BucketMove
from schemaless_store.models import Entity
from schemaless_store.moves import plan
from schemaless_store.topology import shards
from tests.support import STORE, buckets
from tests.support.factories import PostFactory

pytestmark = STORE

# What a message must not hold: a list, dict or tuple repr, an errno, an object repr, a trace.
REPR = re.compile(r"\[['\"]|\{['\"]|\(['\"]|\[Errno|<[\w.]+ object|Traceback|\\x[0-9a-f]{2}")
APPS = {"seed": "project.feed"}


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def message(self) -> str:
        """The error line: ``CommandError: ...`` or argparse's ``manage.py X: error: ...``."""
        lines = [line for line in self.err.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def manage(name: str, *args: str, monkeypatch: pytest.MonkeyPatch) -> Ran:
    """``manage.py NAME ARGS``, in this process (on the test databases)."""
    out, err = io.StringIO(), io.StringIO()
    found = load_command_class(APPS.get(name, "schemaless_store"), name)
    command: BaseCommand = type(found)(stdout=out, stderr=err)
    # run_from_argv closes every connection when it ends: the test's own are kept.
    monkeypatch.setattr("django.db.connections.close_all", lambda: None)
    code = 0
    with contextlib.redirect_stderr(err):  # argparse writes its usage and error there
        try:
            command.run_from_argv(["manage.py", name, *args, "--skip-checks"])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())


def refused(ran: Ran, text: str, *, code: int = 1) -> str:
    """Check a refusal: its exit status, one line that says ``text``, no repr in it."""
    assert ran.code == code, ran
    message = ran.message
    prefix = "CommandError: " if code == 1 else ": error: "
    assert prefix in message, ran
    assert text in message, ran
    assert not REPR.search(message), message
    assert ran.err.count("CommandError") + ran.err.count(": error: ") == 1, ran  # said once
    return message


@pytest.fixture(autouse=True)
def restored():
    with buckets.restored_afterwards():
        yield


@pytest.fixture
def two():
    source, target = shards.shard_aliases()[:2]
    return source, target


# --- movebuckets -----------------------------------------------------------------------------


def test_movebuckets_a_backwards_range_is_called_backwards(monkeypatch, two):
    ran = manage("movebuckets", "--to", two[1], "--buckets", "99-0", monkeypatch=monkeypatch)
    message = refused(ran, "--buckets: the range 99-0 is backwards; write the lower number")
    assert "(0-99)" in message and "outside" not in message


def test_movebuckets_a_range_past_the_last_bucket_names_the_bounds(monkeypatch, two):
    ran = manage("movebuckets", "--to", two[1], "--buckets", "4000-5000", monkeypatch=monkeypatch)
    refused(ran, "--buckets: 4000-5000 is outside 0-4095")


def test_movebuckets_a_word_for_buckets(monkeypatch, two):
    ran = manage("movebuckets", "--to", two[1], "--buckets", "some", monkeypatch=monkeypatch)
    refused(ran, "--buckets: 'some' is not a bucket number or a range like 0-1364")


def test_movebuckets_an_unknown_target_lists_the_shards_in_words(monkeypatch):
    ran = manage("movebuckets", "--to", "nosuch", "--buckets", "0-99", monkeypatch=monkeypatch)
    refused(ran, "--to: 'nosuch' is not a shard alias; the shards are shard_0, shard_1")


def test_movebuckets_without_a_target(monkeypatch):
    ran = manage("movebuckets", "--buckets", "0-3", monkeypatch=monkeypatch)
    refused(ran, "give --to ALIAS and --buckets RANGES")


def test_movebuckets_abort_with_no_move(monkeypatch):
    refused(manage("movebuckets", "--abort", monkeypatch=monkeypatch), "no move is in progress")


def test_movebuckets_a_bad_batch_is_argparses_error(monkeypatch, two):
    ran = manage(
        "movebuckets", "--to", two[1], "--buckets", "0-3", "--batch", "0", monkeypatch=monkeypatch
    )
    refused(ran, "argument --batch: must be a whole number of at least 1, not '0'", code=2)


def test_movebuckets_says_what_its_numbers_are_and_sums_up(monkeypatch, two):
    PostFactory.create_batch(30)
    source, target = two
    ran = manage("movebuckets", "--to", target, "--buckets", "0-99", monkeypatch=monkeypatch)
    assert ran.code == 0, ran
    first, last = ran.out.strip().splitlines()
    assert re.fullmatch(
        rf"Move #\d+: 100 buckets \(0-99\) to {target}, from {source} \(100 buckets\)\.", first
    )
    assert re.fullmatch(
        rf"Move #\d+ done: 0-99 now on {target}; [\d,]+ rows? copied \([\d,]+ entit(y|ies)\), "
        r"verified, writes paused (\d+ ms|\d+\.\d s); took (\d+ min )?\d+ s\.",
        last,
    ), last
    assert ran.err == ""  # not a terminal: no progress drawn


def test_movebuckets_status_is_a_table(monkeypatch, two):
    assert (
        manage("movebuckets", "--status", monkeypatch=monkeypatch).out == "No bucket moves yet.\n"
    )
    PostFactory.create_batch(30)
    call_command("movebuckets", "--to", two[1], "--buckets", "0-99", stdout=io.StringIO())
    ran = manage("movebuckets", "--status", monkeypatch=monkeypatch)
    header, rule, row = ran.out.splitlines()
    assert header.split() == [
        "Move", "Phase", "Buckets", "To", "From", "Started", "Took", "Rows", "copied",
        "Writes", "paused", "Verified",
    ]  # fmt: skip
    assert set(rule) == {"-", " "}
    move = BucketMove.objects.get()
    copied = sum(v for k, v in move.counts.items() if k.startswith("copied "))
    cells = re.split(r"\s{2,}", row)
    assert cells[:5] == [f"#{move.pk}", "done", "0-99", two[1], f"{two[0]} (0-99)"], row
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", cells[5]), row
    assert re.fullmatch(r"\d+ s", cells[6]) and cells[7] == f"{copied:,}", row
    assert re.fullmatch(r"\d+ ms|\d+\.\d s", cells[8]) and cells[9] == "yes", row
    assert not REPR.search(ran.out) and "verified" not in ran.out


def test_shardmap_names_a_move_in_progress_in_words(monkeypatch, two):
    found = plan.plan(two[1], list(range(10)))
    move = plan.start(found)
    move.counts = {"copied entities": 3, "copied cell": 2, "replayed": 4}
    move.save()
    out = manage("shardmap", monkeypatch=monkeypatch).out
    line = next(line for line in out.splitlines() if line.startswith("Move #"))
    assert re.fullmatch(
        rf"Move #{move.pk} in progress: buckets 0-9 to {two[1]}, copying \(started "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d; 5 rows \(entities 3, cell 2\) copied, "
        r"4 changes replayed\)\.",
        line,
    ), line


# --- importentities and exportentities --------------------------------------------------------


def test_importentities_a_missing_file_has_nothing_to_resume(monkeypatch, tmp_path):
    missing = tmp_path / "nope.jsonl"
    ran = manage("importentities", str(missing), monkeypatch=monkeypatch)
    message = refused(ran, f"cannot read {missing}: No such file or directory")
    assert "resume" not in message and "nothing was imported" in message


def test_importentities_a_directory_is_not_a_file(monkeypatch, tmp_path):
    ran = manage("importentities", str(tmp_path), monkeypatch=monkeypatch)
    refused(ran, f"cannot read {tmp_path}: Is a directory")


def test_importentities_without_a_source(monkeypatch):
    refused(manage("importentities", monkeypatch=monkeypatch), "give a FILE to import")


def test_importentities_an_unknown_model(monkeypatch):
    ran = manage("importentities", "--from-model", "nope.Model", monkeypatch=monkeypatch)
    refused(ran, "--from-model nope.Model: No installed app with label 'nope'")


def test_importentities_model_options_with_a_file(monkeypatch, tmp_path):
    ran = manage("importentities", "x.jsonl", "--id-field", "uuid", monkeypatch=monkeypatch)
    refused(ran, "--id-field goes with --from-model, not with a file")


def test_importentities_counts_new_and_stored_entities_not_the_header_and_end(
    monkeypatch, tmp_path
):
    PostFactory.create_batch(7)
    path = tmp_path / "all.jsonl"
    call_command("exportentities", "--output", str(path), stdout=io.StringIO())
    assert len(path.read_text().splitlines()) == 9  # the header, 7 entities, the end
    ran = manage("importentities", str(path), monkeypatch=monkeypatch)
    assert ran.code == 0, ran
    assert re.fullmatch(
        r"imported 7 entities \(0 new, 7 already stored\) from 7 lines in \d+\.\d s "
        r"\([\d,]+ entities/s\)",
        ran.out.strip(),
    ), ran.out


def test_importentities_strict_says_why_it_stopped_once(monkeypatch, tmp_path):
    good = json.dumps({"id": "00000000000000000000000000000001", "properties": {"a": 1}})
    control = '{"id": "00000000000000000000000000000002", "properties": {"a": "x\x01y"}}'
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n{control}\nnot json\n")
    ran = manage("importentities", str(path), "--strict", monkeypatch=monkeypatch)
    message = refused(ran, "--strict: line 2: invalid JSON: invalid control character at ")
    assert re.search(r"at character \d+; nothing of its batch was written", message)
    assert "(at character" not in message
    assert "and 1 more" not in ran.err
    assert ran.err.count("line 2") == 1, ran.err  # not also as a warning before it


def test_importentities_lists_each_bad_line_and_counts_the_rest(monkeypatch, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(f"not json {n}\n" for n in range(23)))
    ran = manage("importentities", str(path), monkeypatch=monkeypatch)
    message = refused(ran, f"23 items were rejected (see {path}.rejects.jsonl)")
    assert message.endswith("the others were imported")
    warnings = ran.err.splitlines()
    assert warnings[0] == "line 1: invalid JSON: expecting value at character 1"
    assert f"... and 3 more rejected (all in {path}.rejects.jsonl)" in warnings


def test_exportentities_an_unwritable_file(monkeypatch, tmp_path):
    target = tmp_path / "no" / "such" / "out.jsonl"
    ran = manage("exportentities", "--output", str(target), monkeypatch=monkeypatch)
    refused(ran, f"cannot write {target}: No such file or directory; nothing was exported")


def test_exportentities_an_unknown_shard(monkeypatch):
    ran = manage("exportentities", "--shard", "nope", monkeypatch=monkeypatch)
    refused(ran, "argument --shard: 'nope' is not a shard alias; the shards are shard_0", code=2)


def test_exportentities_a_bad_since(monkeypatch):
    ran = manage("exportentities", "--since", "yesterday", monkeypatch=monkeypatch)
    refused(ran, "argument --since: must be an ISO 8601 date and time", code=2)


def test_exportentities_sums_up_with_units(monkeypatch, tmp_path):
    Entity.objects.bulk_put([PostFactory()])
    path = tmp_path / "one.jsonl"
    ran = manage("exportentities", "--output", str(path), monkeypatch=monkeypatch)
    assert re.match(
        r"exported 1 entity from 2 shards in \d+\.\d s \([\d,]+ entities/s\); started ", ran.out
    ), ran.out


# --- the cleaner, the change feed, dropindex, dumpdata, seed ---------------------------------


def test_runcleaner_an_unknown_shard(monkeypatch):
    ran = manage("runcleaner", "--once", "--shard=shard_9", monkeypatch=monkeypatch)
    refused(ran, "argument --shard: 'shard_9' is not a shard alias; the shards are", code=2)


def test_runcleaner_an_unknown_index(monkeypatch):
    ran = manage("runcleaner", "--once", "--index=nope", monkeypatch=monkeypatch)
    refused(ran, "no index 'nope' is declared; declared indexes: ")


def test_runcleaner_sums_up_with_units(monkeypatch):
    ran = manage("runcleaner", "--once", monkeypatch=monkeypatch)
    assert ran.code == 0, ran
    assert re.match(r"Cleaner finished in \d+\.\d s: \d+ rows inserted", ran.out.splitlines()[-1])


def test_tailchanges_an_unknown_shard(monkeypatch):
    ran = manage("tailchanges", "--once", "--shard", "shard_9", monkeypatch=monkeypatch)
    refused(ran, "argument --shard: 'shard_9' is not a shard alias; the shards are", code=2)


def test_tailchanges_after_a_shard_it_does_not_tail(monkeypatch):
    ran = manage(
        "tailchanges",
        "--once",
        "--shard",
        "shard_0",
        "--after",
        "shard_1=5",
        monkeypatch=monkeypatch,
    )
    refused(ran, "--after names 'shard_1', which is not a tailed shard (tailed: shard_0)")


def test_tailchanges_a_bad_position(monkeypatch):
    ran = manage("tailchanges", "--once", "--after", "shard_0", monkeypatch=monkeypatch)
    refused(ran, "argument --after: expected SHARD=POSITION (e.g. shard_0=1200)", code=2)


def test_tailchanges_a_state_file_that_is_not_json(monkeypatch, tmp_path):
    state = tmp_path / "state.json"
    state.write_text("nonsense")
    ran = manage("tailchanges", "--once", "--state", str(state), monkeypatch=monkeypatch)
    refused(ran, f"cannot read the state file {state}: ")


def test_dropindex_an_unknown_index(monkeypatch):
    ran = manage("dropindex", "--no-input", "nope", monkeypatch=monkeypatch)
    refused(ran, "no index named 'nope' is known")


def test_dumpdata_of_entities_says_what_to_use_in_one_sentence(monkeypatch):
    ran = manage("dumpdata", "schemaless_store.entity", monkeypatch=monkeypatch)
    message = refused(ran, "schemaless_store.entity live on the shards, not in 'default'")
    assert message.endswith(
        "To back the store up, use `manage.py exportentities`; to restore it, "
        "`manage.py importentities` (docs/backup.md)."
    )


def test_seed_entries_without_users(monkeypatch):
    ran = manage("seed", "--users", "0", "--entries", "5", monkeypatch=monkeypatch)
    refused(ran, "entries need authors: give --users 1 or more")


def test_a_bad_count_for_seed(monkeypatch):
    ran = manage("seed", "--users", "-1", monkeypatch=monkeypatch)
    refused(ran, "argument --users: must be a whole number (0 or more), not '-1'", code=2)


def test_no_message_module_writes_a_python_list_into_text():
    """The pattern the checks above use catches what they are meant to."""
    assert REPR.search("shards: ['shard_0', 'shard_1']")
    assert REPR.search("[Errno 2] No such file or directory")
    assert REPR.search("counts {'verified': True}")
    assert not REPR.search("the shards are shard_0, shard_1 (tailed: shard_0)")
