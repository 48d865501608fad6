"""Reading a JSON Lines file (an export, or one written by another tool) as import items."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .items import Item
from .lines import BadLine, read


class JsonLinesFile:
    """The lines of ``path`` (``"-"``: standard input), numbered from 1; blank lines are
    skipped. A line that is not UTF-8 is a bad line like any other."""

    unit = "B"
    item_name = "line"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)

    def total(self) -> int | None:
        if self.path == "-":
            return None
        try:
            return os.path.getsize(self.path)
        except OSError:
            return None

    def __iter__(self) -> Iterator[Item]:
        if self.path == "-":
            yield from self._items(sys.stdin.buffer)
            return
        with open(self.path, "rb") as stream:
            yield from self._items(stream)

    def _items(self, stream: BinaryIO) -> Iterator[Item]:
        for number, raw in enumerate(stream, start=1):
            if raw.isspace():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                reason = f"not UTF-8 text (byte {exc.start + 1})"
                yield Item({"line": number}, None, reason, raw.decode("utf-8", "replace"), len(raw))
                continue
            try:
                line = read(text)
            except BadLine as exc:
                yield Item({"line": number}, None, str(exc), text, len(raw))
                continue
            yield Item({"line": number}, line, "", text, len(raw))
