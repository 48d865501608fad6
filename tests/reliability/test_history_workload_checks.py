"""The history checker on the workload of issue 43 (schemaless_store/testing/history/): an
entity's kept versions, the claims under a unique index, cell and map keys, the kill-commit
fault's lost answers, reads served by the near cache; and the run's summary (summary.py),
which counts faults injected (not tried) and moves completed (not attempted). Hand-made
histories, no database: fast, on both backends."""

from __future__ import annotations

import itertools
from typing import Any

from schemaless_store.testing.history.checker import check
from schemaless_store.testing.history.records import Fault, History, Op
from schemaless_store.testing.history.summary import summarize

NUMBERS = itertools.count()


def op(
    f: str,
    key: str,
    start: float,
    end: float,
    outcome: str = "ok",
    value: Any = None,
    result: Any = None,
    process: str = "p0",
    via: str = "",
) -> Op:
    return Op(process, next(NUMBERS), f, key, value, start, end, outcome, result, via=via)


def found(*ops: Op) -> dict[str, int]:
    counts = check(History(list(ops), [])).counts()
    return {kind: count for kind, count in counts.items() if count}


# --- an entity's kept versions (SCHEMALESS["HISTORY"]) ------------------------------------


def test_versions_of_every_acknowledged_write_once_report_nothing():
    history = (
        op("save", "R", 0, 1, value="a"),
        op("bulk", "R", 2, 3, value="b"),
        op("delete", "R", 4, 5),
        op("update", "R", 5.5, 6, "fail", value="x"),  # no entity: nothing written
        op("create", "R", 6, 7, value="c"),
        op("save", "R", 7, 20, "info", value="d"),  # unknown: may have its version
        op("history", "R", 8, 9, result=["a", "b", None, "c"]),
        op("history", "R", 21, 22, result=["a", "b", None, "c", "d"]),
        op("read", "R", 23, 24, result="d"),
    )
    assert found(*history) == {}
    assert check(History(list(history), [])).versions_read == 2


def test_an_acknowledged_write_without_its_version_is_lost():
    assert found(
        op("save", "R", 0, 1, value="a"),
        op("update", "R", 2, 3, value="b"),
        op("history", "R", 4, 5, result=["a"]),
    ) == {"lost": 1}


def test_a_write_kept_twice_is_duplicated_and_a_failed_ones_version_is_failed_present():
    assert found(
        op("write", "R", 0, 1, value="a"),
        op("history", "R", 2, 3, result=["a", "a"]),
    ) == {"duplicated": 1}
    assert found(
        op("save", "R", 0, 1, value="a"),
        op("update", "R", 2, 3, "fail", value="b"),
        op("history", "R", 4, 5, result=["a", "b"]),
    ) == {"failed_present": 1}


def test_two_version_reads_neither_a_prefix_of_the_other():
    assert found(
        op("save", "R", 0, 9, "info", value="a"),
        op("save", "R", 0, 9, "info", value="b"),
        op("history", "R", 1, 2, result=["a"]),
        op("history", "R", 1, 2, result=["b"]),
    ) == {"not_prefix": 1}


# --- claims under a unique index ----------------------------------------------------------


def test_two_claims_holding_one_token_at_the_end_violate_the_unique_index():
    history = [
        op("claim", "claim-0", 0, 1, value="p0-1@t2"),
        op("claim", "claim-1", 0, 1, value="p1-1@t2", process="p1"),
        op("read", "claim-0", 2, 3, result="p0-1@t2", process="final"),
        op("read", "claim-1", 3, 4, result="p1-1@t2", process="final"),
    ]
    report = check(History(history, []))
    assert report.counts()["unique_violated"] == 1 and report.claims_checked == 2
    history[1] = op("claim", "claim-1", 0, 1, value="p1-1@t3", process="p1")
    history[3] = op("read", "claim-1", 3, 4, result="p1-1@t3", process="final")
    assert found(*history) == {}


def test_a_claim_refused_by_the_unique_index_yet_read_is_failed_present():
    assert found(
        op("claim", "claim-0", 0, 1, "fail", value="p0-1@t2"),
        op("read", "claim-0", 2, 3, result="p0-1@t2"),
    ) == {"failed_present": 1}


# --- cells and map runs are lists ---------------------------------------------------------


def test_cell_and_map_keys_are_checked_as_lists_even_before_any_read_has_an_element():
    assert found(
        op("cellput", "cell-0-0", 0, 1, value="a"),
        op("read", "cell-0-0", 2, 3, result=[]),
    ) == {"lost": 1}
    assert found(
        op("map", "list-0-0", 0, 1, value="a"),
        op("append", "list-0-0", 0, 1, value="b"),
        op("read", "list-0-0", 2, 3, result=["b", "a", "a"]),
    ) == {"duplicated": 1}


def test_a_settled_unknown_bulk_write_decides_a_later_find():
    # A bulk_put refused by one shard before anything was sent: the other shard's part
    # committed before the call returned, or never; it cannot land after (no 30 s grace).
    settled = op("bulk", "R", 0, 1, "info", value="b")
    settled.settled = True
    history = (
        settled,
        op("save", "R", 2, 3, value="a"),
        op("find", "R", 4, 5, value="a", result=[]),
    )
    assert found(*history) == {"index_missed": 1}
    assert check(History(list(history), [])).finds_proven == 1
    unsettled = op("bulk", "R", 0, 1, "info", value="b")  # a lost answer: it may land late
    assert found(unsettled, *history[1:]) == {}


# --- the faults and reads the report tells apart ------------------------------------------


def test_a_finding_behind_a_killed_commit_that_lost_its_answer_is_told_apart():
    appended = op("append", "L", 0, 1, value="a", process="p1")
    history = [appended, op("read", "L", 2, 3, result=["a", "a"])]
    lost = {"process": "p1", "op": appended.index, "kill": "killed", "answer": "OperationalError"}
    report = check(History(history, [Fault("kill-commit", 0.5, lost)]))
    assert report.after_lost_answer("duplicated") == 1
    answered = {**lost, "answer": "answered"}
    assert (
        check(History(history, [Fault("kill-commit", 0.5, answered)])).after_lost_answer(
            "duplicated"
        )
        == 0
    )


def test_a_stale_read_from_the_near_cache_is_lost_and_said_so():
    report = check(
        History(
            [
                op("append", "L", 0, 1, value="a", process="p1"),
                op("read", "L", 1.5, 1.6, result=[], via="near"),
            ],
            [],
        )
    )
    assert report.counts()["lost"] == 1 and report.read_from_near_cache("lost") == 1
    assert "lost: 1 (1 read from the near cache)" in report.text()


# --- the run's summary ---------------------------------------------------------------------


def test_the_summary_counts_moves_completed_and_faults_injected_not_tried():
    faults = [
        Fault("move", 1, {"phase": "start"}),
        Fault("move", 2, {"phase": "end", "returncode": 0}),
        Fault("move", 3, {"phase": "start"}),
        Fault("move", 4, {"phase": "end", "returncode": 1, "held": "escaped the fence"}),
        Fault("move", 5, {"phase": "start"}),
        Fault("move", 6, {"phase": "end", "returncode": 1}),
        Fault("kill-commit", 7, {"kill": "killed", "answer": "OperationalError: 2013"}),
        Fault("kill-commit", 8, {"kill": "killed", "answer": "answered"}),
        Fault("kill-commit", 9, {"kill": "OperationalError: (1094, 'Unknown thread id')"}),
        Fault("lock-wait", 10, {"waiting": 2}),
        Fault("lock-wait", 11, {"waiting": 0}),
        Fault("sigkill", 12, {"phase": "killed"}),
        Fault("sigkill", 13, {"phase": "restarted"}),
        Fault("mover-kill", 14, {}),
        Fault("cleaner", 15, {"returncode": 0, "seconds": 1.2}),
        Fault("cleaner", 16, {"returncode": 1, "seconds": 0.4, "output": "shard unavailable"}),
    ]
    ops = [op("save", "R", 0, 1, value="a"), op("read", "R", 2, 3, "fail")]
    history = History(ops, faults)
    summary = summarize(7, history, check(history), errors=1, failed=[])
    assert summary.moves == {"runs": 3, "completed": 1, "held": 1}
    assert summary.faults == {"kill-commit": 2, "lock-wait": 2, "mover-kill": 1, "sigkill": 1}
    assert summary.answers_lost_by_kill_commit == 1 and summary.lock_waits_met == 1
    assert summary.ops == {"total": 2, "ok": 1, "fail": 1, "info": 0}
    assert summary.workload == {"save": {"ok": 1}, "read": {"fail": 1}}
    assert summary.injection_errors == 1 and summary.anomalies == 0
    assert "moves completed: 1 (runs 3, held 1)" in summary.lines()
    # The cleaner's runs are counted by how they ended, as moves: a failing one is no run done.
    assert summary.cleaner_runs == {"runs": 2, "completed": 1}
    assert "cleaner runs completed: 1 (runs 2)" in summary.lines()
