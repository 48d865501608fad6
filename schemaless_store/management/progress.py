"""Progress bars (tqdm) of long-running commands, drawn on the command's stderr.

A command's ``self.stderr`` is Django's ``OutputWrapper``, which styles everything written
through it as an error (``style.ERROR``: bold red) when stderr is a terminal, and ends every
write with a newline. A progress bar is neither an error nor a line: tqdm draws through
:class:`UnstyledStream`, which writes through the wrapper's public ``write()`` with no style and
no ending. Warnings and errors the command writes through ``self.stderr`` keep their styling.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, OutputWrapper


class UnstyledStream:
    """A file for tqdm: text goes through ``wrapper.write()`` as it is, unstyled."""

    def __init__(self, wrapper: OutputWrapper) -> None:
        self.wrapper = wrapper

    def write(self, text: str) -> int:
        self.wrapper.write(text, style_func=_plain, ending="")
        return len(text)

    def flush(self) -> None:
        self.wrapper.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno...: the wrapped stream's
        return getattr(self.wrapper, name)


def _plain(text: str) -> str:
    return text


def progress_stream(command: BaseCommand) -> Any:
    """The file tqdm draws on for ``command``: its stderr, unstyled."""
    stream = command.stderr
    return UnstyledStream(stream) if isinstance(stream, OutputWrapper) else stream
