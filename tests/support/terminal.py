"""A command writing to a colour terminal, simulated in-process: streams whose ``isatty()`` is
true, and the command built with ``force_color=True`` as ``manage.py`` builds it on one."""

from __future__ import annotations

import io

from django.core.management.base import BaseCommand

ESC = "\x1b["


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def on_terminal(command_class: type[BaseCommand]) -> tuple[BaseCommand, Terminal, Terminal]:
    out, err = Terminal(), Terminal()
    return command_class(stdout=out, stderr=err, force_color=True), out, err
