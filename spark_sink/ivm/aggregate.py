"""Aggregates maintained from a Z-set of input changes: per group, a running row count and, per
aggregate, a running sum and count of non-NULL inputs, kept in the group state table.

COUNT(*), COUNT(x), SUM(x), AVG(x) and DISTINCT (an aggregate without functions) decompose into
those sums; the group's row count says exactly when a group appears or disappears (count 0 ->
the group's view row is deleted; a global aggregate keeps its one row, with COUNT 0 and SUM
NULL, as Spark does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_sink.ivm.delta import ZSet
from spark_sink.ivm.expressions import agg_input, compile_expr, exact_zero, finalize
from spark_sink.ivm.plan import Aggregate


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
