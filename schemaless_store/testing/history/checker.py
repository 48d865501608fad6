"""The checker: reads a history (:mod:`.records`) and nothing else, and names every anomaly it
proves. Every value a client writes is unique (``"<process>-<index>"``), so each one seen by a
read names the one operation that wrote it.

List keys (appends through ``modify``, reads of the whole list) and register keys (plain saves,
creates, modifies that set the value or delete, reads) are checked for:

- ``lost``: an acknowledged write missing. On a list, an element appended with ``ok`` (or seen
  by a read that had completed) is absent from a read that began after. On a register, a read
  returns a value that an acknowledged write, begun after that value's write was acknowledged
  and finished before the read began, should have replaced; or a read finds nothing although an
  acknowledged write finished before it began and no delete may fall between that write and
  the read (each write judged on its own, whatever comes later); or a value a ``modify``
  replaced is read again after that ``modify`` was acknowledged.
- ``duplicated``: an element twice in one read of a list (a write applied twice).
- ``phantom``: a value no operation ever wrote to that key.
- ``failed_present``: a value whose write ended in a definite failure, seen by a read.
- ``not_prefix``: two reads of one list where neither is a prefix of the other.
- ``resurrected``: a value an acknowledged delete removed, read again after that delete.

A register's value is indexed: a ``find`` looks a value up through the index, and is checked for

- ``index_missed``: the key's entity absent from the answer although the value's write was
  acknowledged before the find began and no other write of the key (but definite failures)
  overlaps the time from that write's start to the find's end: the entity held the value
  throughout, so its index row was there (the write protocol's I1) and the answer must have it;
- ``index_wrong``: any other entity in the answer (a value is written to one key only, and a
  query re-checks every entity it returns).

``Report.finds_proven`` counts the finds whose answer the history decides, so that a run shows
how much of the index it really checked.

Each needs only that the store is linearizable per key, as its reads from the primary are.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections import defaultdict
from typing import Any

from .findings import EXAMPLES, KINDS, Report
from .records import WRITES, History, Op

__all__ = ["EXAMPLES", "KINDS", "Report", "check"]
LIST_KEYS = ("list-", "cell-")  # keys whose reads return lists: appends, map runs, cell puts

# A write of unknown outcome is taken to land as late as this after its completion was
# recorded (a statement the server still ran: the clients' read_timeout, 30 s), for a find,
# unless it is ``settled`` (no answer was lost: whatever landed did so before its end).
UNKNOWN_GRACE = 30.0


def check(history: History) -> Report:
    report = Report()
    report.lost_answers = {
        (str(fault.detail.get("process")), int(fault.detail.get("op", -1)))
        for fault in history.faults
        if fault.nemesis == "lose-commit"
        or (fault.nemesis == "kill-commit" and fault.detail.get("answer") != "answered")
    }
    for op in history.ops:
        name = f"{op.f} {op.outcome}"
        report.ops[name] = report.ops.get(name, 0) + 1
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history.ops:
        by_key[op.key].append(op)
    for key, ops in by_key.items():
        writers = {op.value: op for op in ops if op.f in WRITES and op.value is not None}
        reads = [op for op in ops if op.f == "read" and op.outcome == "ok"]
        if key.startswith(LIST_KEYS) or any(isinstance(read.result, list) for read in reads):
            check_list(report, key, writers, reads)
        else:
            check_register(report, key, ops, writers, reads)
            check_finds(report, key, ops, writers)
            check_versions(report, key, ops)
    check_claims(report, history.ops)
    return report


def check_versions(report: Report, key: str, ops: list[Op]) -> None:
    """A register's kept versions (``history`` reads), as a list of the values written, oldest
    first (deletions left out): every acknowledged write has its version, once, and two reads
    are prefixes of one another."""
    versions = [op for op in ops if op.f == "history" and op.outcome == "ok"]
    if not versions:
        return
    report.versions_read += len(versions)
    writers = {
        op.value: op for op in ops if op.f in WRITES and op.f != "delete" and op.value is not None
    }
    reads = [
        dataclasses.replace(op, result=[value for value in op.result or [] if value is not None])
        for op in versions
    ]
    check_list(report, f"{key} versions", writers, reads)


def check_claims(report: Report, ops: list[Op]) -> None:
    """``unique_violated``: two claim keys holding one token in the final reads (nothing
    writes by then). A claim's value ends with its token (``@t<n>``)."""
    holders: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.process == "final" and op.f == "read" and op.key.startswith("claim-"):
            if op.outcome != "ok":
                continue
            report.claims_checked += 1
            if isinstance(op.result, str) and "@" in op.result:
                holders[op.result.rpartition("@")[2]].append(op)
    for token, reads in holders.items():
        if len(reads) > 1:
            report.add(
                "unique_violated",
                token,
                token=token,
                keys=[read.key for read in reads],
                values=[read.result for read in reads],
            )


def seen_values(read: Op) -> list[Any]:
    if read.result is None:
        return []
    return list(read.result) if isinstance(read.result, list) else [read.result]


def check_values(report: Report, key: str, writers: dict[Any, Op], reads: list[Op]) -> None:
    """Phantoms and definite failures, on either kind of key."""
    for read in reads:
        for value in seen_values(read):
            writer = writers.get(value)
            if writer is None:
                report.add("phantom", (key, value), key=key, value=value, read=read.brief())
            elif writer.outcome == "fail":
                report.add(
                    "failed_present",
                    (key, value),
                    writer,
                    key=key,
                    value=value,
                    write=writer.brief(),
                    read=read.brief(),
                )


def check_list(report: Report, key: str, writers: dict[Any, Op], reads: list[Op]) -> None:
    check_values(report, key, writers, reads)
    lists = [read for read in reads if isinstance(read.result, list)]
    for read in lists:
        counted: dict[Any, int] = defaultdict(int)
        for element in read.result:
            counted[element] += 1
        for element, times in counted.items():
            if times > 1:
                writer = writers.get(element)
                report.add(
                    "duplicated",
                    (key, element),
                    writer,
                    key=key,
                    element=element,
                    times=times,
                    write=writer.brief() if writer else None,
                )
    # What must be there from a moment on: an acknowledged append from its completion, an
    # element a completed read saw from that read's completion.
    earliest: dict[Any, tuple[float, Op]] = {}
    sources = [(op, [op.value]) for op in writers.values() if op.outcome == "ok"]
    for op, elements in sources + [(read, read.result) for read in lists]:
        for element in elements:
            if element not in earliest or op.end < earliest[element][0]:
                earliest[element] = (op.end, op)
    musts = sorted(
        ((since, element, why) for element, (since, why) in earliest.items()),
        key=lambda must: must[0],
    )
    for read in sorted(lists, key=lambda op: op.start):
        present = set(read.result)
        for since, element, why in musts:
            if since >= read.start:
                break
            if element not in present:
                report.add(
                    "lost",
                    (key, element),
                    key=key,
                    element=element,
                    known_from=why.brief(),
                    read=read.brief(),
                )
    shapes = sorted({tuple(read.result) for read in lists}, key=len)
    for shorter, longer in itertools.pairwise(shapes):
        if longer[: len(shorter)] != shorter:
            report.add(
                "not_prefix",
                (key, shorter, longer),
                key=key,
                one=list(shorter),
                other=list(longer),
            )


def check_register(
    report: Report, key: str, ops: list[Op], writers: dict[Any, Op], reads: list[Op]
) -> None:
    check_values(report, key, writers, reads)
    acknowledged = [op for op in ops if op.f in WRITES and op.outcome == "ok"]
    superseding = Superseding(acknowledged)
    absent = Absence(ops, acknowledged)
    for read in reads:
        if read.result is None:
            lost = absent.unexplained(read)
            if lost is not None:
                report.add(
                    "lost",
                    (key, lost.value),
                    key=key,
                    value=lost.value,
                    write=lost.brief(),
                    read=read.brief(),
                )
            continue
        writer = writers.get(read.result)
        if writer is None:
            continue  # a phantom, reported above
        later = superseding.of(writer, read)
        if later is None:
            continue
        kind = "resurrected" if later.f == "delete" else "lost"
        lost = later.value if kind == "lost" else read.result
        report.add(
            kind,
            (key, lost),
            writer,
            key=key,
            value=lost,
            write=later.brief(),
            read=read.brief(),
            came_back=writer.brief(),
        )


class Absence:
    """Which acknowledged write a read that found nothing lost: each write is judged on its
    own (issue 43), whatever comes after it. A write acknowledged before the read began is
    lost unless a delete (acknowledged or unknown) may fall between the two: one that ended
    after the write began (an unknown one may land up to :data:`UNKNOWN_GRACE` after its
    recorded end) and began before the read ended. Of the writes acknowledged before the
    read, the one begun last is the hardest to explain; if a delete explains it, it explains
    every earlier one too."""

    def __init__(self, ops: list[Op], acknowledged: list[Op]) -> None:
        writes = sorted((op for op in acknowledged if op.f != "delete"), key=lambda op: op.end)
        self.write_ends = [op.end for op in writes]
        self.latest_write: list[Op] = []  # writes[:i + 1]'s write begun last
        for op in writes:
            latest = self.latest_write[-1] if self.latest_write else op
            self.latest_write.append(op if op.start >= latest.start else latest)
        deletes = sorted(
            (op for op in ops if op.f == "delete" and op.outcome != "fail"),
            key=lambda op: op.start,
        )
        self.delete_starts = [op.start for op in deletes]
        self.latest_delete_end: list[float] = []  # deletes[:i + 1]'s latest (graced) end
        for op in deletes:
            end = op.end + (UNKNOWN_GRACE if op.outcome == "info" else 0.0)
            previous = self.latest_delete_end[-1] if self.latest_delete_end else -math.inf
            self.latest_delete_end.append(max(previous, end))

    def unexplained(self, read: Op) -> Op | None:
        finished = bisect.bisect_left(self.write_ends, read.start)
        if not finished:
            return None
        write = self.latest_write[finished - 1]
        begun = bisect.bisect_left(self.delete_starts, read.end)
        if begun and self.latest_delete_end[begun - 1] > write.start:
            return None
        return write


class Superseding:
    """Which acknowledged write must have replaced a value before a read began: a ``modify``
    that saw the value and replaced it, or any write begun after the value's write was
    acknowledged. Indexed by completion time, so that a long history is checked in
    ``n log n``."""

    def __init__(self, acknowledged: list[Op]) -> None:
        self.by_end = sorted(acknowledged, key=lambda op: op.end)
        self.ends = [op.end for op in self.by_end]
        # by_end[:i + 1]'s write begun last; the first write (by completion) to replace a value.
        self.latest_start: list[Op] = []
        self.replacing: dict[Any, Op] = {}
        for op in self.by_end:
            latest = self.latest_start[-1] if self.latest_start else op
            self.latest_start.append(op if op.start >= latest.start else latest)
            if op.prev is not None:
                self.replacing.setdefault(op.prev, op)

    def of(self, writer: Op, read: Op) -> Op | None:
        replaced = self.replacing.get(writer.value)
        if replaced is not None and replaced.end < read.start:
            return replaced
        finished = bisect.bisect_left(self.ends, read.start)  # those that ended before it
        if finished and self.latest_start[finished - 1].start > writer.end:
            return self.latest_start[finished - 1]
        return None


def check_finds(report: Report, key: str, ops: list[Op], writers: dict[Any, Op]) -> None:
    """The answers of ``find`` on a register key (``index_missed``, ``index_wrong``)."""
    finds = [op for op in ops if op.f == "find" and op.outcome == "ok"]
    if not finds:
        return
    # Every write of the key that may have taken effect, by start; for each prefix of them, the
    # latest end and the op that has it, and the latest end of any other (n log n in all).
    changes = sorted(
        (op for op in ops if op.f in WRITES and op.outcome != "fail"), key=lambda op: op.start
    )
    starts = [op.start for op in changes]
    latest: list[tuple[float, Op | None, float]] = []
    best, best_op, second = -math.inf, None, -math.inf
    for op in changes:
        end = op.end + (UNKNOWN_GRACE if op.outcome == "info" and not op.settled else 0.0)
        if end > best:
            best, best_op, second = end, op, best
        elif end > second:
            second = end
        latest.append((best, best_op, second))
    for find in finds:
        answer = list(find.result or [])
        others = [found for found in answer if found != key]
        if others:
            report.add("index_wrong", (key, find.value), key=key, others=others, find=find.brief())
        writer = writers.get(find.value)
        if writer is None or writer.outcome != "ok" or writer.end >= find.start:
            continue
        # Any write but the value's own begun before the find ended and ended after the
        # value's write began: the entity may not have held the value throughout.
        begun = bisect.bisect_left(starts, find.end)
        best, best_op, second = latest[begun - 1]
        if (second if best_op is writer else best) > writer.start:
            continue
        report.finds_proven += 1
        if key not in answer:
            report.add(
                "index_missed",
                (key, find.value),
                writer,
                key=key,
                value=find.value,
                write=writer.brief(),
                find=find.brief(),
            )
