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
    read: int = 0  # items read (entity and cell lines, or rows)
    written: int = 0  # entities written (new, or changed)
    unchanged: int = 0  # entities that were stored exactly so already
    cells: int = 0  # cell versions written or found stored
    rejected: int = 0
    shown: list[Rejected] = field(default_factory=list)  # the first SHOWN_REJECTS
    stopped: Rejected | None = None  # strict: the item the import stopped at
    partial: bool = False  # ... after some of its batch was written (see describe)
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

    def describe(self) -> str:
        imported = self.written + self.unchanged
        rate = imported / self.seconds if self.seconds else 0.0
        text = (
            f"imported {imported:,} entities ({self.written:,} written, {self.unchanged:,} "
            f"already stored so)"
        )
        if self.cells:
            text += f" and {self.cells:,} cell versions"
        text += f" from {self.read:,} items in {self.seconds:.1f} s ({rate:,.0f} entities/s)"
        if self.rejected:
            text += f"; {self.rejected:,} rejected"
            if self.rejects_path:
                text += f" (written to {self.rejects_path})"
        return text

    def warnings(self) -> list[str]:
        found = []
        if self.stopped is not None:
            found.append(
                f"stopped at {self.stopped.describe()}"
                + (
                    "; a concurrent writer claimed the value between the check and the write, "
                    "so entities of this batch on other shards may have been written"
                    if self.partial
                    else "; nothing of its batch was written"
                )
                + ". Fix it and rerun: what was imported is not written again"
            )
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
