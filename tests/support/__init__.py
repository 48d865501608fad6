"""What the tests share that is not a fixture (fixtures are in the conftest.py files).

- ``STORE``: the mark of a test that uses the store's databases (every alias, in transactions).
- ``factories``: factory-boy factories for what tests store when the values are incidental.
- ``raw``: raw looks at the shards, bypassing the store (index rows, reads counted; a row
  deleted or a body overwritten by hand).
- ``invariants``: the invariants I1-I3 checked from outside (docs/design.md#invariants).
- ``values``: a property of every supported type, equality that minds types (``same``, and
  ``deep_same`` with NaN equal to NaN), and hypothesis strategies for the values the admin's
  JSON view carries (``json_values``) and those an export line carries (``line_values``).
- ``buckets``: ids in a given bucket or on a given shard; handing a bucket over by hand.
- ``moving``: a store to move, and the check of what a bucket move left.
- ``outage``: a shard that is down (refused or a black hole).
- ``backups``: running export and import, emptying the store, and what a store answers.
- ``admin``, ``browser``, ``terminal``, ``feed``: the admin's addresses and logged-in client;
  the browser tests' Chromium and a logged-in admin page; a simulated colour terminal; the
  demo feed's shared link, sign-up, the repository's root and the variables kept from its
  scripts.
- ``reliability_report``: the reliability suite's record of what each class ran.
- ``crashes``: the crash tests' starting store (``BEFORE``, ``reset_store``) and the indexes a
  mixed writer's entities touch (``touched_indexes``).
- ``cleaner``: the cleaner tests' index to backfill (``PUBLISHED``), its state, the passes
  recorded, a stale row planted by hand.
- ``hostile_input``: the hostile-input tests' strings (``INJECTIONS``) and raw snapshots of
  every row of the shards (``snapshot``, ``check_unchanged``, ``rows_by_entity``).
- ``queries``: the query property tests' raw ``wipe`` and each lookup's comparison (``COMPARE``).
- ``mapfuncs``: functions the mapentities tests apply by dotted path.
- ``plans``, ``plan_workload``: the plan test's capture of every statement sent to a shard, its
  shapes, the grown copies they are explained on, the judge; and the workload it captures.
- ``aliases``: databases added to ``connections`` for one module (the Galera nodes), and
  taken out again whole.
- ``package``: the package tests' pyproject.toml and requirements files as data, the python
  blocks of a page with their markers, a fresh virtualenv, the sdist and wheel built.
- Child processes, each run as ``python -m tests.support.<name>``: ``child`` (writers killed or
  signalled, commands), ``cached`` (writers and readers through the entity cache), ``grown`` (a
  store on a third server), ``restored`` (a second store with three shards).
"""

from __future__ import annotations

import pytest

STORE = pytest.mark.django_db(transaction=True, databases="__all__")
