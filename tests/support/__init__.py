"""What the tests share that is not a fixture (fixtures are in the conftest.py files).

- ``STORE``: the mark of a test that uses the store's databases (every alias, in transactions).
- ``raw``: raw looks at the shards, bypassing the store (index rows, reads counted).
- ``factories``: factory-boy factories for the entities tests store when the values are incidental.
- ``invariants``: the invariants I1-I3 checked from outside (docs/design.md#invariants).
- ``buckets``: handing a bucket from shard to shard by hand, as a finished move leaves it.
- ``backups``: running export and import, emptying the store, and what a store answers.
- ``reliability_report``: the reliability suite's record of what each class ran.
- ``mapfuncs``: functions the mapentities tests apply by dotted path.
- Child processes, each run as ``python -m tests.support.<name>``: ``child`` (writers killed or
  signalled, commands), ``cached`` (writers and readers through the entity cache), ``grown`` (a
  store on a third server), ``restored`` (a second store with three shards).
"""

from __future__ import annotations

import pytest

STORE = pytest.mark.django_db(transaction=True, databases="__all__")
