"""What the tests share beside the conftest.py files' fixtures; a fixture that several modules
of different areas build alike is made here once, as a factory the module assigns
(``cluster = galera.cluster_with_database("moves")``) or a context manager.

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
- ``mapfuncs``: functions the mapentities tests apply by dotted path; ``mapping``: a run's
  tables emptied (``forget_runs``) and the autouse fixture that does it around each test
  (``fresh_runs``).
- ``galera``: the module's Galera cluster with a database created (``cluster_with_database``)
  or whole again for each test (``whole_cluster``), a grown store's shard on it
  (``GaleraHome``, ``LAYOUT``).
- ``near``: the near cache built either way the tests need one, on one Redis: the process's own
  through the settings (``near_on``) or one on a key prefix fed by hand (``standalone``); a
  second process reading through one (``Other``).
- ``plans``, ``plan_workload``: the plan test's capture of every statement sent to a shard, its
  shapes, the grown copies they are explained on, the judge; and the workload it captures.
- ``aliases``: databases added to ``connections`` for one module (the Galera nodes), and
  taken out again whole.
- ``package``: the package tests' pyproject.toml and requirements files as data, the python
  blocks of a page with their markers, a fresh virtualenv, the sdist and wheel built.
- Child processes, each run as ``python -m tests.support.<name>``: ``child`` (writers killed or
  signalled, commands; its ``crashwriter`` mode forks the writers of ``crash_writer``),
  ``cached`` (writers and readers through the entity cache), ``grown`` (a store on a third
  server), ``restored`` (a second store with three shards).
"""

from __future__ import annotations

import pytest

STORE = pytest.mark.django_db(transaction=True, databases="__all__")
