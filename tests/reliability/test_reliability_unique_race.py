"""A unique index under a real race (issue 4): two *processes* claim one value at once.

Two ``claimer`` children (``tests/support/child.py``) each wait on their stdin; the parent writes
the same value to both pipes back to back, so both start together (the pipe is the barrier). Every
round: exactly one wins, the other gets ``UniqueViolation``, and nothing of the loser is written
(no entity, no index row anywhere). The entities' ids are chosen so rounds cover both entities
on one shard and entities on different shards; the values land on either index shard.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import STORE, child
from tests.support.buckets import ids_on
from tests.support.invariants import committed_entities, stored_rows
from tests.support.raw import index_rows
from tests.support.reliability_report import recording

pytestmark = [STORE, pytest.mark.slow, pytest.mark.reliability]

ROUNDS = int(os.environ.get("SCHEMALESS_RELIABILITY_RACES", "40"))


def test_two_processes_racing_for_one_unique_value_exactly_one_wins(django_db_setup):
    import subprocess

    claimers = [
        child.spawn("claimer", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    aliases = shards.shard_aliases()
    layouts: Counter[tuple[str, str]] = Counter()
    with recording("Unique index: two processes race for one value") as tally:
        try:
            for round_ in range(ROUNDS):
                same_shard = round_ % 2 == 0
                if same_shard:
                    ids = ids_on(aliases[round_ % len(aliases)], 2)
                else:
                    ids = [ids_on(aliases[0], 1)[0], ids_on(aliases[-1], 1)[0]]
                value = f"race-{round_}-\N{GRINNING FACE}"
                for claimer, entity_id in zip(claimers, ids, strict=True):
                    assert claimer.stdin is not None
                    claimer.stdin.write(json.dumps({"id": entity_id.hex, "username": value}) + "\n")
                for claimer in claimers:
                    assert claimer.stdin is not None
                    claimer.stdin.flush()
                results = []
                for claimer in claimers:
                    assert claimer.stdout is not None
                    results.append(json.loads(claimer.stdout.readline())["result"])
                tally.cases += 1
                if not tally.expect(
                    sorted(results) == ["lost", "won"], f"round {round_}: {results}"
                ):
                    continue
                winner = ids[results.index("won")]
                loser = ids[results.index("lost")]

                holders = [e.id for e in Entity.objects.filter_index(username=value)]
                entities = committed_entities()
                tally.expect(
                    holders == [winner]
                    and loser.bytes not in entities
                    and winner.bytes in entities,
                    f"round {round_}: {value} held by {holders}, winner {winner}, stored: "
                    f"winner {winner.bytes in entities}, loser {loser.bytes in entities}",
                )
                leftovers = [row for row in stored_rows(registry.valid()) if row[3] == loser.bytes]
                tally.expect(
                    leftovers == [], f"round {round_}: the loser left {leftovers}", "fail"
                )  # nothing half-written
                claim_alias = [
                    alias
                    for *_, entity_id, alias in index_rows("index_users_username")
                    if entity_id == winner.bytes
                ]
                assert len(claim_alias) == 1
                layouts[("same" if same_shard else "different", claim_alias[0])] += 1
        finally:
            tally.details["layouts"] = {
                f"entities on {a} shard(s), claim on {b}": n for (a, b), n in layouts.items()
            }
            for claimer in claimers:
                assert claimer.stdin is not None
                claimer.stdin.close()
                claimer.wait(timeout=30)
    if len(aliases) > 1:
        # Both entity layouts were raced, and the values' claims landed on every index shard.
        assert {layout for layout, _ in layouts} == {"same", "different"}
        assert {alias for _, alias in layouts} == set(aliases), layouts
