"""Delta rules: the change of a query's result between two barriers, from the changes of its
sources and keyed reads of their other rows.

Changes are Z-sets: rows with integer weights (+1 inserted, -1 deleted; an update is both).

- Filter and Project apply to the changed rows and keep their weights.
- Inner equi-join: d(L join R) = dL join R_old + L_new join dR. ``R_old`` and ``L_new`` are never
  read whole: only their rows whose join key occurs in the other side's change are read, by key
  (``lookup``), through every operator below the join (a multi-way join looks up one input at a
  time, each by the keys the previous one found). Superset reads are harmless: the join and the
  filters above it are applied to whatever was read.
- Outer joins (LEFT, RIGHT, FULL): the inner join's delta, plus the change of the dangling rows
  of each outer side: for every join key the change touches (on either side), that side's rows
  that had no match at the old barrier are retracted and those with none at the new barrier
  emitted, padded with NULLs; a row with a NULL key always dangles. Whether a key has a match is
  read, not counted: the other side is looked up by the touched keys at both barriers, so a row
  that loses its only match and regains it within one barrier is exact, and no match-count state
  can drift from the sources.
- Window (ROW_NUMBER/RANK/DENSE_RANK, the TopK): every partition the change touches read by key
  at both barriers and ranked again, old rows retracted, new ones emitted
  (``spark_sink.ivm.window``).
- Aggregate: the child's delta folded per group into the group state table
  (``spark_sink.ivm.aggregate``); its output change is the group's old row retracted and its new
  row emitted. A lookup into an aggregate reads the group state by key (the new state of a group
  this epoch changed, else the stored one).

A lookup of a table by columns is keyed one of two ways (``Access``): by the table's primary key
when the columns cover it, else through an index state table (join column, primary key) that the
view job keeps in step with the table (``spark_sink.ivm.state``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from spark_sink.ivm.expressions import compile_expr
from spark_sink.ivm.plan import (
    Aggregate,
    Col,
    Filter,
    GroupRef,
    Join,
    Node,
    Project,
    Scan,
    Union,
    Unsupported,
    Window,
    output,
)

OLD, NEW = "old", "new"


class NeedsBuild(Exception):
    """This epoch's change cannot be applied to the kept state exactly (a NaN in a DOUBLE sum,
    a NULL window partition, ...): the epoch is a build instead. ``str(e)`` says why; it is
    raised before the delta writes anything."""


@dataclass
class ZSet:
    """Rows over the columns ``ids`` (Spark expression ids), each with a weight."""

    ids: tuple[int, ...]
    rows: list[tuple] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def pos(self) -> dict[int, int]:
        return {c: i for i, c in enumerate(self.ids)}

    def values(self, cols: tuple[int, ...]) -> set[tuple]:
        """The distinct non-NULL tuples of ``cols`` (NULL never matches an equi-join)."""
        p = self.pos()
        idx = [p[c] for c in cols]
        out = set()
        for r in self.rows:
            t = tuple(r[i] for i in idx)
            if None not in t:
                out.add(t)
        return out


@dataclass(frozen=True)
class Access:
    """How rows of ``table`` are found by the values of ``columns``: ``pk`` (point reads of the
    table) or ``index`` (a prefix read of the index on ``columns[0]``, then point reads)."""

    table: str
    columns: tuple[str, ...]
    kind: str  # pk | index
    index_column: str = ""


class Inputs(Protocol):
    """What one epoch gives the delta rules (see spark_sink.ivm.epoch)."""

    def changes(self, table: str) -> tuple[list[tuple], list[int]]:
        """The table's net change between its old and new read ts: full rows in column order,
        with weights."""
        ...

    def fetch(self, access: Access, side: str, values: set[tuple]) -> list[tuple]:
        """Full rows of ``access.table`` at its ``side`` ts whose ``access.columns`` may equal
        one of ``values`` (a superset is allowed)."""
        ...

    def columns(self, table: str) -> tuple[str, ...]: ...

    def primary_key(self, table: str) -> tuple[str, ...]: ...


def choose_access(table: str, columns: tuple[str, ...], pk: tuple[str, ...]) -> Access:
    if pk and set(pk) <= set(columns):
        return Access(table, columns, "pk")
    return Access(table, columns, "index", columns[0])


# ---------------------------------------------------------------------- planning


PkOf = Callable[[str], tuple[str, ...]]


def lookup_accesses(
    node: Node, ids: tuple[int, ...], pk_of: PkOf, out: list[Access] | None = None
) -> list[Access]:
    """The keyed reads ``lookup(node, ids, ...)`` will make (checked at build: raises
    Unsupported when ``ids`` cannot be traced to a stored column)."""
    out = [] if out is None else out
    match node:
        case Scan(table=t, attrs=attrs):
            names = {a.id: a.name for a in attrs}
            out.append(choose_access(t, tuple(names[i] for i in ids), pk_of(t)))
        case Filter(child=c):
            lookup_accesses(c, ids, pk_of, out)
        case Project():
            child_ids, _ = _through_project(node, ids)
            lookup_accesses(node.child, child_ids, pk_of, out)
        case Join():
            first, then, fk, tk, mine = _join_order(node, ids)
            lookup_accesses(first, mine, pk_of, out)
            lookup_accesses(then, tk, pk_of, out)
        case Aggregate():
            _group_positions(node, ids)  # raises Unsupported unless ids include a group column
        case Union():
            for c, c_ids in _union_children(node, ids):
                lookup_accesses(c, c_ids, pk_of, out)
        case Window(child=c, partition=p):  # by the partition columns (ivm.window)
            from spark_sink.ivm.window import lookup_partition_positions

            lookup_partition_positions(node, ids)
            lookup_accesses(c, p, pk_of, out)
    return out


def plan_accesses(node: Node, pk_of: PkOf) -> list[Access]:
    """Every keyed read the delta rules of ``node`` can make (each join's two sides)."""
    out: list[Access] = []
    match node:
        case Filter(child=c) | Project(child=c):
            out += plan_accesses(c, pk_of)
        case Join(left=left, right=right, left_keys=lk, right_keys=rk):
            out += lookup_accesses(right, rk, pk_of)
            out += lookup_accesses(left, lk, pk_of)
            out += plan_accesses(left, pk_of) + plan_accesses(right, pk_of)
        case Aggregate(child=c):
            out += plan_accesses(c, pk_of)
        case Union(children=children):
            for c in children:
                out += plan_accesses(c, pk_of)
        case Window(child=c, partition=p):  # touched partitions read by key (ivm.window)
            out += lookup_accesses(c, p, pk_of)
            out += plan_accesses(c, pk_of)
        case Scan():
            pass
    return out


def _union_children(node: Union, ids: tuple[int, ...]) -> list[tuple[Node, tuple[int, ...]]]:
    """Each child of a UNION ALL with the columns at the positions of ``ids`` in its result."""
    at = [[a.id for a in node.attrs].index(c) for c in ids]
    out = []
    for child in node.children:
        cols = output(child)
        out.append((child, tuple(cols[i].id for i in at)))
    return out


def _group_positions(node: Aggregate, ids: tuple[int, ...]) -> list[tuple[int, int]]:
    """(position in ids, grouping expression index) for each of ``ids`` that is a plain output
    of a grouping expression; at least one, else Unsupported."""
    src = {a.id: e for a, e in node.outputs}
    out = []
    for i, c in enumerate(ids):
        e = src[c]
        if isinstance(e, GroupRef):
            out.append((i, e.index))
    if {g for _, g in out} != set(range(len(node.groups))):
        raise Unsupported(
            "a join with an aggregate on other than all its grouping columns is not maintained "
            "incrementally"
        )
    return out


def _through_project(node: Project, ids: tuple[int, ...]) -> tuple[tuple[int, ...], list[int]]:
    """The child columns that ``ids`` are plain copies of, and which positions of ``ids``."""
    from spark_sink.ivm.plan import Col

    src = {a.id: e for a, e in node.outputs}
    child_ids, kept = [], []
    for i, c in enumerate(ids):
        e = src[c]
        if isinstance(e, Col):
            child_ids.append(e.id)
            kept.append(i)
    if not child_ids:
        raise Unsupported(
            "a join on a computed column (" + ", ".join(f"#{c}" for c in ids) + ") is not "
            "maintained incrementally"
        )
    return tuple(child_ids), kept


def _join_order(node: Join, ids: tuple[int, ...]):
    """For a lookup into a join by ``ids``: which side is read first (the one holding ids), by
    which of them, and the keys that lead from it into the other side."""
    left_ids = {a.id for a in output(node.left)}
    mine_l = tuple(c for c in ids if c in left_ids)
    if mine_l:
        return node.left, node.right, node.left_keys, node.right_keys, mine_l
    return node.right, node.left, node.right_keys, node.left_keys, ids


# ---------------------------------------------------------------------- running


class MatchCounts(Protocol):
    """An outer side's match counts for one epoch (spark_sink.ivm.outer)."""

    def step(self, keys: set[tuple], change: dict[tuple, int]) -> dict[tuple, tuple[int, int]]: ...


class AggregateState(Protocol):
    """An Aggregate node's group state for one epoch (spark_sink.ivm.aggregate)."""

    def delta(self, rules: DeltaRules, node: Aggregate, child: ZSet) -> ZSet: ...

    def delta_of_scan(
        self, rules: DeltaRules, node: Aggregate, child: Node, scan: Scan, names: list[str]
    ) -> ZSet:
        """``delta(rules, node, rules.delta(child))`` for a ``child`` that is ``scan``'s
        columns ``names`` (``plain_source``), free to read the change otherwise."""
        ...

    def lookup(
        self, rules: DeltaRules, node: Aggregate, idx: list[int], groups: set[tuple], side: str
    ) -> list[tuple]: ...


class DeltaRules:
    """Runs the delta rules of one query tree over one epoch's ``Inputs``; counts lookups."""

    def __init__(
        self,
        inputs: Inputs,
        aggregates: dict[int, AggregateState] | None = None,
        matches: Mapping[tuple[int, str], MatchCounts] | None = None,
    ) -> None:
        self.inputs = inputs
        self.aggregates = aggregates or {}  # id(Aggregate node) -> its group state
        self.matches = matches or {}  # (id(Join node), outer side) -> its match counts
        self.lookups = 0  # keys looked up
        self._compiled: dict[object, object] = {}
        self._deltas: dict[int, ZSet] = {}

    # ------------------------------------------------------------------ delta

    def delta(self, node: Node) -> ZSet:
        """The change of ``node``'s result between the old and the new barrier (computed once
        per node and epoch)."""
        got = self._deltas.get(id(node))
        if got is None:
            got = self._deltas[id(node)] = self._delta(node)
        return got

    def _delta(self, node: Node) -> ZSet:
        match node:
            case Scan(table=t, attrs=attrs):
                rows, weights = self.inputs.changes(t)
                return ZSet(tuple(a.id for a in attrs), self._pick(t, attrs, rows), weights)
            case Filter():
                return self._filter(node, self.delta(node.child))
            case Project():
                return self._project(node, self.delta(node.child))
            case Join():
                out = self.join_delta(node)
                for side in outer_sides(node):
                    self._dangling_delta(node, out, side)
                return out
            case Aggregate(child=c) if (src := plain_source(c)) is not None:
                # the change of a source's columns: taken as Arrow where that helps
                return self.aggregates[id(node)].delta_of_scan(self, node, c, *src)
            case Aggregate():
                return self.aggregates[id(node)].delta(self, node, self.delta(node.child))
            case Union(attrs=attrs, children=children):
                out = ZSet(tuple(a.id for a in attrs))
                for c in children:  # columns match by position
                    d = self.delta(c)
                    out.rows += d.rows
                    out.weights += d.weights
                return out
            case Window():
                from spark_sink.ivm.window import window_delta

                return window_delta(self, node)
        raise Unsupported(f"{type(node).__name__} in a delta")

    def join_delta(self, node: Join) -> ZSet:
        """d(L join R) = dL join R_old + L_new join dR, each other side read by key."""
        dl, dr = self.delta(node.left), self.delta(node.right)
        out = ZSet(tuple(a.id for a in output(node)))
        if len(dl):
            old_r = self.lookup(node.right, node.right_keys, dl.values(node.left_keys), OLD)
            self._join_into(out, node, dl, old_r)
        if len(dr):
            new_l = self.lookup(node.left, node.left_keys, dr.values(node.right_keys), NEW)
            self._join_into(out, node, new_l, dr)
        return out

    def _dangling_delta(self, node: Join, out: ZSet, side: str) -> None:
        """Add to ``out`` the change of an outer join's NULL-padded rows of ``side``. The padded
        rows of key k are the kept side's rows of k while k's match count (spark_sink.ivm.outer)
        is 0: their change is the kept side's change where the count stays 0, minus the old
        rows where it leaves 0, plus the new rows where it reaches 0. A row with a NULL key
        never matches: it always dangles."""
        keep, keys_k, other, keys_o = _sides(node, side)
        dk, do = self.delta(keep), self.delta(other)
        pad = (None,) * len(output(other))
        keys = dk.values(keys_k) | do.values(keys_o)
        both: dict[tuple, tuple[int, int]] = {}
        if keys:
            change: dict[tuple, int] = {}
            po = do.pos()
            oi = [po[c] for c in keys_o]
            for r, w in zip(do.rows, do.weights, strict=True):
                k = tuple(r[i] for i in oi)
                if None not in k:
                    change[k] = change.get(k, 0) + w
            self.lookups += len(keys)
            both = self.matches[(id(node), side)].step(keys, change)
        pk = dk.pos()
        ki = [pk[c] for c in keys_k]
        for r, w in zip(dk.rows, dk.weights, strict=True):
            k = tuple(r[i] for i in ki)
            if None in k or both[k] == (0, 0):
                out.rows.append(_padded(r, pad, side))
                out.weights.append(w)
        gained = {k for k, (a, b) in both.items() if a == 0 and b > 0}
        lost = {k for k, (a, b) in both.items() if a > 0 and b == 0}
        for ks, ts, sign in ((gained, OLD, -1), (lost, NEW, 1)):
            if not ks:
                continue
            kept = self.lookup(keep, keys_k, ks, ts)
            p = kept.pos()
            at = [p[c] for c in keys_k]
            for r in kept.rows:
                if tuple(r[i] for i in at) in ks:
                    out.rows.append(_padded(r, pad, side))
                    out.weights.append(sign)

    # ------------------------------------------------------------------ lookup

    def lookup(self, node: Node, ids: tuple[int, ...], values: set[tuple], side: str) -> ZSet:
        """The rows of ``node``'s result at ``side`` whose ``ids`` equal one of ``values`` (a
        superset: callers re-apply the join), each with weight 1."""
        out_ids = tuple(a.id for a in output(node))
        if not values:
            return ZSet(out_ids)
        match node:
            case Scan(table=t, attrs=attrs):
                names = {a.id: a.name for a in attrs}
                cols = tuple(names[i] for i in ids)
                access = choose_access(t, cols, self.inputs.primary_key(t))
                self.lookups += len(values)
                rows = self.inputs.fetch(access, side, values)
                return ZSet(out_ids, self._pick(t, attrs, rows), [1] * len(rows))
            case Filter():
                return self._filter(node, self.lookup(node.child, ids, values, side))
            case Project():
                child_ids, kept = _through_project(node, ids)
                vals = {tuple(v[i] for i in kept) for v in values}
                return self._project(node, self.lookup(node.child, child_ids, vals, side))
            case Join():
                first, then, fk, tk, mine = _join_order(node, ids)
                pos = {c: i for i, c in enumerate(ids)}
                vals = {tuple(v[pos[c]] for c in mine) for v in values}
                a = self.lookup(first, mine, vals, side)
                b = self.lookup(then, tk, a.values(fk), side)
                out = ZSet(out_ids)
                if first is node.left:
                    self._join_into(out, node, a, b)
                else:
                    self._join_into(out, node, b, a)
                # Padded rows of the side looked up by (an outer side) are found here; padded
                # rows of the other side have NULL in ``ids`` and never equal a looked-up value.
                side = "left" if first is node.left else "right"
                if side in outer_sides(node):
                    self._pad_unmatched(out, node, a, b, side)
                return out
            case Aggregate():
                gpos = _group_positions(node, ids)
                groups = {tuple(v[i] for i, _ in gpos) for v in values}
                idx = [g for _, g in gpos]
                st = self.aggregates[id(node)]
                self.lookups += len(groups)
                rows = st.lookup(self, node, idx, groups, side)
                return ZSet(out_ids, rows, [1] * len(rows))
            case Union():
                out = ZSet(out_ids)
                for c, c_ids in _union_children(node, ids):
                    got = self.lookup(c, c_ids, values, side)
                    out.rows += got.rows
                    out.weights += got.weights
                return out
            case Window():
                from spark_sink.ivm.window import window_lookup

                return window_lookup(self, node, ids, values, side)
        raise Unsupported(f"a lookup into {type(node).__name__}")

    def _pad_unmatched(self, out: ZSet, node: Join, kept: ZSet, other: ZSet, side: str) -> None:
        _, keys_k, other_node, keys_o = _sides(node, side)
        matched = other.values(keys_o)
        p = kept.pos()
        ki = [p[c] for c in keys_k]
        pad = (None,) * len(output(other_node))
        for r in kept.rows:
            if tuple(r[i] for i in ki) not in matched:
                out.rows.append(_padded(r, pad, side))
                out.weights.append(1)

    # ------------------------------------------------------------------ operators

    def _pick(self, table: str, attrs, rows: list[tuple]) -> list[tuple]:
        cols = self.inputs.columns(table)
        idx = [cols.index(a.name) for a in attrs]
        return [tuple(r[i] for i in idx) for r in rows]

    def _fn(self, key, expr, pos):
        f = self._compiled.get(key)
        if f is None:
            f = self._compiled[key] = compile_expr(expr, pos)
        return f

    def _filter(self, node: Filter, z: ZSet) -> ZSet:
        f = self._fn(id(node), node.cond, z.pos())
        out = ZSet(z.ids)
        for r, w in zip(z.rows, z.weights, strict=True):
            if f(r) is True:
                out.rows.append(r)
                out.weights.append(w)
        return out

    def _project(self, node: Project, z: ZSet) -> ZSet:
        pos = z.pos()
        fs = [self._fn((id(node), i), e, pos) for i, (_, e) in enumerate(node.outputs)]
        rows = [tuple(f(r) for f in fs) for r in z.rows]
        return ZSet(tuple(a.id for a, _ in node.outputs), rows, list(z.weights))

    def _join_into(self, out: ZSet, node: Join, left: ZSet, right: ZSet) -> None:
        lp, rp = left.pos(), right.pos()
        li = [lp[c] for c in node.left_keys]
        ri = [rp[c] for c in node.right_keys]
        table: dict[tuple, list[int]] = {}
        for j, r in enumerate(right.rows):
            k = tuple(r[i] for i in ri)
            if None not in k:
                table.setdefault(k, []).append(j)
        res = None
        if node.residual is not None:
            res = self._fn(id(node), node.residual, out.pos())
        for lr, lw in zip(left.rows, left.weights, strict=True):
            k = tuple(lr[i] for i in li)
            for j in table.get(k, ()):
                row = lr + right.rows[j]
                if res is not None and res(row) is not True:
                    continue
                out.rows.append(row)
                out.weights.append(lw * right.weights[j])


def plain_source(node: Node) -> tuple[Scan, list[str]] | None:
    """(the source, the source column of each output column of ``node``) when ``node`` is a
    Scan, or Projects of plain column copies over one; None otherwise."""
    if isinstance(node, Scan):
        return node, [a.name for a in node.attrs]
    if isinstance(node, Project):
        below = plain_source(node.child)
        if below is None:
            return None
        scan, names = below
        by_id = dict(zip((a.id for a in output(node.child)), names, strict=True))
        out = []
        for _, e in node.outputs:
            if not isinstance(e, Col) or e.id not in by_id:
                return None
            out.append(by_id[e.id])
        return scan, out
    return None


def outer_sides(node: Join) -> tuple[str, ...]:
    """The sides of ``node`` whose unmatched rows are kept, padded with NULLs."""
    return {"inner": (), "left": ("left",), "right": ("right",), "full": ("left", "right")}[
        node.kind
    ]


def _sides(node: Join, side: str) -> tuple[Node, tuple[int, ...], Node, tuple[int, ...]]:
    """(``side``'s input, its join keys, the other input, its join keys)."""
    if side == "left":
        return node.left, node.left_keys, node.right, node.right_keys
    return node.right, node.right_keys, node.left, node.left_keys


def _padded(row: tuple, pad: tuple, side: str) -> tuple:
    return row + pad if side == "left" else pad + row


def consolidate(rows: Iterable[tuple], weights: Iterable[int]) -> dict[tuple, int]:
    """Sum the weights of equal rows; rows whose weights cancel are dropped."""
    acc: dict[tuple, int] = {}
    for r, w in zip(rows, weights, strict=True):
        acc[r] = acc.get(r, 0) + w
    return {r: w for r, w in acc.items() if w}
