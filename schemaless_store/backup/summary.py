"""What an import reports: the items it rejected and why, and its counts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .items import Item
from .lines import End, Header

# Rejected items named in the summary (all go to the reject file).
SHOWN_REJECTS = 20


def reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Rejected:
    item: Item
    reason: str

    def describe(self) -> str:
        return f"{self.item.describe()}: {self.reason}"

    def as_json(self) -> str:
        text = None if self.item.text is None else self.item.text.rstrip("\r\n")
        record = {**self.item.where, "reason": self.reason, "text": text}
        return json.dumps(record, ensure_ascii=False, default=str) + "\n"


@dataclass
class ImportSummary:
    read: int = 0  # items read (every line, or rows)
    framing: int = 0  # of them, an export's header and end lines (not items)
    item_name: str = "item"  # what an item is: "line" of a file, "row" of a model
    written: int = 0  # entities written (new, or changed)
    new: int = 0  # of them, entities that were not stored before
    unchanged: int = 0  # entities that were stored exactly so already
    cells: int = 0  # cell versions written or found stored
    rejected: int = 0
    shown: list[Rejected] = field(default_factory=list)  # the first SHOWN_REJECTS
    stopped: Rejected | None = None  # strict: the item the import stopped at
    partial: bool = False  # ... after some of its batch was written (see stop_reason)
    interrupted: bool = False
    header: Header | None = None
    end: End | None = None
    entity_lines: int = 0
    cell_lines: int = 0
    rejects_path: str | None = None
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.stopped is not None or self.interrupted

    @property
    def items(self) -> int:
        """Entity and cell lines (bad ones too), or rows: what was imported from."""
        return self.read - self.framing

    def describe(self) -> str:
        """``imported 1,191 entities (0 new, 1,191 already stored) from 1,191 lines in 0.2 s
        (5,955 entities/s)``: "new", "changed" (stored with another body: written again) and
        "already stored" (exactly so: not written) add up to the entities imported."""
        imported = self.written + self.unchanged
        rate = imported / self.seconds if self.seconds else 0.0
        parts = [f"{self.new:,} new"]
        if self.written - self.new:
            parts.append(f"{self.written - self.new:,} changed")
        parts.append(f"{self.unchanged:,} already stored")
        text = f"imported {_count(imported, 'entity', 'entities')} ({', '.join(parts)})"
        if self.cells:
            text += f" and {_count(self.cells, 'cell version')}"
        text += (
            f" from {_count(self.items, self.item_name)} in {self.seconds:.1f} s "
            f"({rate:,.0f} entities/s)"
        )
        if self.rejected:
            text += f"; {self.rejected:,} rejected"
            if self.rejects_path:
                text += f" (written to {self.rejects_path})"
        return text

    def stop_reason(self) -> str:
        """Why a ``strict`` import stopped, and what was written (one line)."""
        if self.stopped is None:
            return ""
        return (
            f"{self.stopped.describe()}"
            + (
                "; a concurrent writer claimed the value between the check and the write, "
                "so entities of this batch on other shards may have been written"
                if self.partial
                else "; nothing of its batch was written"
            )
            + ". Fix it and rerun: what was imported is not written again"
        )

    @property
    def more_rejected(self) -> int:
        """Rejected items not shown one by one (the one a strict import stopped at is said
        on its own)."""
        return self.rejected - len(self.shown) - (self.stopped is not None)

    def warnings(self) -> list[str]:
        """What the reader should know besides the counts (not why a strict import stopped:
        :meth:`stop_reason`)."""
        found = []
        if self.interrupted:
            found.append(
                "interrupted: the batches before were imported; run the same command again to "
                "resume (what is stored already is not written again)"
            )
        if self.header is not None and self.end is None and not self.failed:
            found.append(
                "the file has no end line: the export that wrote it did not finish, so it may "
                "not hold every entity"
            )
        if self.end is not None and self.end.entities != self.entity_lines:
            found.append(
                f"the export says it wrote {self.end.entities:,} entities, the file has "
                f"{self.entity_lines:,} entity lines"
            )
        return found


def _count(number: int, singular: str, plural: str = "") -> str:
    return f"{number:,} {singular if number == 1 else plural or singular + 's'}"
