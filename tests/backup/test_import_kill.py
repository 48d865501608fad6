"""An import SIGKILLed mid-way (a child process, tests/support/child.py, on this test's databases)
resumes by running it again: every committed entity is found by every index meanwhile, and the
rerun writes only what is missing, leaving index tables exact."""

from __future__ import annotations

import json
import random
import signal
import time
import uuid

import pytest

from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from tests.support import STORE, child
from tests.support.backups import command, entities
from tests.support.invariants import assert_exact, committed_entities, conditions_for, matches

pytestmark = [STORE, pytest.mark.slow, pytest.mark.reliability]

COUNT = 2000


def expected(n: int) -> dict:
    return {
        "user_id": bytes([n % 7]),
        "published": n,
        "link": f"https://k/{n}",
        "tags": ["t", str(n % 5)],
        **({"username": f"killed{n}"} if n % 10 == 0 else {}),
    }


@pytest.mark.parametrize("kill_after", [1, COUNT // 3])
def test_a_killed_import_resumes_by_running_again(tmp_path, kill_after):
    path = tmp_path / "big.jsonl"
    with open(path, "w") as out:
        for n in range(COUNT):
            props = {
                k: ({"$bytes": v.hex()} if isinstance(v, bytes) else v)
                for k, v in expected(n).items()
            }
            out.write(json.dumps({"id": str(uuid.UUID(int=n + 1)), "properties": props}) + "\n")
    process = child.spawn("manage", "importentities", str(path), "--batch-size", "50")
    try:
        stored = 0
        deadline = time.monotonic() + 120
        while stored < kill_after and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
            stored = Entity.objects.all().count()
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the import ended before it was killed"
    stored = Entity.objects.all().count()
    assert kill_after <= stored < COUNT

    # Meanwhile, what is committed is found (I2), and queries return nothing wrong (I1):
    # checked on a sample (a user_id query returns hundreds of entities).
    committed = committed_entities()
    for entity_id in random.Random(kill_after).sample(sorted(committed), min(25, stored)):
        for index in registry.valid():
            for conditions in conditions_for(index, committed[entity_id]):
                found = list(Entity.objects.filter_index(**conditions))
                assert entity_id in {e.id.bytes for e in found}, (index.name, conditions)
                assert all(matches(e, conditions) for e in found)

    run = command("importentities", str(path), "--batch-size", "500")
    assert run.error is None, run
    assert (
        f"imported {COUNT:,} entities ({COUNT - stored:,} new, {stored:,} already stored)"
        in run.stdout
    )
    found = entities()
    assert found == {uuid.UUID(int=n + 1): expected(n) for n in range(COUNT)}
    assert_exact()
