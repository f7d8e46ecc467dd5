"""Aggregates maintained from a Z-set of input changes: per group, a running row count and, per
aggregate, a running sum and count of non-NULL inputs, kept in the group state table.

COUNT(*), COUNT(x), SUM(x), AVG(x) and DISTINCT (an aggregate without functions) decompose into
those sums; the group's row count says exactly when a group appears or disappears (count 0 ->
the group's view row is deleted; a global aggregate keeps its one row, with COUNT 0 and SUM
NULL, as Spark does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvstore.errors import SchemaMismatch
from spark_sink.ivm.delta import NEW, DeltaRules, ZSet
from spark_sink.ivm.expressions import agg_input, compile_expr, exact_zero, finalize
from spark_sink.ivm.plan import Aggregate

if TYPE_CHECKING:
    from kvstore.table_info import TableInfo
    from spark_sink.ivm.inputs import StoreInputs


@dataclass
class GroupState:
    """A group's running state: rows, then (sum, non-NULL count) per aggregate."""

    rows: int
    sums: list
    counts: list[int]

    @classmethod
    def empty(cls, agg: Aggregate) -> GroupState:
        return cls(0, [exact_zero(a) for a in agg.aggs], [0] * len(agg.aggs))

    def as_values(self) -> list:
        out: list = [self.rows]
        for s, n in zip(self.sums, self.counts, strict=True):
            out += [s, n]
        return out

    @classmethod
    def from_values(cls, agg: Aggregate, values: list) -> GroupState:
        sums, counts = [], []
        for j, a in enumerate(agg.aggs):
            s = values[1 + 2 * j]
            sums.append(exact_zero(a) if s is None else s)
            counts.append(int(values[2 + 2 * j]))
        return cls(int(values[0]), sums, counts)


class GroupDeltas:
    """Folds a Z-set of the aggregate's input rows into per-group changes of GroupState."""

    def __init__(self, agg: Aggregate, child_ids: tuple[int, ...]) -> None:
        self.agg = agg
        pos = {c: i for i, c in enumerate(child_ids)}
        self.group_fns = [compile_expr(g, pos) for g in agg.groups]
        self.arg_fns = [[compile_expr(x, pos) for x in a.args] for a in agg.aggs]

    def fold(self, z: ZSet) -> dict[tuple, GroupState]:
        out: dict[tuple, GroupState] = {}
        aggs = self.agg.aggs
        for r, w in zip(z.rows, z.weights, strict=True):
            g = tuple(f(r) for f in self.group_fns)
            st = out.get(g)
            if st is None:
                st = out[g] = GroupState.empty(self.agg)
            st.rows += w
            for j, a in enumerate(aggs):
                vals: list[Any] = [f(r) for f in self.arg_fns[j]]
                if any(v is None for v in vals):
                    continue
                st.counts[j] += w
                if a.kind != "count":
                    st.sums[j] += w * agg_input(a, vals[0])
        return out


def merge(agg: Aggregate, old: GroupState | None, d: GroupState) -> GroupState:
    base = old or GroupState.empty(agg)
    return GroupState(
        base.rows + d.rows,
        [s + ds for s, ds in zip(base.sums, d.sums, strict=True)],
        [n + dn for n, dn in zip(base.counts, d.counts, strict=True)],
    )


class AggregateOutput:
    """The aggregate's output row for a group from its state (the Aggregate's result
    expressions over the group values and the final aggregate values)."""

    def __init__(self, agg: Aggregate) -> None:
        self.agg = agg
        ng, na = len(agg.groups), len(agg.aggs)
        env = {"groups": list(range(ng)), "aggs": list(range(ng, ng + na))}
        self.fns = [compile_expr(e, {}, env) for _, e in agg.outputs]

    def row(self, group: tuple, st: GroupState) -> tuple:
        finals = [
            finalize(a, s, n) for a, s, n in zip(self.agg.aggs, st.sums, st.counts, strict=True)
        ]
        env_row = tuple(group) + tuple(finals)
        return tuple(f(env_row) for f in self.fns)


class AggregateState:
    """One Aggregate node's groups during one epoch: folds the child's change into the stored
    group states (read by key from ``table``), returns the output change, and keeps the new
    states for lookups at the new barrier and for writing (``upserts``, ``deletes``)."""

    def __init__(self, agg: Aggregate, table: TableInfo, inputs: StoreInputs, view: str) -> None:
        self.agg = agg
        self.table = table
        self.inputs = inputs
        self.view = view
        self.global_agg = not agg.groups
        self.out = AggregateOutput(agg)
        self.new: dict[tuple, GroupState] = {}
        self.upserts: list[list] = []
        self.deletes: list[list] = []
        self._folder: GroupDeltas | None = None

    def _key(self, group: tuple) -> tuple:
        return (0,) if self.global_agg else group

    def _read(self, groups: list[tuple]) -> dict[tuple, GroupState]:
        raw = self.inputs.read_state(self.table, [self._key(g) for g in groups])
        out = {}
        for g in groups:
            r = raw.get(self._key(g))
            if r is not None:
                out[g] = GroupState.from_values(self.agg, r)
        return out

    def _present(self, st: GroupState | None) -> bool:
        return st is not None and (st.rows > 0 or self.global_agg)

    def delta(self, rules: DeltaRules, node: Aggregate, child: ZSet) -> ZSet:
        if self._folder is None:
            self._folder = GroupDeltas(node, child.ids)
        folded = self._folder.fold(child)
        folded = {g: d for g, d in folded.items() if d.rows or any(d.counts) or any(d.sums)}
        old_states = self._read(list(folded))
        rules.lookups += len(folded)
        rows: list[tuple] = []
        weights: list[int] = []
        for g, d in folded.items():
            old = old_states.get(g)
            new = merge(node, old, d)
            if new.rows < 0:
                raise SchemaMismatch(
                    f"view {self.view!r}: group {g!r} would have {new.rows} rows; the view's "
                    "state is inconsistent with its sources (rebuild the view)"
                )
            self.new[g] = new
            if self._present(old):
                assert old is not None
                rows.append(self.out.row(g, old))
                weights.append(-1)
            if self._present(new):
                rows.append(self.out.row(g, new))
                weights.append(1)
                self.upserts.append([*self._key(g), *new.as_values()])
            elif old is not None:
                self.deletes.append([*self._key(g), *new.as_values()])
        return ZSet(tuple(a.id for a, _ in node.outputs), rows, weights)

    def lookup(
        self, rules: DeltaRules, node: Aggregate, idx: list[int], groups: set[tuple], side: str
    ) -> list[tuple]:
        """Output rows of the groups whose grouping values at ``idx`` are in ``groups``. Only
        lookups by the whole group key are exact; by a part, the stored groups are found by key
        when ``idx`` covers the key, else Unsupported at build (delta._group_positions)."""
        keys: list[tuple] = []
        if self.global_agg:
            keys = [()]
        elif sorted(idx) == list(range(len(self.agg.groups))):
            for v in groups:
                full: list = [None] * len(self.agg.groups)
                for i, x in zip(idx, v, strict=True):
                    full[i] = x
                keys.append(tuple(full))
        else:
            raise SchemaMismatch(
                f"view {self.view!r}: a lookup into an aggregate by part of its group key"
            )
        states = self._read(keys)
        if side == NEW:
            for g in keys:
                if g in self.new:
                    states[g] = self.new[g]
        return [self.out.row(g, st) for g, st in states.items() if self._present(st)]
