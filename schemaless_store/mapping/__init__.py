"""Changing data that is already stored, while the site runs: ``manage.py mapentities`` and
:func:`map_entities` (docs/usage.md, "Changing data that is already stored").

A function gets each stored entity and changes it in place (or returns
:data:`schemaless_store.DELETE`); the run saves, through the write protocol, the entities whose
properties changed, each only if nobody wrote it since it was read (:mod:`.apply`). It follows
the cleaner's ways: one worker per shard, a lock per (function, shard), checkpoints and a note
of every entity saved, so a killed run resumes and never applies the function twice to an
entity it saved (:mod:`..tables.map_runs`), the same throttle, a progress bar, and a summary
(:mod:`.runner`, :mod:`.walk`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from .runner import DEFAULT_BATCH_SIZE, MapOptions, Mapper, MapSummary

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MapOptions",
    "MapSummary",
    "Mapper",
    "map_entities",
    "rewrite_bodies",
]


def map_entities(function: Callable[[Any], Any] | str, **options: Any) -> MapSummary:
    """Apply ``function`` (a callable, or its dotted path) to every stored entity, or to those
    ``filter_index(**where)`` finds, and save what it changed; see the module docs.

    The keywords are :class:`MapOptions`' fields, declared there once with what each does
    (e.g. ``batch_size=100, dry_run=True``). A run that is interrupted, stopped by a bucket
    move, or had failures is finished by calling it again. Returns a :class:`MapSummary`
    (``ok`` when every shard was walked and nothing failed).
    """
    known = {field.name for field in fields(MapOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"map_entities() got unexpected keyword arguments {unknown}; "
            f"its options are {sorted(known)}"
        )
    return Mapper(function, MapOptions(**options)).execute()


def same_properties(entity: Any) -> None:
    """The function of a body rewrite: it changes no property (the run saves an entity whose
    stored body is not in the configured codec's format, :func:`rewrite_bodies`)."""


def rewrite_bodies(**options: Any) -> MapSummary:
    """Rewrite every stored body that is not what ``SCHEMALESS["CODEC"]`` writes (e.g. the
    MessagePack bodies of a store whose codec is now :class:`~..values.codec.JsonCodec`), as a
    ``mapentities`` run: online, a shard worker each, resumable, throttled, with progress, and
    each entity saved only if nobody wrote it since it was read. An entity keeps its
    ``updated`` time and gets no new version in its history. Takes :func:`map_entities`'
    keywords (not ``rewrite_bodies``); ``manage.py rewritebodies`` runs it."""
    return map_entities(same_properties, **options, rewrite_bodies=True)
