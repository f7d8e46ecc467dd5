"""Aggregates maintained from a Z-set of input changes, with per-group state in state tables.

Per group the group state table keeps the row count and, per aggregate function, a running value
and a count of its non-NULL inputs:

- COUNT(*), COUNT(x), SUM(x), AVG(x): the running sum and count; the value follows from them.
  Integer and DECIMAL sums are exact. A DOUBLE sum is kept as an unevaluated pair hi + lo (the
  ``c`` column holds lo) and updated in exact rational arithmetic, then rounded back to the
  pair: it equals the exact sum of the group's current inputs to about 2^-106 of the largest
  partial sum, so adding and removing a large value leaves no trace (docs/design.md §6.4).
  A NaN or an infinity cannot be subtracted back out: a group that meets one makes the epoch
  a build (``NeedsBuild``).
- DISTINCT aggregates (COUNT/SUM/AVG(DISTINCT x)): a values state table holds each group's
  distinct values with their multiplicities; a value enters the running sum and count when its
  multiplicity becomes positive and leaves when it returns to 0.
- MIN(x), MAX(x): the running value is the current extreme. The values state table is ordered by
  the value (ascending for MIN, descending for MAX), so when the extreme's multiplicity falls to
  0 the group's next extreme is the first of its remaining values: a keyed read of the group's
  first few values (``range_limit``), never a read of the source.

The group's row count says exactly when a group appears or disappears (count 0 -> the group's
view row is deleted; a global aggregate keeps its one row, with COUNT 0 and SUM NULL, as Spark
does).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import localcontext
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kvstore.errors import SchemaMismatch
from kvstore.mvcc.keys import KeyCodec
from kvstore.schema import TableSchema, to_storage
from spark_sink.ivm.aggregate_columnar import (
    COMPLEMENT,
    ColumnarAggregate,
    ColumnarResult,
    Fallback,
    StateReads,
    columnar_reason,
    first_values_width,
)
from spark_sink.ivm.delta import DeltaRules
from spark_sink.ivm.expressions import (
    WIDE_DECIMALS,
    agg_input,
    compensated,
    compile_expr,
    exact_zero,
    finisher,
    keeps_values,
)
from spark_sink.ivm.ops.operator import NEW, NeedsBuild, ZSet
from spark_sink.ivm.plan import Aggregate, Node, Scan, output
from spark_sink.ivm.read_pool import read_pool

if TYPE_CHECKING:
    from kvstore.table_info import TableInfo
    from spark_sink.ivm.inputs import StoreInputs


@dataclass(frozen=True)
class Layout:
    """What each aggregate function of one Aggregate keeps, worked out once per epoch: the fold,
    the merge and the state rows ask it per changed row and per group, and re-deriving it from
    the plan's type strings each time was a fifth of an aggregate epoch."""

    kinds: tuple[str, ...]  # per function: values (MIN/MAX, DISTINCT) | comp (DOUBLE sum) | plain
    counts: tuple[bool, ...]  # per function: a COUNT (no running value)
    zeros: tuple[Any, ...]  # per function: its running value over no rows (exact_zero)

    @classmethod
    def of(cls, agg: Aggregate) -> Layout:
        return cls(
            tuple(
                "values" if keeps_values(a) else "comp" if compensated(a) else "plain"
                for a in agg.aggs
            ),
            tuple(a.kind == "count" for a in agg.aggs),
            tuple(exact_zero(a) for a in agg.aggs),
        )


@dataclass
class GroupState:
    """A group's running state: rows, then per aggregate its running value (a sum, or the
    extreme for MIN/MAX), its non-NULL count and, for a DOUBLE sum, the compensation lo."""

    rows: int
    sums: list
    counts: list[int]
    comps: list[float]

    @classmethod
    def empty(cls, lay: Layout) -> GroupState:
        n = len(lay.kinds)
        return cls(0, list(lay.zeros), [0] * n, [0.0] * n)

    def as_values(self, lay: Layout) -> list:
        out: list = [self.rows]
        for j, kind in enumerate(lay.kinds):
            out += [self.sums[j], self.counts[j]]
            if kind == "comp":
                out.append(self.comps[j])
        return out

    @classmethod
    def from_values(cls, lay: Layout, values: list) -> GroupState:
        sums, counts, comps = [], [], []
        i = 1
        for kind, zero in zip(lay.kinds, lay.zeros, strict=True):
            s = values[i]
            sums.append(zero if s is None else s)
            # NULL: a global aggregate's state built over no rows by an older version (0)
            counts.append(int(values[i + 1] or 0))
            i += 2
            if kind == "comp":
                comps.append(float(values[i] or 0.0))
                i += 1
            else:
                comps.append(0.0)
        return cls(int(values[0]), sums, counts, comps)


@dataclass
class GroupDelta:
    """The change of one group in one epoch: rows, per plain aggregate the change of its sum
    (a Fraction for DOUBLE: exact) and count, per values-keeping aggregate value -> weight (and
    for MIN/MAX the change of the non-NULL count)."""

    rows: int
    sums: list
    counts: list[int]
    values: list[dict[Any, int]]

    @classmethod
    def empty(cls, lay: Layout) -> GroupDelta:
        sums = [
            Fraction(0) if k == "comp" else z for k, z in zip(lay.kinds, lay.zeros, strict=True)
        ]
        n = len(lay.kinds)
        return cls(0, sums, [0] * n, [{} for _ in range(n)])

    def touches(self) -> bool:
        return bool(
            self.rows
            or any(self.counts)
            or any(self.sums)
            or any(any(v.values()) for v in self.values)
        )


def _exact(v: float) -> Fraction:
    if not math.isfinite(v):
        raise NeedsBuild(f"a DOUBLE sum meets {v}, which cannot be subtracted back out")
    return Fraction(v)


class GroupDeltas:
    """Folds a Z-set of the aggregate's input rows into per-group changes."""

    def __init__(
        self, agg: Aggregate, child_ids: tuple[int, ...], lay: Layout | None = None
    ) -> None:
        self.agg = agg
        self.lay = lay = lay or Layout.of(agg)
        pos = {c: i for i, c in enumerate(child_ids)}
        self.group_fns = [compile_expr(g, pos) for g in agg.groups]
        # Per function, what the loop needs, worked out once: (index, call, kind, argument
        # functions, a COUNT, its input is floating point).
        self.steps = [
            (
                j,
                a,
                lay.kinds[j],
                [compile_expr(x, pos) for x in a.args],
                lay.counts[j],
                a.input_dtype in ("double", "float"),
            )
            for j, a in enumerate(agg.aggs)
        ]

    def fold(self, z: ZSet) -> dict[tuple, GroupDelta]:
        # DECIMAL sums are exact: the default context would round them to 28 digits
        with localcontext(WIDE_DECIMALS):
            return self._fold(z)

    def _fold(self, z: ZSet) -> dict[tuple, GroupDelta]:
        out: dict[tuple, GroupDelta] = {}
        lay, gfns, steps = self.lay, self.group_fns, self.steps
        for r, w in zip(z.rows, z.weights, strict=True):
            g = tuple([f(r) for f in gfns])
            st = out.get(g)
            if st is None:
                st = out[g] = GroupDelta.empty(lay)
            st.rows += w
            for j, a, kind, fns, is_count, is_float in steps:
                v: Any = None
                if fns:
                    vals = [f(r) for f in fns]
                    if any(x is None for x in vals):
                        continue  # a NULL input is not counted or summed
                    v = float(vals[0]) if is_float else vals[0]  # agg_input
                if kind == "values":
                    st.values[j][v] = st.values[j].get(v, 0) + w
                    if not a.distinct:
                        st.counts[j] += w
                    continue
                st.counts[j] += w
                if is_count:
                    continue
                if kind == "comp":
                    st.sums[j] += w * _exact(v)
                else:
                    st.sums[j] += w * v
        return {g: d for g, d in out.items() if d.touches()}


class ValueOrder:
    """The memcomparable encoding of an aggregate's input values (the ``o`` key column of its
    values state table): ascending, or complemented (descending) for MAX."""

    def __init__(self, info: TableInfo, descending: bool) -> None:
        col = next(c for c in info.table_schema.columns if c.name == "v")
        self.col = col
        self.table = info.name
        self.codec = KeyCodec(0, TableSchema(info.name, [col], [col.name]))
        self.descending = descending
        self._memo: dict[Any, bytes] = {}

    def __call__(self, v: Any) -> bytes:
        got = self._memo.get(v)  # an epoch meets the same values often (current extremes)
        if got is None:
            b = self.codec.encode_values((to_storage(self.table, self.col, v),))[4:]
            got = b.translate(COMPLEMENT) if self.descending else b
            if len(self._memo) < 100_000:
                self._memo[v] = got
        return got


@dataclass
class ValuesTable:
    """One values-keeping aggregate function's state table during an epoch."""

    call: int
    info: TableInfo
    order: ValueOrder
    upserts: list[list] = field(default_factory=list)
    deletes: list[list] = field(default_factory=list)


class AggregateOutput:
    """The aggregate's output row for a group from its state (the Aggregate's result
    expressions over the group values and the final aggregate values)."""

    def __init__(self, agg: Aggregate) -> None:
        self.agg = agg
        ng, na = len(agg.groups), len(agg.aggs)
        env = {"groups": list(range(ng)), "aggs": list(range(ng, ng + na))}
        self.fns = [compile_expr(e, {}, env) for _, e in agg.outputs]
        self.finals = [finisher(a) for a in agg.aggs]

    def row(self, group: tuple, st: GroupState) -> tuple:
        finals = [f(s, n) for f, s, n in zip(self.finals, st.sums, st.counts, strict=True)]
        env_row = (*group, *finals)
        return tuple([f(env_row) for f in self.fns])


class AggregateState:
    """One Aggregate node's groups during one epoch: folds the child's change into the stored
    group states (read by key from ``table``), returns the output change, and keeps the new
    states for lookups at the new barrier and for writing (``upserts``, ``deletes``, and each
    values table's)."""

    def __init__(
        self,
        agg: Aggregate,
        table: TableInfo,
        inputs: StoreInputs,
        view: str,
        values: dict[int, TableInfo] | None = None,
    ) -> None:
        self.agg = agg
        self.table = table
        self.inputs = inputs
        self.view = view
        self.global_agg = not agg.groups
        self.out = AggregateOutput(agg)
        self.lay = Layout.of(agg)
        self.new: dict[tuple, GroupState] = {}
        self.upserts: list[list] = []
        self.deletes: list[list] = []
        self.values = {
            j: ValuesTable(j, info, ValueOrder(info, agg.aggs[j].kind == "max"))
            for j, info in (values or {}).items()
        }
        self._folder: GroupDeltas | None = None
        # The columnar path (spark_sink.ivm.aggregate_columnar) when this aggregate's shape
        # allows it; ``path`` says which path the last epoch took, ``why_rows`` why not columnar.
        self.why_rows = columnar_reason(agg)
        self.path = ""
        self._columnar: ColumnarAggregate | None = None
        self._pending: dict[tuple, list] = {}  # new states the columnar path left, as values

    def _key(self, group: tuple) -> tuple:
        return (0,) if self.global_agg else group

    def _read(self, groups: list[tuple]) -> dict[tuple, GroupState]:
        raw = self.inputs.read_state(self.table, [self._key(g) for g in groups])
        out = {}
        for g in groups:
            r = raw.get(self._key(g))
            if r is not None:
                out[g] = GroupState.from_values(self.lay, r)
        return out

    def _present(self, st: GroupState | None) -> bool:
        return st is not None and (st.rows > 0 or self.global_agg)

    def delta(self, rules: DeltaRules, node: Aggregate, child: ZSet) -> ZSet:
        if self.why_rows is None:
            try:
                return self._columnar_delta(
                    rules, node, child.ids, lambda c, read: c.run(child, read)
                )
            except Fallback as e:
                self.why_rows = f"this epoch's change: {e}"
        self.path = "rows"
        return self._row_delta(rules, node, child)

    def delta_of_scan(
        self, rules: DeltaRules, node: Aggregate, child: Node, scan: Scan, names: list[str]
    ) -> ZSet:
        """``delta`` of an aggregate over a source's columns (``child`` is ``scan`` or plain
        column copies of it, ``names`` the source column of each of its outputs): on the
        columnar path the change is taken as the change scan decoded into Arrow
        (``StoreInputs.changes_arrow``), with no tuple per changed row; on the row path as
        ``delta`` takes it."""
        if self.why_rows is None:
            change, weights = self.inputs.changes_arrow(scan.table)
            return self.delta_of_arrow(rules, node, child, change, weights, names)
        self.path = "rows"
        return self._row_delta(rules, node, rules.delta(child))

    def delta_of_arrow(
        self,
        rules: DeltaRules,
        node: Aggregate,
        child: Node,
        change: pa.Table,
        weights: pa.Array,
        names: list[str],
    ) -> ZSet:
        """``delta`` of an aggregate whose child's change is given as Arrow (``change``'s rows
        with ``weights``, the child's i-th column being ``change[names[i]]``): the columnar
        path takes it with no tuple per changed row; on the row path, or when the columnar
        path hands it back, ``delta`` takes the child's change as rows."""
        if self.why_rows is None:
            try:
                return self._columnar_delta(
                    rules,
                    node,
                    tuple(a.id for a in output(child)),
                    lambda c, read: c.run_arrow(change, weights, names, read),
                )
            except Fallback as e:
                self.why_rows = f"this epoch's change: {e}"
        self.path = "rows"
        return self._row_delta(rules, node, rules.delta(child))

    def _columnar_delta(
        self,
        rules: DeltaRules,
        node: Aggregate,
        child_ids: tuple[int, ...],
        run: Callable[[ColumnarAggregate, StateReads], ColumnarResult],
    ) -> ZSet:
        """``delta`` by the columnar path (``run`` hands it the change); Fallback (nothing
        kept) hands it to the rows."""
        if self._columnar is None:
            schema = self.table.table_schema.arrow_schema()
            vcols = {}
            for j, vt in self.values.items():
                v = next(c for c in vt.info.table_schema.columns if c.name == "v")
                vcols[j] = (v.type.kind, v.type.arrow())
            self._columnar = ColumnarAggregate(node, child_ids, schema, self.out.fns, vcols)
        reads = StateReads(
            lambda keys: self.inputs.read_state_arrow(self.table, keys),
            lambda j, keys: self.inputs.read_state_arrow(self.values[j].info, keys),
            lambda j, groups, width: self.inputs.read_first(self.values[j].info, groups, width),
        )
        got = run(self._columnar, reads)
        rules.lookups += got.groups_read + got.values_read
        self.upserts += got.upserts
        self.deletes += got.deletes
        for j, (ups, dels) in got.values.items():
            self.values[j].upserts += ups
            self.values[j].deletes += dels
        self._pending = got.news
        self.path = "columnar"
        return ZSet(tuple(a.id for a, _ in node.outputs), got.rows, got.weights)

    def _row_delta(self, rules: DeltaRules, node: Aggregate, child: ZSet) -> ZSet:
        if self._folder is None:
            self._folder = GroupDeltas(node, child.ids, self.lay)
        folded = self._folder.fold(child)
        # The group states and every values table's touched multiplicities are read at once:
        # their keys follow from the change alone, and the requests overlap on the server.
        touched = {j: self._touched(vt, folded) for j, vt in self.values.items()}
        pool = read_pool()
        stored = {
            j: pool.submit(self.inputs.read_state, self.values[j].info, keys)
            for j, (_, keys) in touched.items()
        }
        try:
            old_states = self._read(list(folded))  # in this thread, beside the values reads
        finally:
            multiplicities = {j: f.result() for j, f in stored.items()}
        rules.lookups += len(folded)
        with localcontext(WIDE_DECIMALS):  # exact DECIMAL sums, as in GroupDeltas.fold
            news = {g: _merge(self.lay, old_states.get(g), d, g) for g, d in folded.items()}
        for j, vt in self.values.items():
            rules.lookups += self._apply_values(
                vt, touched[j][0], multiplicities[j], old_states, news, folded
            )
        rows: list[tuple] = []
        weights: list[int] = []
        for g, new in news.items():
            old = old_states.get(g)
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
                self.upserts.append([*self._key(g), *new.as_values(self.lay)])
            elif old is not None:
                self.deletes.append([*self._key(g), *new.as_values(self.lay)])
        return ZSet(tuple(a.id for a, _ in node.outputs), rows, weights)

    def lookup(
        self, rules: DeltaRules, node: Aggregate, idx: list[int], groups: set[tuple], side: str
    ) -> list[tuple]:
        """Output rows of the groups whose grouping values at ``idx`` are in ``groups``. Only
        lookups by the whole group key are exact; by a part, Unsupported at build
        (delta._group_positions)."""
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
        if self._pending:  # the columnar path's new states, made GroupStates when first asked
            for g, vals in self._pending.items():
                self.new[g] = GroupState.from_values(self.lay, vals)
            self._pending = {}
        if side == NEW:
            for g in keys:
                if g in self.new:
                    states[g] = self.new[g]
        return [self.out.row(g, st) for g, st in states.items() if self._present(st)]

    def _touched(
        self, vt: ValuesTable, folded: dict[tuple, GroupDelta]
    ) -> tuple[dict[tuple, dict[bytes, tuple[Any, int]]], list[tuple]]:
        """The values of aggregate ``vt.call`` the change touches: g -> o -> (value, weight),
        and the values table's keys to read."""
        j = vt.call
        order = vt.order
        touched: dict[tuple, dict[bytes, tuple[Any, int]]] = {}
        keys = []
        for g, d in folded.items():
            if d.values[j]:
                by_o = touched[g] = {}
                for v, w in d.values[j].items():
                    o = order(v)
                    by_o[o] = (v, by_o[o][1] + w if o in by_o else w)  # -0.0 and 0.0: one o
                    keys.append((*self._key(g), o))
        return touched, keys

    def _apply_values(
        self,
        vt: ValuesTable,
        touched: dict[tuple, dict[bytes, tuple[Any, int]]],
        stored: dict[tuple, list],
        olds: dict[tuple, GroupState],
        news: dict[tuple, GroupState],
        folded: dict[tuple, GroupDelta],
    ) -> int:
        """Apply the change of each group's values of aggregate ``vt.call`` (``touched``, with
        their stored multiplicities ``stored``): their new multiplicities (written to the
        values table) and the group's new value; returns the keys read."""
        j = vt.call
        a = self.agg.aggs[j]
        order = vt.order
        keys = [k for by_o in touched.values() for k in by_o]
        reread: dict[tuple, tuple[set[bytes], bytes | None]] = {}  # g -> (gone, best touched)
        for g, by_o in touched.items():
            new = news[g]
            gone: set[bytes] = set()
            best: bytes | None = None
            best_v: Any = None
            for o, (v, w) in by_o.items():
                was = stored.get((*self._key(g), o))
                n_old = int(was[1]) if was else 0
                n_new = n_old + w
                if n_new < 0:
                    raise SchemaMismatch(
                        f"view {self.view!r}: value {v!r} of group {g!r} would occur {n_new} "
                        "times; the view's state is inconsistent with its sources (rebuild it)"
                    )
                if n_new > 0:
                    vt.upserts.append([*self._key(g), o, v, n_new])
                    if best is None or o < best:
                        best, best_v = o, v
                elif n_old > 0:
                    vt.deletes.append([*self._key(g), o, v, 0])
                    gone.add(o)
                if a.distinct and (n_old > 0) != (n_new > 0):
                    sign = 1 if n_new > 0 else -1
                    new.counts[j] += sign
                    if a.kind != "count":
                        if self.lay.kinds[j] == "comp":
                            new.sums[j], new.comps[j] = _pair(
                                new.sums[j], new.comps[j], sign * _exact(float(v)), g
                            )
                        else:
                            new.sums[j] = new.sums[j] + sign * agg_input(a, v)
            if a.distinct:
                continue
            old = olds.get(g)
            new.counts[j] = (old.counts[j] if old else 0) + folded[g].counts[j]
            cur = old.sums[j] if old is not None and old.counts[j] > 0 else None
            if new.counts[j] <= 0:
                new.sums[j] = None
                continue
            if cur is not None:
                o_cur = order(cur)
                if o_cur in gone:  # the extreme went: its successor may be a value not touched
                    reread[g] = (gone, best)
                elif best is None or o_cur < best:
                    best, best_v = o_cur, cur
            new.sums[j] = best_v
        if reread:
            self._next_extremes(vt, reread, news)
        return len(keys) + len(reread)

    def _next_extremes(
        self,
        vt: ValuesTable,
        reread: dict[tuple, tuple[set[bytes], bytes | None]],
        news: dict[tuple, GroupState],
    ) -> None:
        """For each group whose extreme went this epoch: its first stored value that did not go
        (reading one more than went is enough), if it beats the best value the epoch touched."""
        j = vt.call
        width = first_values_width(
            max(len(gone) for gone, _ in reread.values()), self.agg.aggs[j].kind
        )
        first = self.inputs.read_first(vt.info, [self._key(g) for g in reread], width)
        for g, (gone, best) in reread.items():
            for o, v in first.get(self._key(g), []):
                if o not in gone:
                    if best is None or o < best:
                        news[g].sums[j] = v
                    break


def merge(
    agg: Aggregate, old: GroupState | None, d: GroupDelta, g: tuple = (), lay: Layout | None = None
) -> GroupState:
    """The group's new state from its plain aggregates' changes (values-keeping ones are
    filled in by AggregateState._apply_values). ``lay``: ``Layout.of(agg)``, when the caller
    has it."""
    with localcontext(WIDE_DECIMALS):  # exact DECIMAL sums, as in GroupDeltas.fold
        return _merge(lay or Layout.of(agg), old, d, g)


def _merge(lay: Layout, old: GroupState | None, d: GroupDelta, g: tuple) -> GroupState:
    """``merge`` inside the caller's WIDE_DECIMALS context."""
    base = old or GroupState.empty(lay)
    new = GroupState(base.rows + d.rows, list(base.sums), list(base.counts), list(base.comps))
    for j, kind in enumerate(lay.kinds):
        if kind == "values":
            continue
        new.counts[j] += d.counts[j]
        if lay.counts[j]:
            continue
        if kind == "comp":
            new.sums[j], new.comps[j] = _pair(base.sums[j], base.comps[j], d.sums[j], g)
        else:
            new.sums[j] = base.sums[j] + d.sums[j]
    return new


def _pair(hi: float, lo: float, change: Fraction, g: tuple) -> tuple[float, float]:
    """hi + lo + change, exactly, rounded back to a pair of doubles (hi the nearest double)."""
    if not (math.isfinite(hi) and math.isfinite(lo)):
        raise NeedsBuild(f"group {g!r} holds a DOUBLE sum of {hi}")
    exact = Fraction(hi) + Fraction(lo) + change
    try:
        h = float(exact)
    except OverflowError:
        raise NeedsBuild(f"group {g!r}: a DOUBLE sum overflows") from None
    if not math.isfinite(h):
        raise NeedsBuild(f"group {g!r}: a DOUBLE sum overflows")
    return h, float(exact - Fraction(h))
