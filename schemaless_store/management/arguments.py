"""Argument types shared by the store's management commands: each refuses a bad value with a
message that says what it wants (argparse prints it and exits with status 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from .. import conf

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
