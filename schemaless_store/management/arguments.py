"""Arguments shared by the store's management commands: types that refuse a bad value with a
message that says what they want (argparse prints it and exits with status 2), and the
throttle's options, declared once for every command that works in batches."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..config import conf

Number = TypeVar("Number", int, float)


def _bounded(
    convert: Callable[[str], Number], accepts: Callable[[Number], bool], wanted: str
) -> Callable[[str], Number]:
    def parse(text: str) -> Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, not {text!r}") from None
        if not accepts(value):  # a NaN is refused by every bound
            raise argparse.ArgumentTypeError(f"must be {wanted}, not {text!r}")
        return value

    return parse


whole_number = _bounded(int, lambda v: v >= 1, "a whole number of at least 1")
share = _bounded(float, lambda v: 0 < v <= 1, "a share above 0 and at most 1")
niceness = _bounded(int, lambda v: 0 <= v <= 19, "a whole number from 0 to 19")
seconds = _bounded(float, lambda v: v >= 0, "a number of seconds (0 or more)")
milliseconds = _bounded(float, lambda v: v > 0, "a number of milliseconds above 0")


def add_throttle_arguments(
    parser: argparse.ArgumentParser,
    *,
    worker: str,
    batch: str = "each batch",
    probed: str = "the shard servers",
) -> None:
    """``--sleep``, ``--duty`` and ``--max-latency``: the throttle
    (:class:`~schemaless_store.guards.throttle.Throttle`) a command pauses with after each batch.
    ``worker`` names what works (``"the cleaner"``), ``batch`` what a pause follows, ``probed``
    the servers the latency probe asks. :func:`throttle_options` reads them back."""
    parser.add_argument(
        "--sleep",
        type=seconds,
        default=0.0,
        help=f"Seconds to pause after {batch}, to throttle the load (default 0).",
    )
    parser.add_argument(
        "--duty",
        type=share,
        default=1.0,
        help=f"Most share of wall time {worker} works, e.g. 0.5: after a batch that took t "
        "seconds it pauses t seconds (default 1: no pause). Adds to --sleep.",
    )
    parser.add_argument(
        "--max-latency",
        type=milliseconds,
        default=None,
        help=f"Milliseconds: after {batch}, hold while a probe of {probed} (SELECT 1) takes "
        "longer than this, so writers go first (default: no probe).",
    )


def throttle_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The throttle's keywords from a command's parsed options: ``sleep``, ``duty`` and
    ``max_latency``, all in seconds (the option is in milliseconds)."""
    latency = options["max_latency"]
    return {
        "sleep": options["sleep"],
        "duty": options["duty"],
        "max_latency": None if latency is None else latency / 1000,
    }


def shard_alias(text: str) -> str:
    """A shard's database alias (``--shard``), checked against ``SCHEMALESS["SHARDS"]``."""
    known = list(conf.get().shards)
    if text not in known:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a shard alias; the shards are {', '.join(known)}"
        )
    return text


def os_error(exc: OSError) -> str:
    """An operating system error in words: ``out.jsonl: No such file or directory``, not
    ``[Errno 2] No such file or directory: 'out.jsonl'``."""
    if not exc.strerror:
        return str(exc)
    return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror


def add_walk_arguments(parser: argparse.ArgumentParser, *, dry_run: str, restart: str) -> None:
    """The options of a command that walks every entity as a ``mapentities`` run
    (``mapentities``, ``rewritebodies``): ``--shard``, ``--batch-size``, the throttle's,
    ``--dry-run`` and ``--restart`` (their help: ``dry_run``, ``restart``)."""
    from ..mapping import DEFAULT_BATCH_SIZE

    parser.add_argument(
        "--shard",
        action="append",
        dest="shards",
        metavar="ALIAS",
        help="Only this shard (database alias); repeatable. Default: every shard.",
    )
    parser.add_argument(
        "--batch-size",
        type=whole_number,
        default=DEFAULT_BATCH_SIZE,
        help=f"Entities per batch and transaction (default {DEFAULT_BATCH_SIZE}).",
    )
    add_throttle_arguments(parser, worker="the run")
    parser.add_argument("--dry-run", action="store_true", help=dry_run)
    parser.add_argument("--restart", action="store_true", help=restart)
