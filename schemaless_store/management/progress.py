"""Progress bars (tqdm) of long-running commands, drawn on the command's stderr."""

from __future__ import annotations

from django.core.management.base import OutputWrapper


class ProgressStream:
    """tqdm redraws its line with ``\\r``: write to the command's stderr without a newline."""

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out

    def write(self, text: str) -> None:
        self.out.write(text, ending="")

    def flush(self) -> None:
        self.out.flush()
