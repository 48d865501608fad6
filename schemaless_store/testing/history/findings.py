"""What the checker (:mod:`.checker`) found: each anomaly kind's findings, with examples, and
the counts a run's report prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .records import Op

KINDS = (
    "lost",
    "duplicated",
    "phantom",
    "failed_present",
    "not_prefix",
    "resurrected",
    "index_missed",
    "index_wrong",
    "unique_violated",
)
EXAMPLES = 5


@dataclass
class Report:
    """Each anomaly kind: the distinct findings (a key and value, or a pair of reads)."""

    found: dict[str, dict[Any, dict[str, Any]]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    ops: dict[str, int] = field(default_factory=dict)
    # The operation whose write shows twice or comes back, per finding; and the operations a
    # ``lose-commit`` fault hit (process, index): a finding is told apart when they meet.
    suspects: dict[Any, tuple[str, int]] = field(default_factory=dict)
    lost_answers: set[tuple[str, int]] = field(default_factory=set)
    finds_proven: int = 0  # finds whose answer had to hold the key's entity
    versions_read: int = 0  # reads of an entity's kept versions, each checked as a list
    claims_checked: int = 0  # final reads of claim keys, their tokens compared

    def add(self, kind: str, identity: Any, suspect: Op | None = None, **example: Any) -> None:
        if identity in self.found[kind]:
            return
        self.found[kind][identity] = example
        if suspect is not None:
            self.suspects[(kind, identity)] = (suspect.process, suspect.index)
            if self.suspects[(kind, identity)] in self.lost_answers:
                example["writer_lost_an_answer"] = True

    def after_lost_answer(self, kind: str) -> int:
        """How many findings of ``kind`` a write that lost its commit answer is behind."""
        return sum(1 for found in self.found[kind].values() if found.get("writer_lost_an_answer"))

    def read_from_near_cache(self, kind: str) -> int:
        """How many findings of ``kind`` a read served from the near cache (process memory)
        is behind."""
        return sum(
            1
            for found in self.found[kind].values()
            if isinstance(found.get("read"), dict) and found["read"].get("via") == "near"
        )

    def counts(self) -> dict[str, int]:
        return {kind: len(found) for kind, found in self.found.items()}

    @property
    def anomalies(self) -> int:
        return sum(self.counts().values())

    def text(self, examples: int = EXAMPLES) -> str:
        """The report a run prints: op counts, then each kind's count and first examples."""
        lines = [
            "operations: "
            + ", ".join(f"{name} {count}" for name, count in sorted(self.ops.items()))
        ]
        lines.append(f"finds proven (the answer had to hold the entity): {self.finds_proven}")
        lines.append(f"version reads checked: {self.versions_read}")
        lines.append(f"claims checked at the end: {self.claims_checked}")
        for kind in KINDS:
            found = self.found[kind]
            behind = self.after_lost_answer(kind)
            why = f" ({behind} by a write that lost its commit answer)" if behind else ""
            near = self.read_from_near_cache(kind)
            why += f" ({near} read from the near cache)" if near else ""
            lines.append(f"{kind}: {len(found)}{why}")
            lines += [f"    {example}" for example in list(found.values())[:examples]]
        lines.append(f"anomalies: {self.anomalies}")
        return "\n".join(lines)
