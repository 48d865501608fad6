"""``python -m bench.move_trigger_cost VARIANT ROWS PASSES``: one run for callgrind, to count what
a move's triggers add to a write on SQLite (docs/resharding.md#limits).

    for v in none log pre; do for s in "0 1" "500 1" "500 2"; do
      valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$v.${s// /.} \
        .venv/bin/python -m bench.move_trigger_cost $v $s
    done; done

(an interpreter, not a shell shim such as pyenv's: callgrind counts the process it starts).
``ROWS`` rows of an ``entities``-like table (a 16-byte id, a datetime, a 300-byte body) are
each updated ``PASSES`` times, in autocommit, with no trigger (``none``), a source's log
trigger (``log``: the sources', and the target's before the pre-images) or the target's
pre-image trigger (``pre``: the statement ``SQLite.insert_once`` spells). Per update: (500
rows, 1 pass, minus 0 rows) / 500 is a row's first change; (2 passes, minus 1) / 500 its
later ones.
"""

from __future__ import annotations

import os
import sqlite3
import sys

from schemaless_store.sql.dialects import SQLITE

SCHEMA = """
CREATE TABLE entities (added_id INTEGER PRIMARY KEY AUTOINCREMENT, id BLOB NOT NULL UNIQUE,
  updated datetime NOT NULL, body BLOB NOT NULL);
CREATE TABLE schemaless_move_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL,
  row_key BLOB NOT NULL);
CREATE TABLE pre (present INTEGER NOT NULL, id BLOB NOT NULL, updated datetime, body BLOB,
  PRIMARY KEY (id)) WITHOUT ROWID;
"""


def main(variant: str, rows: int, passes: int) -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(SCHEMA)
    actions = {
        "log": "INSERT INTO schemaless_move_log (tbl, row_key) VALUES ('entities', NEW.id)",
        "pre": SQLITE.insert_once(
            "pre",
            ["present", "id", "updated", "body"],
            ["1", "OLD.id", "OLD.updated", "OLD.body"],
            [1],
        ),
    }
    if variant in actions:
        db.execute(SQLITE.trigger("t", "UPDATE", "entities", actions[variant], ""))
    ids = [os.urandom(16) for _ in range(2000)]
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO entities (id, updated, body) VALUES (?, '2026-11-28 00:00:00', ?)",
        [(i, os.urandom(300)) for i in ids],
    )
    db.execute("COMMIT")
    for number in range(passes):
        for i in ids[:rows]:
            db.execute(
                "UPDATE entities SET updated = ?, body = ? WHERE id = ?",
                (f"2026-11-28 00:00:0{number + 1}", os.urandom(300), i),
            )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
