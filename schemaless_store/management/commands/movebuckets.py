"""``manage.py movebuckets --to ALIAS --buckets 0-1364``: move buckets to a shard while the
store serves traffic (docs/resharding.md).

``--dry-run`` prints the plan (buckets and rows per source shard and table) and changes
nothing; ``--status`` lists the moves; ``--abort`` undoes a move that has not flipped;
``--release MOVE`` finishes a move held because writes escaped its fence. Run the
same command again after a crash: the move resumes from its recorded phase and checkpoints.
A connection lost while it runs (a server restarted, a session killed) does not stop it: it
reconnects and resumes within the same run (:func:`~schemaless_store.moves.decide.run_resuming`).
A fatal error ends in one plain line.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from schemaless_store.config.metadata import BucketMove
from schemaless_store.exceptions import MoveRefused, SchemalessError
from schemaless_store.guards.server_lock import ServerLock
from schemaless_store.guards.throttle import Throttle
from schemaless_store.management.arguments import (
    add_throttle_arguments,
    niceness,
    throttle_options,
    whole_number,
)
from schemaless_store.management.progress import progress_stream
from schemaless_store.management.texttable import text_table
from schemaless_store.moves import plan
from schemaless_store.moves.decide import (
    database_errors,
    decide,
    one_mover,
    run_resuming,
    shown,
)
from schemaless_store.moves.mover import COPY_WORKERS, Mover
from schemaless_store.moves.phase_bars import MoveProgress
from schemaless_store.moves.record import STATUS_HEADERS, describe, status_row


def plural(number: int, thing: str, things: str = "") -> str:
    return f"{number:,} {thing if number == 1 else things or thing + 's'}"


class Command(BaseCommand):
    help = (
        "Move buckets to a shard while writers and readers keep running: copy, catch up, "
        "fence briefly, flip the map, verify, delete the old copies. Rerun to resume."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--to", dest="target", help="The shard alias that gets the buckets.")
        parser.add_argument("--buckets", help="Bucket numbers and ranges: 0-1364,2000.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Print the plan (counts rows); change nothing."
        )
        parser.add_argument("--status", action="store_true", help="List the moves and exit.")
        parser.add_argument(
            "--abort", action="store_true", help="Undo the move in progress (before its flip)."
        )
        parser.add_argument(
            "--release",
            type=whole_number,
            metavar="MOVE",
            help="Finish a held move (writes escaped its fence) once its keys are dealt with: "
            "delete the sources' copies.",
        )
        parser.add_argument(
            "--batch",
            type=whole_number,
            default=plan.COPY_BATCH,
            help=f"Rows read per copy batch (default {plan.COPY_BATCH}).",
        )
        parser.add_argument(
            "--workers",
            type=whole_number,
            default=COPY_WORKERS,
            help=f"Tables copied at the same time, on MariaDB (default {COPY_WORKERS}).",
        )
        # The cleaner's throttle (schemaless_store.guards.throttle), with runcleaner's options.
        add_throttle_arguments(
            parser,
            worker="the copy",
            batch="each copy or delete batch",
            probed="the sources and the target",
        )
        parser.add_argument(
            "--nice",
            type=niceness,
            default=0,
            help="Lower this process's CPU priority by this much (os.nice, 0 to 19; default 0: "
            "the flip, which holds writes to the buckets, should not wait for a CPU).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        fatal: tuple[type[BaseException], ...] = (SchemalessError, OSError, *database_errors())
        try:
            if options["status"]:
                self._status()
            elif options["abort"]:
                with one_mover():
                    self._abort()
            elif options["release"] is not None:
                with one_mover():
                    self._release(options["release"])
            elif options["dry_run"]:
                self._move(options)
            else:
                with one_mover() as lock:
                    self._move(options, lock)
        except MoveRefused as exc:
            raise CommandError(str(exc)) from exc
        except fatal as exc:
            # One plain line, never a driver's traceback (Django's errors and the driver's own
            # alike): the move is recorded, so running the same command again resumes it.
            said = " ".join(str(exc).split()) or type(exc).__name__
            raise CommandError(
                f"movebuckets stopped: {said}. Nothing is lost: run the same command again to "
                "resume (--status shows the move)."
            ) from exc

    def _move(self, options: dict[str, Any], lock: ServerLock | None = None) -> None:
        if not options["target"] or not options["buckets"]:
            raise CommandError("give --to ALIAS and --buckets RANGES (or --status, --abort)")
        numbers = plan.parse_buckets(options["buckets"])
        throttle = Throttle(**throttle_options(options))
        target = options["target"]
        decision = decide(target, numbers, dry_run=options["dry_run"])
        if decision.resume is not None:
            move = decision.resume
            if options["dry_run"]:
                self.stdout.write(f"Move #{move.pk} is {move.phase}; rerun to resume it.")
                return
            self.stdout.write(f"Resuming move #{move.pk} ({move.phase}).")
        elif decision.done_already:
            self.stdout.write(
                f"Nothing to move: buckets {options['buckets']} are on {target} already."
            )
            return
        elif decision.counted is not None:
            self._print_plan(decision.counted)
            return
        else:
            assert decision.started is not None
            move, found = decision.started
            self.stdout.write(
                f"Move #{move.pk}: {plural(len(numbers), 'bucket')} ({shown(move.buckets)}) "
                f"to {target}, from "
                + ", ".join(f"{a} ({plural(len(n), 'bucket')})" for a, n in found.sources.items())
                + "."
            )
        if options["nice"]:
            os.nice(options["nice"])
        progress = MoveProgress(
            move,
            file=progress_stream(self),
            enabled=options["verbosity"] >= 1 and self.stderr.isatty(),
        )

        def run(current: BucketMove) -> BucketMove:
            return Mover(
                current,
                batch=options["batch"],
                throttle=throttle,
                workers=options["workers"],
                report=progress.report,
                phase=progress.phase,
            ).run()

        try:
            done = run_resuming(move, run, lock=lock, say=self.stdout.write)
        except BaseException:
            progress.close(failed=True)
            raise
        progress.close()
        record = describe(done)
        verified = {
            "yes": "verified",
            "": "not verified",
        }.get(record.verified, f"verified: {record.verified}")
        paused = f", writes paused {record.paused}" if record.paused else ""
        took = f"; took {record.took}" if record.took else ""
        self.stdout.write(
            self.style.SUCCESS(
                f"Move #{done.pk} done: {record.buckets} now on {done.target}; "
                f"{plural(record.rows_copied, 'row')} copied "
                f"({plural(dict(record.copied).get('entities', 0), 'entity', 'entities')}), "
                f"{verified}{paused}{took}."
            )
        )

    def _print_plan(self, found: plan.Plan) -> None:
        self.stdout.write(
            f"Dry run: {len(found.buckets)} buckets to {found.target}; nothing is changed."
        )
        for source, numbers in found.sources.items():
            rows = found.rows.get(source, {})
            tables = ", ".join(f"{name} {count:,}" for name, count in rows.items())
            self.stdout.write(
                f"  from {source}: {plural(len(numbers), 'bucket')} "
                f"({shown(plan.as_ranges(numbers))}); {plural(sum(rows.values()), 'row')}: "
                f"{tables}"
            )

    def _abort(self) -> None:
        current = plan.unfinished()
        if current is None:
            raise CommandError("no move is in progress")
        done = Mover(current).abort()
        self.stdout.write(
            f"Move #{done.pk} aborted: {shown(done.buckets)} stay with "
            + ", ".join(done.sources)
            + "."
        )

    def _release(self, pk: int) -> None:
        move = BucketMove.objects.filter(pk=pk).first()
        if move is None:
            raise CommandError(f"no move #{pk}")
        done = Mover(move).release()
        self.stdout.write(
            f"Move #{done.pk} released: the sources' copies of {shown(done.buckets)} are "
            f"deleted; {done.target} owns them."
        )

    def _status(self) -> None:
        moves = list(BucketMove.objects.order_by("-pk")[:20])
        if not moves:
            self.stdout.write("No bucket moves yet.")
            return
        for line in text_table(STATUS_HEADERS, [status_row(describe(m)) for m in moves]):
            self.stdout.write(line)
