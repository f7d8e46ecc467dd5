"""The columnar path of an epoch (``DeltaRules.delta_arrow``: Scan, Filter, Project, inner and
outer Join and UNION ALL over Arrow) against a plain evaluator: over seeded random trees and random table
versions, the columnar delta equals the query's result at the new version minus its result at
the old one, as does the row path's; a planted wrong join rule is caught. No server, no JVM:
Spark's differential tests (tests/spark/test_incremental.py) stay the judge of the real path."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_sink.ivm.delta import DeltaRules, columnar_reason
from spark_sink.ivm.expressions import compile_expr
from spark_sink.ivm.mutations import keys_new_to_view
from spark_sink.ivm.ops import join as join_mod
from spark_sink.ivm.ops.arrow_expr import NotColumnar, arrow_expr
from spark_sink.ivm.ops.operator import ZSet, consolidate
from spark_sink.ivm.ops.semi_join import EXISTS, PAIRS, counted, inequality
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet
from spark_sink.ivm.plan import Attr, Call, Col, Filter, Join, Lit, Project, Scan, SemiJoin, Union
from spark_sink.ivm.view_change import view_change
from tests.unit.net_change import cut, net_change

SCHEMAS = {
    "a": pa.schema([("id", pa.int64()), ("k", pa.int32()), ("v", pa.int64()), ("s", pa.string())]),
    "b": pa.schema([("bid", pa.int32()), ("name", pa.string()), ("r", pa.int32())]),
    "c": pa.schema([("cid", pa.int64()), ("aid", pa.int64()), ("t", pa.string())]),
}
PKS = {"a": ("id",), "b": ("bid",), "c": ("cid",)}
DTYPES = {pa.int64(): "bigint", pa.int32(): "int", pa.string(): "string"}


class _Inputs:
    """Two in-memory versions of the tables; keyed reads return exactly the matching rows."""

    def __init__(self, old: dict, new: dict) -> None:
        self.old, self.new = old, new

    def columns(self, table):
        return tuple(SCHEMAS[table].names)

    def primary_key(self, table):
        return PKS[table]

    def changes(self, table):
        return net_change(self.old[table], self.new[table])

    def changes_arrow(self, table):
        rows, weights = self.changes(table)
        return _table(table, rows), pa.array(weights, pa.int64())

    def fetch(self, access, side, values, columns=None):
        rows = (self.new if side == "new" else self.old)[access.table].values()
        at = [self.columns(access.table).index(c) for c in access.columns]
        found = [r for r in rows if tuple(r[i] for i in at) in values]
        return cut(found, self.columns(access.table), columns)

    def fetch_arrow(self, access, side, values):
        return _table(access.table, self.fetch(access, side, values))


def _table(name: str, rows: list[tuple]) -> pa.Table:
    schema = SCHEMAS[name]
    cols = [pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)]
    return pa.Table.from_arrays(cols, schema=schema)


# ---------------------------------------------------------------------- random trees


class _Ids:
    def __init__(self) -> None:
        self.n = 0

    def attr(self, name: str, dtype: str) -> Attr:
        self.n += 1
        return Attr(self.n, name, dtype, True)


def _scan(ids: _Ids, table: str) -> Scan:
    schema = SCHEMAS[table]
    return Scan(table, tuple(ids.attr(f.name, DTYPES[f.type]) for f in schema))


def _predicate(rng: random.Random, cols: tuple[Attr, ...]) -> Call:
    a = rng.choice(cols)
    if a.dtype == "string":
        lit = Lit(rng.choice(["x", "y", None]), "string")
    else:
        lit = Lit(rng.choice([0, 1, 2, None]), a.dtype)
    kind = rng.choice(["eq", "lt", "ge", "isnull", "not", "in", "eqns", "and"])
    if kind == "isnull":
        return Call("isnull", (Col(a.id),), "boolean")
    if kind == "not":
        return Call("not", (Call("eq", (Col(a.id), lit), "boolean"),), "boolean")
    if kind == "in":
        return Call(
            "in",
            (Col(a.id), lit, Lit(rng.choice([1, 2]) if a.dtype != "string" else "y", a.dtype)),
            "boolean",
        )
    if kind == "and":
        return Call("and", (_predicate(rng, cols), _predicate(rng, cols)), "boolean")
    return Call(kind, (Col(a.id), lit), "boolean")


def _maybe_filter(rng: random.Random, node):
    if rng.random() < 0.5:
        return Filter(_predicate(rng, node.columns()), node)
    return node


def _tree(rng: random.Random):
    ids = _Ids()
    a, b, c = _scan(ids, "a"), _scan(ids, "b"), _scan(ids, "c")
    shape = rng.choice(["filter", "join", "join3", "union", "project"])
    if shape == "filter":
        root = _maybe_filter(rng, a)
    elif shape == "union":
        a2 = _scan(ids, "a")
        attrs = tuple(ids.attr(x.name, x.dtype) for x in a.attrs)
        root = Union(attrs, (_maybe_filter(rng, a), _maybe_filter(rng, a2)))
    else:
        la, rb = _maybe_filter(rng, a), _maybe_filter(rng, b)
        residual = None
        kind = rng.choice(["inner", "inner", "left", "right", "full"])
        if kind == "inner" and rng.random() < 0.3:  # a condition across both sides
            residual = Call("ge", (Col(a.attrs[1].id), Col(b.attrs[2].id)), "boolean")
        root = Join(la, rb, (a.attrs[1].id,), (b.attrs[0].id,), residual, kind)
        if shape == "join3":  # (a join b) join c: c's change looks up into the join
            kind = rng.choice(["inner", "left", "right"])
            root = Join(root, _maybe_filter(rng, c), (a.attrs[0].id,), (c.attrs[1].id,), None, kind)
    if shape == "project" or rng.random() < 0.3:
        cols = root.columns()
        picked = [rng.choice(cols) for _ in range(rng.randint(1, 4))]
        outs = [(ids.attr(p.name, p.dtype), Col(p.id)) for p in picked]
        if rng.random() < 0.5:  # a computed boolean column
            outs.append((ids.attr("p", "boolean"), _predicate(rng, cols)))
        root = Project(tuple(outs), root)
    return root


def _versions(rng: random.Random) -> tuple[dict, dict]:
    def row(table: str, key: int) -> tuple:
        if table == "a":
            return (
                key,
                rng.choice([0, 1, 2, None]),
                rng.choice([0, 1, 2, None]),
                rng.choice(["x", "y", None]),
            )
        if table == "b":
            return (key, rng.choice(["x", "y", None]), rng.choice([0, 1, 2, None]))
        return (key, rng.choice([0, 1, 2, 3, None]), rng.choice(["x", "y", None]))

    old, new = {}, {}
    for t, keys in (("a", range(4)), ("b", range(3)), ("c", range(4))):
        o = {k: row(t, k) for k in keys if rng.random() < 0.7}
        n = dict(o)
        for k in keys:
            p = rng.random()
            if p < 0.25:
                n.pop(k, None)
            elif p < 0.6:
                n[k] = row(t, k)
        old[t], new[t] = o, n
    return old, new


# ---------------------------------------------------------------------- the plain evaluator


def _evaluate(node, tables: dict) -> Counter:
    """The query's result over whole tables: a bag of rows, by definition."""
    if isinstance(node, Scan):
        names = list(SCHEMAS[node.table].names)
        at = [names.index(a.name) for a in node.attrs]
        return Counter(tuple(r[i] for i in at) for r in tables[node.table].values())
    if isinstance(node, Filter):
        f = compile_expr(node.cond, {a.id: i for i, a in enumerate(node.child.columns())})
        return Counter({r: n for r, n in _evaluate(node.child, tables).items() if f(r) is True})
    if isinstance(node, Project):
        pos = {a.id: i for i, a in enumerate(node.child.columns())}
        fs = [compile_expr(e, pos) for _, e in node.outputs]
        out: Counter = Counter()
        for r, n in _evaluate(node.child, tables).items():
            out[tuple(f(r) for f in fs)] += n
        return out
    if isinstance(node, Union):
        out = Counter()
        for c in node.children:
            out.update(_evaluate(c, tables))
        return out
    if isinstance(node, SemiJoin):
        return _evaluate_semi(node, tables)
    assert isinstance(node, Join)
    lpos = {a.id: i for i, a in enumerate(node.left.columns())}
    rpos = {a.id: i for i, a in enumerate(node.right.columns())}
    res = None
    if node.residual is not None:
        res = compile_expr(node.residual, {a.id: i for i, a in enumerate(node.columns())})
    out = Counter()
    lefts, rights = _evaluate(node.left, tables), _evaluate(node.right, tables)
    matched_l, matched_r = set(), set()
    for lr, ln in lefts.items():
        for rr, rn in rights.items():
            lk = [lr[lpos[c]] for c in node.left_keys]
            rk = [rr[rpos[c]] for c in node.right_keys]
            if None in lk or lk != rk:
                continue
            if res is not None and res(lr + rr) is not True:
                continue
            out[lr + rr] += ln * rn
            matched_l.add(lr)
            matched_r.add(rr)
    # an outer side's rows that matched nothing, padded with NULLs for the other side's columns
    if node.kind in ("left", "full"):
        pad = (None,) * len(node.right.columns())
        for lr, ln in lefts.items():
            if lr not in matched_l:
                out[lr + pad] += ln
    if node.kind in ("right", "full"):
        pad = (None,) * len(node.left.columns())
        for rr, rn in rights.items():
            if rr not in matched_r:
                out[pad + rr] += rn
    return out


def _evaluate_semi(node: SemiJoin, tables: dict) -> Counter:
    """EXISTS / NOT EXISTS by definition: a left row is in the result when some right row has
    its (non-NULL) keys and makes the residual TRUE; for an anti join when none does."""
    lpos = {a.id: i for i, a in enumerate(node.left.columns())}
    rpos = {a.id: i for i, a in enumerate(node.right.columns())}
    res = None
    if node.residual is not None:
        both = node.left.columns() + node.right.columns()
        res = compile_expr(node.residual, {a.id: i for i, a in enumerate(both)})
    rights = [r for r, n in _evaluate(node.right, tables).items() if n > 0]
    out: Counter = Counter()
    for lr, ln in _evaluate(node.left, tables).items():
        lk = [lr[lpos[c]] for c in node.left_keys]
        found = None not in lk and any(
            [rr[rpos[c]] for c in node.right_keys] == lk and (res is None or res(lr + rr) is True)
            for rr in rights
        )
        if found != node.anti:
            out[lr] += ln
    return out


class _Matches:
    """An outer side's or a semi join's match counts (``spark_sink.ivm.outer.MatchCounts``'
    step), counted from the rows of ``other`` (the other side) at the old version: per non-NULL
    ``keys`` value, how many rows carry it."""

    def __init__(self, other, keys: tuple[int, ...], old: dict, not_null: tuple = ()) -> None:
        pos = {a.id: i for i, a in enumerate(other.columns())}
        self.old: Counter = Counter()
        for r, n in _evaluate(other, old).items():
            k = tuple(r[pos[c]] for c in keys)
            if None not in k and all(r[pos[c]] is not None for c in not_null):
                self.old[k] += n

    def step(self, keys: set[tuple], change: dict[tuple, int]) -> dict[tuple, tuple[int, int]]:
        return {k: (self.old[k], self.old[k] + change.get(k, 0)) for k in keys}


def _rules(root, old: dict, new: dict, inputs=None) -> DeltaRules:
    """DeltaRules over the two versions (``inputs``, else all of them in memory), with every
    outer join's and every counted semi join's match counts."""
    matches: dict = {}
    for n in _walk(root):
        if isinstance(n, Join) and n.kind != "inner":
            sides = {"left": ["left"], "right": ["right"], "full": ["left", "right"]}[n.kind]
            for side in sides:
                other, keys = (n.right, n.right_keys) if side == "left" else (n.left, n.left_keys)
                matches[(id(n), side)] = _Matches(other, keys, old)
        if isinstance(n, SemiJoin) and counted(n):
            ne = inequality(n)  # also counted per (key, value), over rows with a value
            rest = () if ne is None else (ne[0],)
            matches[(id(n), EXISTS)] = _Matches(n.right, n.right_keys, old, rest)
            if ne is not None:
                matches[(id(n), PAIRS)] = _Matches(n.right, (*n.right_keys, ne[0]), old)
    return DeltaRules(inputs or _Inputs(old, new), matches=matches)


def _want(root, old: dict, new: dict) -> dict:
    d = Counter(_evaluate(root, new))
    d.subtract(_evaluate(root, old))
    return {r: w for r, w in d.items() if w}


def _cases(n: int):
    for seed in range(n):
        rng = random.Random(seed)
        yield seed, _tree(rng), *_versions(rng)


# ---------------------------------------------------------------------- tests


def test_the_generated_trees_are_columnar():
    for _, root, _, _ in _cases(50):
        assert columnar_reason(root) is None


def test_the_columnar_delta_equals_the_query_difference_and_the_row_path():
    for seed, root, old, new in _cases(300):
        want = _want(root, old, new)
        got = _rules(root, old, new).delta_arrow(root).to_counter()
        assert got == want, (seed, root)
        z = _rules(root, old, new).delta(root)
        assert consolidate(z.rows, z.weights) == want, (seed, root)


def test_a_planted_wrong_join_rule_is_caught(monkeypatch):
    """The fault: d(L join R) without its L_new join dR term (a change of R is lost)."""
    monkeypatch.setattr(
        join_mod,
        "delta_inner_join",
        lambda spec, dl, old_r, new_l, dr: join_mod.inner_join(spec, dl, old_r),
    )
    caught = 0
    for _, root, old, new in _cases(300):
        got = _rules(root, old, new).delta_arrow(root).to_counter()
        caught += got != _want(root, old, new)
    assert caught, "no generated case tells the planted join rule from the right one"


def test_a_planted_filter_that_keeps_null_is_caught(monkeypatch):
    """The fault: a filter keeping rows whose condition is NULL (WHERE NOT FALSE)."""
    from spark_sink.ivm.ops import filter as filter_mod

    real = filter_mod.arrow_expr
    monkeypatch.setattr(
        filter_mod, "arrow_expr", lambda e, attrs: pc.coalesce(real(e, attrs), pc.scalar(True))
    )
    caught = 0
    for _, root, old, new in _cases(300):
        if not any(isinstance(n, Filter) for n in _walk(root)):
            continue
        got = _rules(root, old, new).delta_arrow(root).to_counter()
        caught += got != _want(root, old, new)
    assert caught


def _walk(node):
    yield node
    for c in node.inputs():
        yield from _walk(c)


def test_what_is_not_columnar_says_why():
    ids = _Ids()
    a, b = _scan(ids, "a"), _scan(ids, "b")
    assert columnar_reason(Join(a, b, (a.attrs[1].id,), (b.attrs[0].id,), None, "left")) is None
    div = Call("div", (Col(a.attrs[2].id), Lit(1, "bigint")), "double")
    assert "operator div" in columnar_reason(Project(((ids.attr("p", "double"), div),), a))
    d1, d2 = Attr(98, "d", "double", True), Attr(99, "e", "double", True)
    on_doubles = Join(Scan("a", (d1,)), Scan("b", (d2,)), (98,), (99,), None)
    assert "a join on a double key" in columnar_reason(on_doubles)
    assert columnar_reason(Scan("a", (d1,))) is None  # a DOUBLE passed through is columnar
    with pytest.raises(NotColumnar, match="timestamp"):
        arrow_expr(Lit(None, "timestamp"), {})


def test_the_switch_turns_the_columnar_path_off(monkeypatch):
    ids = _Ids()
    a = _scan(ids, "a")
    monkeypatch.setenv("SNAPVIEW_COLUMNAR", "off")
    assert columnar_reason(a) == "SNAPVIEW_COLUMNAR is off"
    monkeypatch.setenv("SNAPVIEW_COLUMNAR", "sometimes")
    with pytest.raises(Exception, match="SNAPVIEW_COLUMNAR='sometimes'"):
        columnar_reason(a)


# ---------------------------------------------------------------------- the view's change


class _View:
    """What ``view_change`` reads of a view's TableInfo."""

    def __init__(self, names: list[str], pk: tuple[str, ...]) -> None:
        self.primary_key = pk
        self.table_schema = type(
            "S", (), {"visible_columns": [type("C", (), {"name": n}) for n in names]}
        )()


def _z(rows: list[tuple], weights: list[int]) -> ArrowZSet:
    t = pa.table({"c1": [r[0] for r in rows], "c2": [r[1] for r in rows]})
    return ArrowZSet(t.append_column(WEIGHT, pa.array(weights, pa.int64())))


def test_the_view_change_puts_new_rows_and_deletes_keys_that_only_leave():
    view = _View(["id", "x"], ("id",))
    z = _z([(1, "a"), (1, "b"), (2, "c"), (3, "d"), (3, "d"), (4, "e")], [-1, 1, -1, 1, -1, 1])
    puts, gone = view_change(view, z)  # type: ignore[arg-type]
    assert sorted(puts.to_pylist(), key=str) == [{"id": 1, "x": "b"}, {"id": 4, "x": "e"}]
    assert gone == [(2,)]


def test_the_keys_new_to_the_view_are_those_put_and_not_taken_away():
    """What a delta checks against the view when its key is not proven unique: a key whose
    old row the change takes away (1: updated, 3: put and taken back) is not new; 4 is."""
    view = _View(["id", "x"], ("id",))
    rows = [(1, "a"), (1, "b"), (2, "c"), (3, "d"), (3, "d"), (4, "e")]
    weights = [-1, 1, -1, 1, -1, 1]
    assert keys_new_to_view(view, _z(rows, weights)) == {(4,)}  # type: ignore[arg-type]
    z = ZSet((1, 2), rows, weights)
    assert keys_new_to_view(view, z) == {(4,)}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "rows, weights",
    [
        ([(1, "a"), (1, "b")], [1, 1]),  # two rows for one key: the row path names it
        ([(1, "a")], [2]),  # one row twice
        ([(None, "a")], [1]),  # a NULL key
    ],
)
def test_a_view_change_the_row_path_must_decide_is_handed_back(rows, weights):
    with pytest.raises(NotColumnar):
        view_change(_View(["id", "x"], ("id",)), _z(rows, weights))  # type: ignore[arg-type]


def test_the_view_change_tells_doubles_apart_by_their_bits():
    """Rows cancel only where the store holds the same bits (a NaN of the same payload, NULL
    and NULL), and a PUT row keeps the bits the query made: -0.0 stays -0.0."""
    import struct

    odd_nan = struct.unpack(">d", bytes.fromhex("7ff8000000000bad"))[0]
    t = pa.table(
        {
            "c1": pa.array([1, 2, 2, 3, 3], pa.int64()),
            "c2": pa.array([-0.0, odd_nan, odd_nan, None, None], pa.float64()),
            WEIGHT: pa.array([1, 1, -1, -1, 1], pa.int64()),
        }
    )
    puts, gone = view_change(_View(["id", "x"], ("id",)), ArrowZSet(t))  # type: ignore[arg-type]
    assert gone == []
    assert puts["id"].to_pylist() == [1]
    assert struct.pack(">d", puts["x"][0].as_py()) == struct.pack(">d", -0.0)
    t2 = pa.table(  # another NaN payload is another stored value: the row is rewritten
        {
            "c1": pa.array([2, 2], pa.int64()),
            "c2": pa.array([odd_nan, float("nan")], pa.float64()),
            WEIGHT: pa.array([1, -1], pa.int64()),
        }
    )
    puts, gone = view_change(_View(["id", "x"], ("id",)), ArrowZSet(t2))  # type: ignore[arg-type]
    assert gone == [] and struct.pack(">d", puts["x"][0].as_py()).hex() == "7ff8000000000bad"


def _double_keyed_change() -> tuple[list[tuple], list[int]]:
    """A view keyed on a DOUBLE whose key moves from 0.0 to -0.0 (two keys in the store)."""
    return [(0.0, "a"), (-0.0, "b"), (1.5, "c"), (1.5, "c")], [-1, 1, 1, -1]


def test_a_double_key_moving_from_zero_to_negative_zero_is_deleted_and_put():
    """0.0 and -0.0 are two keys in the store (and in Spark's result): the old one is deleted,
    the new one put, by the columnar path and by the row path alike."""
    import struct

    from kvstore.mvcc.records import LockOp
    from kvstore.table_info import TableInfo
    from spark_sink.ivm.mutations import view_mutations

    rows, weights = _double_keyed_change()
    t = pa.table({"c1": [r[0] for r in rows], "c2": [r[1] for r in rows]})
    z = ArrowZSet(t.append_column(WEIGHT, pa.array(weights, pa.int64())))
    puts, gone = view_change(_View(["k", "x"], ("k",)), z)  # type: ignore[arg-type]
    assert [struct.pack(">d", v) for v in puts["k"].to_pylist()] == [struct.pack(">d", -0.0)]
    assert [struct.pack(">d", k[0]) for k in gone] == [struct.pack(">d", 0.0)]

    info = TableInfo("v", 7, "k DOUBLE, x STRING", ["k"])
    from spark_sink.ivm.ops.operator import ZSet

    muts = view_mutations(info, ZSet((1, 2), rows, weights), one_row=False)
    put_keys = [info.row_codec.decode(m[2])["k"] for m in muts if m[0] == LockOp.PUT]
    deleted = [m[1] for m in muts if m[0] == LockOp.DELETE]
    assert [struct.pack(">d", k) for k in put_keys] == [struct.pack(">d", -0.0)]
    assert len(deleted) == 1  # the key 0.0, encoded
    from spark_sink.ivm.inputs import encode_keys

    assert deleted[0] == encode_keys(info, [[0.0]])[0]


def test_outer_joins_are_generated_and_pad_rows():
    """The trees hold every outer kind, under a join too (a lookup into an outer join), and
    their changes hold NULL-padded rows."""
    kinds, under, padded = Counter(), 0, 0
    for _, root, old, new in _cases(300):
        joins = [n for n in _walk(root) if isinstance(n, Join)]
        kinds.update(n.kind for n in joins)
        under += any(isinstance(j.left, Join) and j.left.kind != "inner" for j in joins)
        padded += any(None in r for r in _want(root, old, new))
    assert {"left", "right", "full"} <= set(kinds) and under >= 10 and padded >= 50, (
        kinds,
        under,
        padded,
    )


def test_a_planted_outer_rule_that_ignores_the_match_counts_is_caught(monkeypatch):
    """The fault: every change of the outer side padded, whether its key has a match or not,
    and no padded row retracted or emitted when a key gains or loses its last match."""
    from spark_sink.ivm.ops import outer_join

    def naive(rules, node, side):
        keep, _, other, _ = outer_join.sides(node, side)
        dk, do = rules.delta_arrow(keep), rules.delta_arrow(other)
        return outer_join._pad(dk, do.data.schema, side == "left")

    monkeypatch.setattr(outer_join, "dangling_delta_arrow", naive)
    caught = 0
    for _, root, old, new in _cases(300):
        if any(isinstance(n, Join) and n.kind != "inner" for n in _walk(root)):
            caught += _rules(root, old, new).delta_arrow(root).to_counter() != _want(root, old, new)
    assert caught


def test_a_planted_lookup_that_forgets_the_padded_rows_is_caught(monkeypatch):
    """The fault: a lookup into an outer join returns its inner rows only (c's change, looked
    up into (a LEFT JOIN b), misses a's rows that b does not match)."""
    from spark_sink.ivm.ops import outer_join

    monkeypatch.setattr(
        outer_join,
        "padded_unmatched_arrow",
        lambda node, kept, other, side: outer_join._pad(
            ArrowZSet(kept.table.slice(0, 0)), other.data.schema, side == "left"
        ),
    )
    caught = 0
    for _, root, old, new in _cases(300):
        if any(isinstance(n, Join) and isinstance(n.left, Join) for n in _walk(root)):
            caught += _rules(root, old, new).delta_arrow(root).to_counter() != _want(root, old, new)
    assert caught
