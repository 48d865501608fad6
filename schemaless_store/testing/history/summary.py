"""What a history run did, counted from its records (:mod:`.records`) for its report and for
``summary.json`` beside the history, which the suite's run asserts on
(tests/reliability/test_history.py): operations by outcome and kind, each fault injected,
moves by how they ended, injection errors, and the checker's counts (:mod:`.checker`).

A fault counts when it was injected, not tried: a ``kill-commit`` whose ``KILL`` was sent
(``kill`` = ``killed``; how many of those lost the client its answer is told apart), a move
when a ``movebuckets`` run ended with status 0 (``moves completed``; every run, resumed ones
included, is ``runs``; a run whose output says the move is held, ``held``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from .findings import Report
from .records import Fault, History

# A fault's phases that are not faults of their own: its end (a move's end, a server's
# restart), and a Galera node's failed rejoin (started again at once).
ENDS = ("end", "restarted", "rejoin-failed")


def injected(faults: list[Fault]) -> list[Fault]:
    """The faults themselves, not their ends (a move's end, a server's restart), nor a
    ``kill-commit`` whose ``KILL`` could not be sent."""
    return [
        fault
        for fault in faults
        if fault.detail.get("phase") not in ENDS
        and not (fault.nemesis == "kill-commit" and fault.detail.get("kill") != "killed")
    ]


@dataclass
class Summary:
    seed: int
    ops: dict[str, int] = field(default_factory=dict)  # total, ok, fail, info
    workload: dict[str, dict[str, int]] = field(default_factory=dict)  # f -> outcome -> count
    faults: dict[str, int] = field(default_factory=dict)
    answers_lost_by_kill_commit: int = 0
    # lock-wait faults during which a write waited on the lock (its client gives up on the
    # answer after read_timeout, shorter than the hold)
    lock_waits_met: int = 0
    moves: dict[str, int] = field(default_factory=dict)  # runs, completed, held
    # runcleaner --once runs beside the clients (the cleaner nemesis): runs, completed
    cleaner_runs: dict[str, int] = field(default_factory=lambda: {"runs": 0, "completed": 0})
    injection_errors: int = 0
    finds_proven: int = 0
    updates_on_the_server: int = 0  # acknowledged partial updates the server applied itself
    value_unindexed: bool = False  # --no-value-index: no finds, so no index_missed/_wrong
    versions_read: int = 0
    claims_checked: int = 0
    anomalies: int = 0
    found: dict[str, int] = field(default_factory=dict)
    failed_clients: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        faults = ", ".join(f"{name} {count}" for name, count in sorted(self.faults.items()))
        ops = self.ops
        return [
            f"operations: {ops['total']} (ok {ops['ok']}, fail {ops['fail']}, info {ops['info']})",
            "workload ok: "
            + ", ".join(f"{f} {o.get('ok', 0)}" for f, o in sorted(self.workload.items())),
            f"faults injected: {faults or 'none'}",
            f"kill-commit answers lost: {self.answers_lost_by_kill_commit}; lock-waits a write "
            f"waited on: {self.lock_waits_met}",
            f"moves completed: {self.moves['completed']} (runs {self.moves['runs']}, "
            f"held {self.moves['held']})",
            f"cleaner runs completed: {self.cleaner_runs['completed']} "
            f"(runs {self.cleaner_runs['runs']})",
            f"injection errors: {self.injection_errors}",
            f"partial updates applied by the server (one statement): {self.updates_on_the_server}",
            *(
                ["finds: none (--no-value-index: the registers' value is not indexed)"]
                if self.value_unindexed
                else []
            ),
        ]


def summarize(
    seed: int, history: History, report: Report, errors: int, failed: list[int]
) -> Summary:
    summary = Summary(seed, injection_errors=errors, failed_clients=failed)
    outcomes = Counter(op.outcome for op in history.ops)
    summary.ops = {"total": len(history.ops), **{k: outcomes[k] for k in ("ok", "fail", "info")}}
    for op in history.ops:
        by_outcome = summary.workload.setdefault(op.f, {})
        by_outcome[op.outcome] = by_outcome.get(op.outcome, 0) + 1
    faults = injected(history.faults)
    summary.faults = dict(sorted(Counter(fault.nemesis for fault in faults).items()))
    summary.answers_lost_by_kill_commit = sum(
        1
        for fault in faults
        if fault.nemesis == "kill-commit" and fault.detail.get("answer") != "answered"
    )
    summary.lock_waits_met = sum(
        1 for fault in faults if fault.nemesis == "lock-wait" and fault.detail.get("waiting", 0) > 0
    )
    ends = [f for f in history.faults if f.nemesis == "move" and f.detail.get("phase") == "end"]
    summary.moves = {
        "runs": len(ends),
        "completed": sum(1 for end in ends if end.detail.get("returncode") == 0),
        "held": sum(1 for end in ends if end.detail.get("held")),
    }
    summary.faults.pop("move", None)  # moves are counted by how they ended
    runs = [f for f in history.faults if f.nemesis == "cleaner"]
    summary.cleaner_runs = {
        "runs": len(runs),
        "completed": sum(1 for run in runs if run.detail.get("returncode") == 0),
    }
    summary.faults.pop("cleaner", None)  # counted by how they ended, as moves
    summary.finds_proven = report.finds_proven
    summary.updates_on_the_server = sum(
        1 for op in history.ops if op.f == "update" and op.outcome == "ok" and op.via == "server"
    )
    summary.versions_read = report.versions_read
    summary.claims_checked = report.claims_checked
    summary.anomalies = report.anomalies
    summary.found = report.counts()
    return summary
