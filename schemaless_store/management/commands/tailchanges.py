"""``manage.py tailchanges``: print the change feed as JSON lines, resumably.

One line per change (see :mod:`schemaless_store.cells.feed`)::

    {"shard": "shard_0", "position": 42, "row_key": "…uuid…", "column": "_entity", "ref_key": 3,
     "created_at": "2026-11-23T05:00:00.123456+00:00", "deleted": false, "body": {…}}

``body`` is the reversible JSON view the admin uses (``schemaless_store.values.jsonview``). With
``--state FILE`` the positions reached are saved after every printed batch (written to a
temporary file and renamed, so a crash leaves the old or the new positions, never half a file)
and read back at start: a restarted tail goes on where the last one stopped. A crash between
printing a batch and saving its positions prints that batch again on restart (at least once);
every line carries its ``shard`` and ``position`` so a consumer can drop what it has seen.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from schemaless_store.cells import feed
from schemaless_store.config import conf
from schemaless_store.exceptions import SchemalessError
from schemaless_store.values import bounds, jsonview

from ..arguments import seconds, shard_alias, whole_number


def change_to_json(change: feed.Change) -> dict[str, Any]:
    body = change.body
    return {
        "shard": change.shard,
        "position": change.position,
        "row_key": str(change.row_key),
        "column": change.column_name,
        "ref_key": change.ref_key,
        "created_at": change.created_at.isoformat(),
        "deleted": change.deleted,
        "body": None if body is None else jsonview.properties_to_json(body),
    }


def position_arg(text: str) -> tuple[str, int]:
    alias, sep, number = text.partition("=")
    if not sep or not alias or not number.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected SHARD=POSITION (e.g. shard_0=1200), not {text!r}"
        )
    return alias, int(number)


class Command(BaseCommand):
    help = (
        "Print the change feed (every cell appended, entity versions included when "
        "SCHEMALESS['HISTORY'] is on) as JSON lines, following it until SIGTERM/SIGINT, "
        "or until it is drained with --once."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--shard",
            action="append",
            type=shard_alias,
            help="Only this shard alias (repeat for several).",
        )
        parser.add_argument(
            "--after",
            action="append",
            type=position_arg,
            default=[],
            metavar="SHARD=POSITION",
            help="Start after this position on this shard (overrides --state).",
        )
        parser.add_argument(
            "--state",
            help="A JSON file of positions: read at start, rewritten after each printed batch.",
        )
        parser.add_argument(
            "--from-head",
            action="store_true",
            help="Start shards that have no position at their current end (only new changes).",
        )
        parser.add_argument(
            "--once", action="store_true", help="Print what is there now, then exit 0."
        )
        parser.add_argument(
            "--limit", type=whole_number, default=500, help="Changes read per query (500)."
        )
        parser.add_argument(
            "--sleep",
            type=seconds,
            default=1.0,
            help="Seconds to wait when every shard is drained (1.0).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            aliases = self._aliases(options["shard"])
            state_path = Path(options["state"]) if options["state"] else None
            positions = self._start_positions(aliases, state_path, options)
        except SchemalessError as exc:
            raise CommandError(str(exc)) from exc
        self._stopping = False
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            self._tail(aliases, positions, state_path, options)
        except SchemalessError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stopping = True

    def _aliases(self, wanted: list[str] | None) -> list[str]:
        known = list(conf.get().shards)
        if not wanted:
            return known
        unknown = [alias for alias in wanted if alias not in known]
        if unknown:
            raise CommandError(f"unknown shard {unknown[0]!r}; shards: {known}")
        return list(dict.fromkeys(wanted))

    def _start_positions(
        self, aliases: list[str], state_path: Path | None, options: dict[str, Any]
    ) -> dict[str, int]:
        positions: dict[str, int] = {}
        if state_path is not None and state_path.exists():
            try:
                saved = json.loads(state_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot read the state file {state_path}: {exc}") from exc
            if not isinstance(saved, dict) or not all(bounds.whole(v, 0) for v in saved.values()):
                raise CommandError(
                    f"the state file {state_path} is not a JSON object of shard: position"
                )
            positions.update({alias: saved[alias] for alias in aliases if alias in saved})
        for alias, number in options["after"]:
            if alias not in aliases:
                raise CommandError(
                    f"--after names '{alias}', which is not a tailed shard "
                    f"(tailed: {', '.join(aliases)})"
                )
            positions[alias] = number
        for alias in aliases:
            if alias not in positions:
                positions[alias] = feed.head(alias) if options["from_head"] else 0
        return positions

    def _tail(
        self,
        aliases: list[str],
        positions: dict[str, int],
        state_path: Path | None,
        options: dict[str, Any],
    ) -> None:
        out = self.stdout
        while not self._stopping:
            printed = 0
            for alias in aliases:
                page = feed.changes(alias, after=positions[alias], limit=options["limit"])
                for change in page:
                    out.write(json.dumps(change_to_json(change), sort_keys=True))
                out.flush()
                if page.position != positions[alias]:
                    positions[alias] = page.position
                    if state_path is not None:
                        _save_state(state_path, positions)
                printed += len(page)
                if self._stopping:
                    break
            if printed:
                continue
            if options["once"]:
                return
            time.sleep(options["sleep"])


def _save_state(path: Path, positions: dict[str, int]) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(positions, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
