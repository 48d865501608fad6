"""``manage.py rewritebodies``: rewrite stored bodies into the format ``SCHEMALESS["CODEC"]``
writes (docs/performance.md, "Body codecs: MessagePack or JSON"), while the site runs.

The run is :func:`schemaless_store.mapping.rewrite_bodies`, a ``mapentities`` run whose function
changes nothing: each entity whose body the codec would write differently is saved through the
write protocol, only if nobody wrote it meanwhile, keeping its ``updated`` time. A run that is
stopped resumes where it stopped.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from schemaless_store.config import conf
from schemaless_store.exceptions import ConfigurationError, SchemalessError
from schemaless_store.mapping import rewrite_bodies

from ..arguments import add_walk_arguments, throttle_options
from ..progress import progress_stream


class Command(BaseCommand):
    help = (
        "Rewrite every stored body that is not in the format SCHEMALESS['CODEC'] writes (e.g. "
        "MessagePack bodies into JSON), online: each entity only if nobody wrote it meanwhile, "
        "keeping its updated time. Set CODEC in every process first. Resumes where an earlier "
        "run stopped."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_walk_arguments(
            parser,
            dry_run="Write nothing: count the bodies that would be rewritten.",
            restart=(
                "Forget an earlier run into the same codec and walk every shard again (e.g. "
                "after processes that still wrote the old format have been restarted)."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        try:
            codec = type(conf.get().codec)
            summary = rewrite_bodies(
                shards=options["shards"],
                batch_size=options["batch_size"],
                **throttle_options(options),
                dry_run=options["dry_run"],
                restart=options["restart"],
                progress=verbosity >= 1 and self.stderr.isatty(),
                progress_file=progress_stream(self),
            )
        except (ConfigurationError, ValueError, SchemalessError) as exc:
            raise CommandError(str(exc)) from exc
        if verbosity >= 1:
            self.stdout.write(f"bodies into {codec.__module__}.{codec.__qualname__}")
            style = self.style.SUCCESS if summary.ok else self.style.WARNING
            self.stdout.write(style(summary.describe()))
        for entity_id, message in summary.failures:
            self.stderr.write(f"failed: {entity_id}: {message}")
        if not summary.ok:
            reasons = list(summary.problems)
            if summary.failed:
                reasons.append(f"{summary.failed} entities failed: run the command again")
            interrupted = [a for a, s in summary.shards.items() if s == "interrupted"]
            if interrupted:
                reasons.append(f"interrupted on {', '.join(interrupted)}: run it again to resume")
            raise CommandError("; ".join(reasons))
