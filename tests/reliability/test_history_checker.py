"""The history checker (schemaless_store/testing/history/checker.py) on hand-made histories:
each anomaly kind fires on a history that has it, and a clean history with concurrency, unknown
outcomes and definite failures reports nothing. No database: fast, on both backends."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from schemaless_store.testing.history.checker import KINDS, check
from schemaless_store.testing.history.records import (
    Fault,
    History,
    Op,
    Recorder,
    load,
    parse,
)

NUMBERS = itertools.count()  # each hand-made operation's index


def op(
    f: str,
    key: str,
    start: float,
    end: float,
    outcome: str = "ok",
    value: Any = None,
    result: Any = None,
    prev: Any = None,
    process: str = "p0",
) -> Op:
    return Op(process, next(NUMBERS), f, key, value, start, end, outcome, result, prev)


def found(*ops: Op) -> dict[str, int]:
    counts = check(History(list(ops), [])).counts()
    return {kind: count for kind, count in counts.items() if count}


# --- list keys ---------------------------------------------------------------------------


def near_read_history(heard: float) -> History:
    """An append acknowledged at 2, then a read from the near cache invoked at 3 that misses
    it, whose near cache had its last PING answered (sent) at ``heard``."""
    lines = [
        {
            "type": "invoke",
            "process": "w",
            "index": 0,
            "f": "append",
            "key": "L",
            "value": "a",
            "time": 1.0,
        },
        {"type": "ok", "process": "w", "index": 0, "time": 2.0},
        {"type": "invoke", "process": "r", "index": 0, "f": "read", "key": "L", "time": 3.0},
        {
            "type": "ok",
            "process": "r",
            "index": 0,
            "time": 3.1,
            "result": [],
            "via": "near",
            "heard": heard,
        },
    ]
    return parse(json.dumps(line) for line in lines)


def test_a_near_cache_read_is_held_to_every_write_acknowledged_before_its_heard():
    """docs/cache.md#across-processes: a read from another process's near cache may miss a
    write whose push it had not applied yet (acknowledged after ``heard``), never one
    acknowledged before."""
    assert check(near_read_history(heard=1.5)).counts().get("lost", 0) == 0
    assert check(near_read_history(heard=2.5)).counts().get("lost", 0) == 1


def test_a_clean_list_history_with_unknowns_and_failures_reports_nothing():
    assert (
        found(
            op("append", "L", 0, 1, value="a"),
            op("append", "L", 0.5, 3, value="b"),  # concurrent with the first read
            op("read", "L", 1.5, 2, result=["a"]),
            op("append", "L", 2, 9, "info", value="c"),  # unknown: may or may not appear
            op("append", "L", 2, 2.5, "fail", value="d"),  # failed: never seen
            op("read", "L", 4, 5, result=["a", "b"]),
            op("read", "L", 6, 7, result=["a", "b", "c"]),
            op("read", "L", 10, 11, result=["a", "b", "c"]),
        )
        == {}
    )


def test_an_acknowledged_append_missing_from_a_later_read_is_lost():
    assert found(
        op("append", "L", 0, 1, value="a"),
        op("read", "L", 2, 3, result=[]),
    ) == {"lost": 1}


def test_an_element_a_completed_read_saw_and_a_later_read_misses_is_lost():
    # The append's outcome is unknown, but a read saw it land: it must stay.
    assert found(
        op("append", "L", 0, 10, "info", value="a"),
        op("read", "L", 1, 2, result=["a"]),
        op("read", "L", 3, 4, result=[]),
    ) == {"lost": 1}


def test_a_read_concurrent_with_an_acknowledged_append_may_miss_it():
    assert found(op("append", "L", 0, 2, value="a"), op("read", "L", 1, 3, result=[])) == {}


def test_an_element_twice_in_a_list_is_duplicated():
    assert found(
        op("append", "L", 0, 1, "info", value="a"),
        op("append", "L", 0, 1, value="b"),
        op("read", "L", 2, 3, result=["a", "b", "a"]),
    ) == {"duplicated": 1}


def test_a_value_never_written_is_a_phantom():
    assert found(
        op("append", "L", 0, 1, value="a"),
        op("read", "L", 2, 3, result=["a", "zz"]),
    ) == {"phantom": 1}
    assert found(op("read", "R", 0, 1, result="zz")) == {"phantom": 1}


def test_a_phantom_is_a_value_written_to_another_key():
    assert found(
        op("append", "L1", 0, 1, value="a"),
        op("append", "L2", 0, 1, value="b"),
        op("read", "L1", 2, 3, result=["a", "b"]),
    ) == {"phantom": 1}


def test_a_definite_failure_seen_by_a_read_is_failed_present():
    assert found(
        op("append", "L", 0, 1, "fail", value="a"),
        op("read", "L", 2, 3, result=["a"]),
    ) == {"failed_present": 1}
    # On a register: a create told EntityExists, yet its value is there.
    assert found(
        op("create", "R", 0, 1, "fail", value="c"),
        op("read", "R", 2, 3, result="c"),
    ) == {"failed_present": 1}


def test_two_reads_neither_a_prefix_of_the_other():
    assert found(
        op("append", "L", 0, 9, "info", value="a"),
        op("append", "L", 0, 9, "info", value="b"),
        op("read", "L", 1, 2, result=["a"]),
        op("read", "L", 1, 2, result=["b"]),
    ) == {"not_prefix": 1}
    assert found(
        op("append", "L", 0, 9, "info", value="a"),
        op("append", "L", 0, 9, "info", value="b"),
        op("read", "L", 1, 2, result=["a", "b"]),
        op("read", "L", 1, 2, result=["b", "a"]),
    ) == {"not_prefix": 1}


# --- register keys -----------------------------------------------------------------------


def test_a_clean_register_history_reports_nothing():
    assert (
        found(
            op("create", "R", 0, 1, value="a"),
            op("save", "R", 0.5, 3, value="b"),  # concurrent with the read of a
            op("read", "R", 1.5, 2, result="a"),
            op("read", "R", 4, 5, result="b"),
            op("write", "R", 6, 7, value="c", prev="b"),
            op("create", "R", 7, 8, "fail", value="x"),  # EntityExists: never seen
            op("delete", "R", 8, 9, prev="c"),
            op("read", "R", 10, 11, result=None),
            op("save", "R", 12, 20, "info", value="d"),
            op("read", "R", 13, 14, result="d"),
            op("read", "R", 21, 22, result="d"),
        )
        == {}
    )


def test_a_value_read_after_a_later_acknowledged_write_means_that_write_was_lost():
    assert found(
        op("save", "R", 0, 1, value="a"),
        op("save", "R", 2, 3, value="b"),
        op("read", "R", 4, 5, result="a"),
    ) == {"lost": 1}


def test_a_value_a_modify_replaced_read_again_means_the_modify_was_lost():
    # The save and the modify overlap (the save's retry after a lost answer), but the modify
    # saw the save's value and replaced it: reading it again after is a lost update.
    assert found(
        op("save", "R", 0, 5, value="a"),
        op("write", "R", 1, 2, value="b", prev="a"),
        op("read", "R", 6, 7, result="a"),
    ) == {"lost": 1}


def test_nothing_read_after_an_acknowledged_write_with_no_delete_after_is_lost():
    assert found(op("save", "R", 0, 1, value="a"), op("read", "R", 2, 3, result=None)) == {
        "lost": 1
    }
    # A delete of unknown outcome that may come after the write explains the absence.
    assert (
        found(
            op("save", "R", 0, 1, value="a"),
            op("delete", "R", 0.5, 9, "info"),
            op("read", "R", 2, 3, result=None),
        )
        == {}
    )


def test_a_lost_write_is_lost_whatever_comes_after_it():
    # Issue 43, finding 6: the absence was judged only for writes begun after the history's
    # last delete, so any later delete hid a lost save. Each write is judged on its own.
    assert found(
        op("save", "R", 0, 1, value="a"),
        op("read", "R", 2, 3, result=None),
        op("delete", "R", 4, 5),
    ) == {"lost": 1}
    assert found(
        op("save", "R", 0, 1, value="a"),
        op("read", "R", 2, 3, result=None),
        op("save", "R", 4, 5, value="b"),
        op("delete", "R", 6, 7, "info"),
        op("read", "R", 8, 9, result=None),
    ) == {"lost": 1}
    # A delete that ended before the write began explains nothing; one that ended after it
    # began (its order unknown) or that overlaps the read does.
    assert found(
        op("delete", "R", 0, 0.5),
        op("save", "R", 1, 2, value="a"),
        op("read", "R", 3, 4, result=None),
    ) == {"lost": 1}
    for delete in (op("delete", "R", 0.5, 1.5), op("delete", "R", 2.5, 3.5)):
        history = (
            op("save", "R", 0, 1, value="a"),
            delete,
            op("read", "R", 3, 4, result=None),
            op("delete", "R", 8, 9),
        )
        assert found(*history) == {}, delete
    # An unknown delete's commit may land up to the grace after its recorded end.
    assert (
        found(
            op("delete", "R", 0, 0.5, "info"),
            op("save", "R", 1, 2, value="a"),
            op("read", "R", 3, 4, result=None),
        )
        == {}
    )


def test_a_deleted_value_read_again_after_the_delete_is_resurrected():
    # The create's retry overlapped the delete (issue 34, item 1), but the delete removed the
    # create's value and was acknowledged: the value must not come back.
    assert found(
        op("create", "R", 0, 5, value="a"),
        op("delete", "R", 1, 2, prev="a"),
        op("read", "R", 6, 7, result="a"),
    ) == {"resurrected": 1}
    assert found(
        op("save", "R", 0, 1, value="a"),
        op("delete", "R", 2, 3, prev="a"),
        op("read", "R", 4, 5, result="a"),
    ) == {"resurrected": 1}


def test_a_failed_delete_resurrects_nothing():
    assert (
        found(
            op("save", "R", 0, 1, value="a"),
            op("delete", "R", 2, 3, "fail", prev="a"),
            op("read", "R", 4, 5, result="a"),
        )
        == {}
    )


# --- finds through the index on a register's value ---------------------------------------


def proven(*ops: Op) -> int:
    return check(History(list(ops), [])).finds_proven


def test_a_find_that_misses_a_value_held_throughout_is_index_missed():
    history = (
        op("save", "R", 0, 1, value="a"),
        op("find", "R", 2, 3, value="a", result=[]),
    )
    assert found(*history) == {"index_missed": 1}
    assert proven(*history) == 1
    # The same answer holding the entity: proven, and nothing found.
    answered = (history[0], op("find", "R", 2, 3, value="a", result=["R"]))
    assert found(*answered) == {}
    assert proven(*answered) == 1


def test_a_find_decides_nothing_when_another_write_of_the_key_may_have_replaced_the_value():
    for other in (
        op("save", "R", 2.5, 4, value="b"),  # begun before the find ended
        op("delete", "R", 0.5, 1.5, "info", prev="a"),  # overlaps the write: unknown order
        op("write", "R", 0.5, 1.5, value="b", prev="a"),
        op("save", "R", 1.5, 1.8, "info", value="b"),  # unknown: may land after its end
        op("save", "R", -1, 0.5, value="b"),  # begun first, ended after the write began
    ):
        history = (op("save", "R", 0, 1, value="a"), other, op("find", "R", 2, 3, value="a"))
        assert found(*history) == {}, other
        assert proven(*history) == 0, other
    # Writes that cannot have come after: one finished before the value's write began, and
    # a definite failure.
    history = (
        op("save", "R", 0, 0.5, value="z"),
        op("save", "R", 1, 2, value="a"),
        op("create", "R", 2.5, 2.8, "fail", value="x"),
        op("find", "R", 3, 4, value="a", result=[]),
    )
    assert found(*history) == {"index_missed": 1}


def test_a_find_of_a_write_not_acknowledged_before_it_began_decides_nothing():
    for write in (
        op("save", "R", 0, 2.5, value="a"),  # acknowledged after the find began
        op("save", "R", 0, 1, "info", value="a"),
    ):
        assert found(write, op("find", "R", 2, 3, value="a", result=[])) == {}


def test_another_entity_in_a_finds_answer_is_index_wrong():
    assert found(
        op("save", "R", 0, 1, value="a"),
        op("save", "S", 0, 1, value="b"),
        op("find", "R", 2, 3, value="a", result=["R", "S"]),
    ) == {"index_wrong": 1}


# --- the report and the records ----------------------------------------------------------


def test_the_report_counts_each_kind_and_shows_examples():
    report = check(
        History(
            [
                op("append", "L", 0, 1, value="a"),
                op("read", "L", 2, 3, result=["zz"]),
            ],
            [],
        )
    )
    text = report.text()
    assert report.anomalies == 2  # "a" lost, "zz" a phantom
    for kind in KINDS:
        assert f"{kind}: " in text
    assert "'zz'" in text and "anomalies: 2" in text


def test_the_report_tells_the_findings_a_lost_commit_answer_is_behind():
    appended = op("append", "L", 0, 1, value="a", process="p1")
    history = History(
        [appended, op("read", "L", 2, 3, result=["a", "a"])],
        [Fault("lose-commit", 0.5, {"process": "p1", "op": appended.index})],
    )
    report = check(history)
    assert report.after_lost_answer("duplicated") == 1
    assert "duplicated: 1 (1 by a write that lost its commit answer)" in report.text()
    assert check(History(history.ops, [])).after_lost_answer("duplicated") == 0


def test_records_written_by_a_recorder_load_back_as_paired_ops(tmp_path: Path):
    recorder = Recorder(tmp_path / "p1.jsonl")
    recorder.invoke("p1", 0, "append", "L", "p1-0")
    recorder.complete("p1", 0, "ok")
    recorder.invoke("p1", 1, "read", "L")
    recorder.complete("p1", 1, "ok", result=["p1-0"])
    recorder.invoke("p1", 2, "delete", "R")  # the process died here
    recorder.fault("kill", server="server1", session=7)
    recorder.close()
    with (tmp_path / "p1.jsonl").open("a") as cut:
        cut.write('{"type": "ok", "proc')  # a line a SIGKILL cut short
    history = load([tmp_path / "p1.jsonl"])
    assert [(o.f, o.outcome) for o in history.ops] == [
        ("append", "ok"),
        ("read", "ok"),
        ("delete", "info"),
    ]
    assert history.ops[1].result == ["p1-0"] and history.ops[2].end == float("inf")
    assert history.faults[0].nemesis == "kill" and history.faults[0].detail["session"] == 7
    assert check(history).anomalies == 0


def test_bad_records_are_refused():
    with pytest.raises(ValueError, match="no invocation"):
        parse([json.dumps({"type": "ok", "process": "p", "index": 1, "time": 0})])
    with pytest.raises(ValueError, match="unknown operation"):
        parse([json.dumps({"type": "invoke", "process": "p", "index": 1, "f": "x", "key": "k"})])
    with pytest.raises(ValueError, match="outcome"):
        Recorder(Path("/dev/null")).complete("p", 1, "maybe")
