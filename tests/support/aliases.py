"""Databases added to ``connections`` for one test module, behind Django's back (the Galera
modules reach each node, or a list of them, by an alias of its own)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from schemaless_store.config import conf
from schemaless_store.config.dburls import database_from_url


def entry(url: str) -> dict[str, Any]:
    """The ``DATABASES`` entry of a URL, with the defaults Django fills in for its own."""
    configured = connections.configure_settings(
        {DEFAULT_DB_ALIAS: {}, "node": database_from_url(url)}
    )
    return dict(configured["node"])


@contextlib.contextmanager
def added(urls: Mapping[str, str]) -> Iterator[None]:
    """``connections`` knows each alias of ``urls`` inside; after, nothing of them is left:
    the connection object goes too (the handler keeps it, and a later module reusing the alias
    on another database would get this one), and the store's settings, resolved meanwhile with
    these aliases among the shards' defaults, are read again."""
    for alias, url in urls.items():
        connections.settings[alias] = entry(url)
    try:
        yield
    finally:
        for alias in urls:
            with contextlib.suppress(Exception):
                connections[alias].close()
            with contextlib.suppress(AttributeError):
                del connections[alias]
            del connections.settings[alias]
        conf.get.cache_clear()
