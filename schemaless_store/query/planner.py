"""Which index serves a query, and why each other declared index does not
(docs/design.md#query-rule).

**What a query matches** (the rule App Engine's datastore uses): an entity matches only if it
has every property the query names, in its conditions and in its ordering, and its values meet
the conditions. A missing property is not ``None``: ``None`` is a value like any other.

An index holds a row only for an entity that has every one of its properties. So an index may
serve a query only if every one of its properties is named by a condition or by the ordering;
any other index could leave matches out, and a silent partial answer cannot be told from an
empty one. Besides, as every index table is read: the equality conditions (``exact``/``in``)
cover a prefix of its properties, at most the next property has range conditions, and the
ordering is that next property or one of the prefix.

So every index that serves a query has the same properties, those the query names; the planner
prefers one whose ``shard_on`` value is pinned (one shard read instead of all), then the table
name that sorts first. No ready index serves it: :class:`NoIndexForQuery` (an
:class:`InvalidQuery`) explains why each close declaration was rejected and which declaration
would serve; only a ``building`` one: :class:`IndexNotReady`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config.indexes import Index, is_identifier
from ..exceptions import NoIndexForQuery
from ..tables import lifecycle
from ..tables.lifecycle import maintained_indexes
from .conditions import EQUALITY_LOOKUPS, Condition, named_properties


@dataclass(frozen=True)
class Verdict:
    """What the planner made of one declared index."""

    index: Index
    state: str | None
    reason: str | None  # why it cannot serve the query; None: it serves it

    @property
    def serves(self) -> bool:
        return self.reason is None

    def __str__(self) -> str:
        state = self.state or "no state yet"
        return f"{describe(self.index)} [{state}]: {self.reason or 'serves the query'}"


@dataclass
class Plan:
    """The index chosen for a query (None: none can serve it) and every verdict behind it."""

    conditions: list[Condition]
    order: str | None
    descending: bool
    column: str | None
    index: Index | None
    verdicts: list[Verdict] = field(default_factory=list)
    problem: str = ""  # why no index was chosen, when none was
    kind: str | None = None  # the kind whose indexes the query may use (docs/kinds.md)

    @property
    def named(self) -> list[str]:
        return named_properties(self.conditions, self.order)

    @property
    def others(self) -> list[Verdict]:
        """The verdicts on every declared index but the chosen one."""
        return [v for v in self.verdicts if self.index is None or v.index is not self.index]

    def close_calls(self) -> list[Verdict]:
        """The other declared indexes that share a property with the query."""
        named = set(self.named)
        return [v for v in self.others if named & set(v.index.properties)]

    def query_text(self) -> str:
        args = ", ".join(str(c) for c in self.conditions)
        head = (
            f"filter_index({args})"
            if self.column is None
            else f"Cell.objects.filter_index({self.column!r}, {args})"
        )
        if self.order is not None:
            head += f".order_by({('-' if self.descending else '') + self.order!r})"
        return head

    def rejections(self) -> list[str]:
        """One line per close declared index that does not serve, and a count of the rest."""
        close = self.close_calls()
        lines = [str(v) for v in close]
        unrelated = len(self.others) - len(close)
        if unrelated:
            lines.append(
                f"({unrelated} other declared "
                f"{'index shares' if unrelated == 1 else 'indexes share'} no property with "
                "the query)"
            )
        return lines

    def advice(self) -> str:
        """What would make the query servable: a property to order by, or a declaration."""
        hints = []
        if self.order is None:
            for verdict in self.close_calls():
                if verdict.reason is not None and verdict.reason.startswith("is declared on kind"):
                    continue
                lacking = [p for p in verdict.index.properties if p not in self.named]
                if (
                    len(lacking) == 1
                    and check_index(verdict.index, self.conditions, lacking[0]) is None
                ):
                    hints.append(
                        f".order_by({lacking[0]!r}) asks only for entities that have "
                        f"{lacking[0]!r}, which {verdict.index.name} serves"
                    )
        hints.append(suggest(self.conditions, self.order, self.column, self.kind))
        return "; or ".join(hints)

    def explain_refusal(self) -> str:
        """:meth:`IndexQuery.explain` of a query no ready index serves."""
        lines = [self.query_text()]
        if self.problem == "not_ready":
            lines.append("No ready index serves it; only indexes still building:")
            lines += [f"  - {v}" for v in self.verdicts if v.serves]
        else:
            lines.append("No declared index serves it: it would raise NoIndexForQuery.")
        lines.append("Other declared indexes:")
        lines += [f"  - {line}" for line in self.rejections()]
        lines.append(f"To serve it: {self.advice()}.")
        return "\n".join(lines)

    def explain_choice(
        self,
        aliases: list[str] | None,
        every_alias: list[str],
        sort_positions: list[int] | None,
        problem: str = "",
    ) -> str:
        """:meth:`IndexQuery.explain` of a query answered from :attr:`index`, which reads
        ``aliases`` (None, with ``problem``: the query's values are invalid)."""
        index = self.index
        assert index is not None
        lines = [self.query_text(), f"Index: {describe(index)}"]
        if aliases is None:
            lines.append(f"Shards: none; the query is invalid: {problem}")
        elif len(aliases) == 1 and len(every_alias) > 1:
            lines.append(f"Shards: {aliases[0]} (pinned by {index.shard_on})")
        elif aliases == every_alias:
            lines.append(
                f"Shards: scatter-gather over {', '.join(aliases)} ({index.shard_on} is not "
                "pinned by an exact condition)"
            )
        else:
            lines.append(f"Shards: {', '.join(aliases)} (the values of {index.shard_on})")
        if sort_positions is not None:
            names = [*index.properties, "entity id"]
            lines.append(
                f"Order: {', '.join(names[p] for p in sort_positions)}"
                f"{' (descending)' if self.descending else ''}; every entity is fetched and "
                "re-checked against the conditions"
            )
        rejections = self.rejections()
        if rejections:
            lines.append("Other declared indexes:")
            lines += [f"  - {line}" for line in rejections]
        return "\n".join(lines)


def describe(index: Index) -> str:
    kind = "" if index.kind is None else f"; kind {index.kind}"
    return f"{index.name} ({', '.join(index.properties)}; shard_on {index.shard_on}{kind})"


def other_kind(index: Index) -> str:
    """Why an index declared on a kind serves no query of another kind, nor a plain one."""
    return (
        f"is declared on kind {index.kind!r}: only that kind's queries use it "
        f"(its manager's filter_index(), or filter_index(kind={index.kind!r}, ...))"
    )


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def check_index(index: Index, conditions: Sequence[Condition], order: str | None) -> str | None:
    """Why ``index`` cannot serve the query, in words; None if it can."""
    named = named_properties(conditions, order)
    absent = [p for p in named if p not in index.property_set]
    if absent:
        return f"has no property {_quoted(absent)}"
    unnamed = [p for p in index.properties if p not in named]
    if unnamed:
        them = "it" if len(unnamed) == 1 else "them"
        return (
            f"also requires {_quoted(unnamed)}: it has no row for an entity without "
            f"{them}, so it could miss matches (name {them} in a condition or in order_by)"
        )
    return _seek_problem(index, conditions, order)


def _seek_problem(index: Index, conditions: Sequence[Condition], order: str | None) -> str | None:
    """For an index over exactly the named properties: why it cannot seek to the conditions
    or serve the ordering, or None."""
    equality = {c.prop for c in conditions if c.lookup in EQUALITY_LOOKUPS}
    ranged = {c.prop for c in conditions if c.lookup not in EQUALITY_LOOKUPS}
    prefix = 0
    for prop in index.properties:
        if prop in equality and prop not in ranged:
            prefix += 1
        else:
            break
    rest = index.properties[prefix:]
    if len(rest) > 1:
        # The first property past the equality prefix has a range or only the ordering;
        # anything after it cannot be sought to.
        after = [p for p in rest[1:] if p in equality or p in ranged]
        if after:
            return (
                f"cannot seek to {_quoted(after)} after `{rest[0]}`, which has no equality "
                "condition: properties with equality conditions must come first in the "
                "index, then at most one with ranges"
            )
        # Nothing past it is conditioned, and every property is named: the one past it is
        # the ordering, and it has a range (equality would have put it in the prefix).
        return f"cannot order by `{order}` after a range on `{rest[0]}`"
    return None


def suggest(
    conditions: Sequence[Condition],
    order: str | None,
    column: str | None,
    kind: str | None = None,
) -> str:
    """The declaration of an index that would serve the query, or why none can."""
    by_prop: dict[str, list[Condition]] = defaultdict(list)
    for cond in conditions:
        by_prop[cond.prop].append(cond)
    equal = [p for p, conds in by_prop.items() if all(c.is_equality for c in conds)]
    ranged = [p for p in by_prop if p not in equal]
    if len(ranged) > 1:
        return (
            f"no index can serve ranges on both {_quoted(ranged)}: keep the range on one and "
            "filter the other in Python"
        )
    last = ranged[0] if ranged else None
    if order is not None and order not in equal:
        if last is not None and order != last:
            return f"no index can serve a range on `{last}` ordered by `{order}`"
        last = order
    properties = equal + ([last] if last is not None else [])
    bad = [p for p in properties if not is_identifier(p)]
    if bad:
        return (
            f"no index can hold {_quoted(bad)}: indexed property names are lowercase letters, "
            "digits and _"
        )
    pinning = [p for p in equal if any(c.lookup == "exact" for c in by_prop[p])]
    shard_on = (pinning or equal or properties)[0]
    table = ("index_" + "_".join(properties))[:64]
    declaration = f"Index(table={table!r}, properties={properties!r}, shard_on={shard_on!r}"
    if column is not None:
        declaration += f", column={column!r}"
    where = "an indexes.py" if kind is None else f"the Meta.indexes of kind {kind!r}"
    return (
        f"declare {declaration}) in {where}, run `manage.py migrateall`, then "
        f"`manage.py runcleaner --index={table}`"
    )


def plan(
    conditions: list[Condition],
    order: str | None = None,
    *,
    descending: bool = False,
    allow_building: bool = False,
    column: str | None = None,
    kind: str | None = None,
) -> Plan:
    """Judge every declared index over the query's source and choose one (see the module docs).

    Never raises for want of an index: :attr:`Plan.index` is then None and
    :attr:`Plan.problem` says why. Only ``ready`` indexes are chosen, unless ``allow_building``.
    ``kind``: a kind's query (docs/kinds.md) is served only by the indexes declared on it, and
    a plain query only by indexes declared on no kind.
    """
    states = lifecycle.states()
    verdicts = [
        Verdict(
            index,
            states.get(index.name),
            check_index(index, conditions, order) if index.kind == kind else other_kind(index),
        )
        for index in sorted(maintained_indexes(), key=lambda i: i.name)
        if index.column == column
    ]
    serving = [v for v in verdicts if v.serves]
    # A pinned shard first (one shard read), then the name (already sorted by it).
    serving.sort(key=lambda v: not _pins(v.index, conditions))
    result = Plan(conditions, order, descending, column, None, verdicts, kind=kind)
    usable = serving if allow_building else [v for v in serving if v.state == lifecycle.READY]
    if usable:
        result.index = usable[0].index
    elif serving:
        result.problem = "not_ready"
    else:
        result.problem = "no_index"
    return result


def choose_index(
    conditions: list[Condition],
    order: str | None = None,
    allow_building: bool = False,
    column: str | None = None,
    descending: bool = False,
    kind: str | None = None,
) -> Index:
    """The index that answers a query: :class:`NoIndexForQuery` if no declared index serves
    it (with :func:`plan`'s verdicts in the message), :class:`IndexNotReady` if only one still
    ``building`` does. The same choice as :func:`plan`, without judging the indexes that cannot
    serve (only those over exactly the named properties can): every query pays this."""
    named = frozenset(named_properties(conditions, order))
    serving = [
        index
        for index in maintained_indexes()
        if index.column == column
        and index.kind == kind
        and index.property_set == named
        and _seek_problem(index, conditions, order) is None
    ]
    if not serving:
        raise NoIndexForQuery(
            refusal(plan(conditions, order, descending=descending, column=column, kind=kind))
        )
    serving.sort(key=lambda index: (not _pins(index, conditions), index.name))
    if allow_building:
        return serving[0]
    states = lifecycle.states()
    for index in serving:
        if states.get(index.name) == lifecycle.READY:
            return index
    lifecycle.require_ready(serving[0])  # re-reads the states; raises if still not ready
    return serving[0]


def refusal(found: Plan) -> str:
    """Why no index serves the query, for :class:`NoIndexForQuery`."""
    named = ", ".join(f"`{p}`" for p in found.named)
    lines = [
        f"no index serves {found.query_text()}. An entity matches only if it has every "
        f"property the query names ({named}), so only an index over exactly those properties "
        "can answer without missing matches."
    ]
    rejections = found.rejections()
    if rejections:
        lines.append("Declared indexes:")
        lines.extend(f"  - {line}" for line in rejections)
    else:
        lines.append("No index is declared for this source.")
    lines.append(f"To serve it: {found.advice()}.")
    return "\n".join(lines)


def _pins(index: Index, conditions: Sequence[Condition]) -> bool:
    """One shard holds every row the query reads: an exact condition on ``shard_on``, or an
    ``in`` with a single value."""
    return any(
        c.prop == index.shard_on
        and (c.lookup == "exact" or (c.lookup == "in" and len(c.value) == 1))
        for c in conditions
    )
