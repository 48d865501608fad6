"""A write is a plan made in one call and run in one place (issue 45, item 5;
docs/design.md#write-protocol): the caller gives every decision to ``Write(...)``, and only
``writes/protocol.py`` sets a ``Write``'s attributes as it runs the steps (step 2 returns the
write's result, step 4 its receipt). No database is touched."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "schemaless_store"
RUNNER = PACKAGE / "writes" / "protocol.py"
# The names a Write goes by where it is handed on (the step functions' parameter, a test's).
WRITE_NAMES = {"write", "the_write"}


def attribute_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, "write.name")`` of every assignment to an attribute of a name in
    :data:`WRITE_NAMES` (plain, augmented, annotated, or inside a tuple target)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        while targets:
            target = targets.pop()
            if isinstance(target, ast.Tuple | ast.List):
                targets.extend(target.elts)
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id in WRITE_NAMES
            ):
                found.append((node.lineno, f"{target.value.id}.{target.attr}"))
    return found


def test_only_the_protocol_sets_a_writes_attributes():
    outside = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name} = ..."
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != RUNNER
        for line, name in attribute_writes(ast.parse(path.read_text(), str(path)))
    ]
    assert outside == [], (
        "a Write is planned by its constructor and run by writes/protocol.py alone; "
        "pass the decision to Write(...) or return it from the step: " + "; ".join(outside)
    )


def test_the_check_sees_each_kind_of_assignment():
    source = (
        "write.defers = True\n"
        "write.result, other = {}, 1\n"
        "the_write.tries += 1\n"
        "write.session: tuple = ()\n"
        "writer.defers = True\n"  # another name: not a Write
        "value = write.result\n"  # a read
    )
    assert attribute_writes(ast.parse(source)) == [
        (1, "write.defers"),
        (2, "write.result"),
        (3, "the_write.tries"),
        (4, "write.session"),
    ]
    # And the protocol itself does set them: the check would see it if it were elsewhere.
    assert {name for _line, name in attribute_writes(ast.parse(RUNNER.read_text()))} >= {
        "write.result",
        "write.receipt_created",
        "write.session",
        "write.tx",
        "write.committing",
    }
