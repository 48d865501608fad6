"""What an import reads, one item at a time, whatever its source (a JSON Lines file, the rows
of a Django model): where the item came from, what it stands for or why it stands for
nothing, and its original text for the reject file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .lines import Line


@dataclass(slots=True)
class Item:
    where: dict[str, Any]  # {"line": 12} or {"pk": 7}: named in reports and the reject file
    line: Line | None  # what it stands for, or None if it is bad
    error: str = ""  # why it is bad
    text: str | None = None  # the original line, if any
    size: int = 1  # progress units it accounts for (bytes of a file, one row of a model)

    def describe(self) -> str:
        return ", ".join(f"{key} {value}" for key, value in self.where.items())


class Source(Protocol):
    """An import's input: items in order, and the progress bar's total and unit."""

    unit: str

    def total(self) -> int | None: ...

    def __iter__(self) -> Iterator[Item]: ...
