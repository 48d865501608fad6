"""``manage.py runcleaner``: backfill building indexes, repair and sweep every index.

The loop lives in :class:`schemaless_store.cleaner.Cleaner`; this command parses options, hands
them over by keyword, shows the cleaner's messages at the chosen verbosity and prints a summary.
See ``docs/cleaner.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from schemaless_store.cleaner.worker import DEFAULT_BATCH_SIZE, DEFAULT_INTERVAL, Cleaner
from schemaless_store.exceptions import ConfigurationError

from ..arguments import (
    add_throttle_arguments,
    niceness,
    seconds,
    shard_alias,
    throttle_options,
    whole_number,
)
from ..progress import progress_stream

LOGGER = "schemaless_store.cleaner"
LOG_LEVELS = {0: logging.ERROR, 1: logging.INFO}
# The cleaner is background work: by default it yields the CPU to writers on the same machine
# (docs/cleaner.md).
DEFAULT_NICE = 10


class Command(BaseCommand):
    help = (
        "Backfill indexes that are building, then repair every index (insert missing rows, "
        "remove stale ones) and sweep index rows whose entity is gone. Runs until SIGTERM or "
        "SIGINT, or once with --once."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--index",
            action="append",
            dest="indexes",
            metavar="NAME",
            help="Only this index (its table name); repeatable. Default: every declared index.",
        )
        parser.add_argument(
            "--shard",
            action="append",
            dest="shards",
            type=shard_alias,
            metavar="ALIAS",
            help="Only this shard (database alias); repeatable. Default: every shard.",
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="One full pass, then exit (0 unless a pass failed). Default: run until "
            "SIGTERM/SIGINT, which finishes the current batch and exits 0.",
        )
        parser.add_argument(
            "--batch-size",
            type=whole_number,
            default=DEFAULT_BATCH_SIZE,
            help=f"Entities or index rows per batch (default {DEFAULT_BATCH_SIZE}).",
        )
        add_throttle_arguments(parser, worker="the cleaner")
        parser.add_argument(
            "--nice",
            type=niceness,
            default=DEFAULT_NICE,
            help="Lower this process's CPU priority by this much (os.nice, 0 to 19; default "
            f"{DEFAULT_NICE}), so that writers on the same machine go first.",
        )
        parser.add_argument(
            "--interval",
            type=seconds,
            default=DEFAULT_INTERVAL,
            help="Without --once: seconds between the end of a round and the start of the next "
            f"(default {DEFAULT_INTERVAL:.0f}).",
        )
        parser.add_argument(
            "--lock-wait",
            type=seconds,
            default=0.0,
            help="Seconds to wait for another cleaner working the same index and shard before "
            "skipping it (default 0: skip at once).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        if options["nice"]:
            os.nice(options["nice"])
        logger = logging.getLogger(LOGGER)
        handler = _CommandLogHandler(self)
        handler.setLevel(LOG_LEVELS.get(verbosity, logging.DEBUG))
        previous_level = logger.level
        # The command prints the cleaner's records itself, at its verbosity: a handler of the
        # project's LOGGING that prints to the same terminal would print each one a second time.
        # Those handlers skip the cleaner's records while the command runs; the others (files,
        # mail, a log service) still get them.
        consoles = _console_handlers(logger, self)
        for console in consoles:
            console.addFilter(_SKIP_CLEANER_RECORDS)
        logger.addHandler(handler)
        logger.setLevel(min(handler.level, logger.getEffectiveLevel()))
        try:
            try:
                cleaner = Cleaner(
                    indexes=options["indexes"],
                    shards=options["shards"],
                    once=options["once"],
                    batch_size=options["batch_size"],
                    **throttle_options(options),
                    interval=options["interval"],
                    lock_wait=options["lock_wait"],
                    progress=verbosity >= 1 and self.stderr.isatty(),
                    progress_file=progress_stream(self),
                )
            except (ConfigurationError, ValueError) as exc:
                raise CommandError(str(exc)) from exc
            summary = cleaner.run()
        finally:
            logger.removeHandler(handler)
            logger.setLevel(previous_level)
            for console in consoles:
                console.removeFilter(_SKIP_CLEANER_RECORDS)
        if verbosity >= 1:
            style = (
                self.style.SUCCESS
                if not (summary.failed or summary.problems)
                else (self.style.WARNING)
            )
            self.stdout.write(style(summary.describe()))
        if options["once"] and (summary.failed or summary.problems):
            reasons = [p.describe() for p in summary.failed] + summary.problems
            raise CommandError("the cleaner did not finish its pass: " + "; ".join(reasons))


class _CommandLogHandler(logging.Handler):
    """The cleaner's log records as command output: warnings and errors on stderr."""

    def __init__(self, command: BaseCommand) -> None:
        super().__init__()
        self.command = command

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.levelno >= logging.ERROR:
                message += f" ({record.exc_info[0].__name__}: {record.exc_info[1]})"  # type: ignore[union-attr]
            style = self.command.style
            if record.levelno >= logging.ERROR:
                self.command.stderr.write(style.ERROR(message))
            elif record.levelno >= logging.WARNING:
                self.command.stderr.write(style.WARNING(message))
            else:
                self.command.stdout.write(message)
        except Exception:
            self.handleError(record)


def _is_cleaner_record(record: logging.LogRecord) -> bool:
    return record.name == LOGGER or record.name.startswith(LOGGER + ".")


class _SkipCleanerRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _is_cleaner_record(record)


_SKIP_CLEANER_RECORDS = _SkipCleanerRecords()


def _console_handlers(logger: logging.Logger, command: BaseCommand) -> list[logging.Handler]:
    """The handlers a record of ``logger`` reaches (its own, then its ancestors' while they
    propagate) that print where the command prints: the process's stdout or stderr, or the
    streams the command was given."""
    streams = [sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__]
    for wrapper in (command.stdout, command.stderr):
        streams.append(getattr(wrapper, "_out", wrapper))
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if not isinstance(handler, logging.StreamHandler) or isinstance(
                handler, logging.FileHandler
            ):
                continue
            if any(handler.stream is stream for stream in streams) and handler not in found:
                found.append(handler)
        current = current.parent if current.propagate else None
    return found
