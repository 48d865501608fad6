"""A history's records, as Jepsen writes them: one line per invocation, one per completion, one
per fault, each a JSON object in a ``.jsonl`` file (a file per writer, so that no two processes
share one). :func:`load` pairs them into :class:`Op` and :class:`Fault` values for the checker.

- invocation: ``{"type": "invoke", "process", "index", "f", "key", "value", "time"}``;
- completion: ``{"type": "ok" | "fail" | "info", "process", "index", "time"}`` with ``result``
  (what a read returned), ``via`` (where the entity cache found it) and ``heard`` (for a read
  from the near cache, when its last answered ``PING`` was sent), ``prev`` (the value a
  modify replaced or deleted), ``error``, and ``settled`` (an ``info`` that cannot land after
  its completion);
- fault: ``{"type": "fault", "nemesis", "time", "detail"}``.

``ok``: the operation took effect; ``fail``: it definitely did not; ``info``: unknown, it may
have (an invocation with no completion, its process gone, is ``info`` too). Times are
``time.monotonic()`` seconds, one clock for every process on the machine.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

OUTCOMES = ("ok", "fail", "info")
# What a client does (``workload.py``): an append to a list key (through ``modify``) or by a
# ``map_entities`` run ("map"), a cell version ("cellput"); on a register key a plain save, a
# create, a modify that sets the value ("write"), a modify that deletes, the partial update
# ("update"), a bulk_put ("bulk"), a save under a unique index ("claim"); reads.
WRITES = (
    "append",
    "map",
    "cellput",
    "save",
    "create",
    "write",
    "delete",
    "update",
    "bulk",
    "claim",
)
# A register's value looked up through the index (``filter_index``): its result is the keys
# whose entity the query returned. "history": the values of a register's kept versions.
FUNCTIONS = (*WRITES, "read", "find", "history")


@dataclass
class Op:
    """One operation: its invocation and its completion, paired."""

    process: str
    index: int
    f: str
    key: str
    value: Any = None
    start: float = 0.0
    end: float = math.inf
    outcome: str = "info"
    result: Any = None
    prev: Any = None
    error: str = ""
    # a read: where the entity cache found it (near, redis, shard); an update: its route
    # (server, locked read)
    via: str = ""
    heard: float | None = None  # a near read: when the near cache's last answered PING was sent
    asked: float | None = None  # a near read judged from ``heard``: when it was really invoked
    # An unknown outcome that cannot land after its completion (no answer was lost: a part of
    # a bulk_put refused before anything was sent, another part perhaps committed).
    settled: bool = False

    def brief(self) -> dict[str, Any]:
        """What a report shows of it."""
        shown: dict[str, Any] = {"process": self.process, "f": self.f, "key": self.key}
        shown["outcome"] = self.outcome
        if self.value is not None:
            shown["value"] = self.value
        if self.f in ("read", "find", "history"):
            shown["result"] = self.result
        if self.prev is not None:
            shown["prev"] = self.prev
        if self.error:
            shown["error"] = self.error[:120]
        if self.via:
            shown["via"] = self.via
        if self.heard is not None:
            shown["heard"] = round(self.heard, 4)
        shown["start"], shown["end"] = round(self.start, 3), round(self.end, 3)
        return shown


@dataclass
class Fault:
    nemesis: str
    time: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class History:
    ops: list[Op]
    faults: list[Fault]


class Recorder:
    """Appends records to one file, a line at a time, flushed (a SIGKILLed writer leaves every
    line it wrote); thread-safe, for the nemesis threads sharing one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"time": time.monotonic(), **record}, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def invoke(self, process: str, index: int, f: str, key: str, value: Any = None) -> None:
        self.write(
            {
                "type": "invoke",
                "process": process,
                "index": index,
                "f": f,
                "key": key,
                "value": value,
            }
        )

    def complete(self, process: str, index: int, outcome: str, **details: Any) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"an outcome is one of {OUTCOMES}, not {outcome!r}")
        self.write({"type": outcome, "process": process, "index": index, **details})

    def fault(self, nemesis: str, **detail: Any) -> None:
        self.write({"type": "fault", "nemesis": nemesis, "detail": detail})

    def close(self) -> None:
        self._file.close()


def parse(lines: Iterable[str]) -> History:
    """Pair invocations with completions; a line cut short by a kill is skipped."""
    ops: dict[tuple[str, int], Op] = {}
    faults: list[Fault] = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = record.get("type")
        if kind == "fault":
            faults.append(Fault(record["nemesis"], record["time"], record.get("detail", {})))
        elif kind == "invoke":
            if record["f"] not in FUNCTIONS:
                raise ValueError(f"unknown operation {record['f']!r} in {line!r}")
            key = (str(record["process"]), int(record["index"]))
            ops[key] = Op(
                key[0], key[1], record["f"], record["key"], record.get("value"), record["time"]
            )
        elif kind in OUTCOMES:
            op = ops.get((str(record["process"]), int(record["index"])))
            if op is None:
                raise ValueError(f"a completion with no invocation: {line!r}")
            op.outcome, op.end = kind, record["time"]
            op.result, op.prev = record.get("result"), record.get("prev")
            op.error = record.get("error", "")
            op.via, op.heard = record.get("via", ""), record.get("heard")
            if op.via == "near" and op.heard is not None and op.heard < op.start:
                # What a read from the near cache promises across processes: every write
                # acknowledged before ``heard`` (docs/cache.md#across-processes), so it is judged
                # as a read that may have taken effect from then on.
                op.asked, op.start = op.start, op.heard
            op.settled = bool(record.get("settled", False))
    return History(sorted(ops.values(), key=lambda op: op.start), sorted(faults, key=_at))


def _at(fault: Fault) -> float:
    return fault.time


def load(paths: Iterable[Path]) -> History:
    lines: list[str] = []
    for path in paths:
        lines += path.read_text(encoding="utf-8").splitlines()
    return parse(lines)
