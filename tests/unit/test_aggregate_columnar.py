"""The columnar path of an aggregate epoch (``spark_sink.ivm.aggregate_columnar``) against the
row path (``AggregateState``'s fold, merge and output rows) over seeded random histories: every
epoch's output change, state upserts and deletes, and new states must be equal. The stored
state between epochs is an in-memory table of the state rows both paths wrote (the store and
Spark are the differential tests' part: tests/spark/test_incremental.py). A planted fault in the
columnar merge must be caught."""

from __future__ import annotations

import random
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pytest

import spark_sink.ivm.aggregate_columnar as columnar
from kvstore.table_info import TableInfo
from spark_sink.ivm.aggregate import AggregateState
from spark_sink.ivm.delta import DeltaRules
from spark_sink.ivm.expressions import EvalError
from spark_sink.ivm.ops.aggregate import groups_table
from spark_sink.ivm.ops.operator import ZSet, consolidate
from spark_sink.ivm.plan import AggCall, AggRef, Aggregate, Attr, Call, Col, GroupRef, Lit, Scan


def _agg(
    group_dtype: str = "int",
    computed_output: bool = False,
    no_functions: bool = False,
    global_agg: bool = False,
) -> Aggregate:
    scan = Scan(
        "t",
        (
            Attr(1, "g", group_dtype, False),
            Attr(2, "x", "bigint", True),
            Attr(3, "y", "string", True),
        ),
    )
    aggs = (
        AggCall("count", (), "bigint", ""),
        AggCall("count", (Lit(1, "int"),), "bigint", "int"),  # Spark's COUNT(*)
        AggCall("count", (Col(2), Lit(None, "int")), "bigint", "int"),  # always 0
        AggCall("count", (Col(3),), "bigint", "string"),
        AggCall("sum", (Col(2),), "bigint", "bigint"),
        AggCall("avg", (Col(2),), "double", "bigint"),
    )
    if no_functions:  # SELECT g ... GROUP BY g
        aggs = ()
    exprs: list = [GroupRef(0), *(AggRef(j) for j in range(len(aggs)))]
    if computed_output:
        exprs.append(Call("add", (AggRef(0), Lit(1, "bigint")), "bigint"))
    if global_agg:  # SELECT COUNT(*), ..., SUM(x), AVG(x) FROM t
        outs = tuple((Attr(10 + i, f"c{i}", "bigint", True), e) for i, e in enumerate(exprs[1:]))
        return Aggregate((), (), aggs, outs, scan)
    outs = tuple((Attr(10 + i, f"c{i}", "bigint", True), e) for i, e in enumerate(exprs))
    return Aggregate((Col(1),), (group_dtype,), aggs, outs, scan)


def _decimal_agg() -> Aggregate:
    """SUM and AVG of DECIMALs (unscaled values within int64 and past it), and of computed
    inputs: a DECIMAL product and an integral sum."""
    scan = Scan(
        "t",
        (
            Attr(1, "g", "int", False),
            Attr(2, "x", "bigint", True),
            Attr(3, "y", "string", True),
            Attr(4, "d", "decimal(10,2)", True),
            Attr(5, "e", "decimal(20,3)", True),
        ),
    )
    line = Call("mul", (Col(4), Call("cast", (Col(2),), "decimal(20,0)|bigint")), "decimal(31,2)")
    aggs = (
        AggCall("sum", (Col(4),), "decimal(20,2)", "decimal(10,2)"),
        AggCall("avg", (Col(4),), "decimal(14,6)", "decimal(10,2)"),
        AggCall("sum", (Col(5),), "decimal(30,3)", "decimal(20,3)"),
        AggCall("avg", (Col(5),), "decimal(24,7)", "decimal(20,3)"),
        AggCall("sum", (line,), "decimal(38,2)", "decimal(31,2)"),
        AggCall("sum", (Call("add", (Col(2), Lit(1, "bigint")), "bigint"),), "bigint", "bigint"),
        AggCall("count", (Col(4),), "bigint", "decimal(10,2)"),
    )
    exprs = [GroupRef(0), *(AggRef(j) for j in range(len(aggs)))]
    outs = tuple((Attr(10 + i, f"c{i}", "bigint", True), e) for i, e in enumerate(exprs))
    return Aggregate((Col(1),), ("int",), aggs, outs, scan)


_ARROW = {
    "int": pa.int32(),
    "bigint": pa.int64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "decimal(10,2)": pa.decimal128(10, 2),
    "decimal(20,3)": pa.decimal128(20, 3),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


def change_table(scan: Scan, change: ZSet) -> tuple[pa.Table, pa.Array]:
    """A source's change as StoreInputs.changes_arrow gives it: its rows as one Arrow table
    over the source's columns, and their weights."""
    cols = list(zip(*change.rows, strict=True)) or [[] for _ in scan.attrs]
    data = pa.table(
        {a.name: pa.array(c, _ARROW[a.dtype]) for a, c in zip(scan.attrs, cols, strict=True)}
    )
    return data, pa.array(change.weights, pa.int64())


def state_table(info: TableInfo, rows: dict[tuple, list], keys: list[tuple]) -> pa.Table:
    """The stored rows of ``keys`` (key -> the values after it), as read_state_arrow gives
    them: one Arrow table over the state table's columns, absent keys skipped."""
    schema = info.table_schema.arrow_schema()
    found = [(*k, *rows[k]) for k in sorted(set(keys), key=repr) if k in rows]
    cols = list(zip(*found, strict=True)) if found else [[] for _ in schema]
    return pa.table([pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema)


class _StateRows:
    """The group state table between epochs: key -> the state row's values after the key
    (what both paths read at the old barrier), kept from the upserts and deletes they wrote."""

    def __init__(self, info: TableInfo, scan: Scan | None = None) -> None:
        self.info = info
        self.rows: dict[tuple, list] = {}
        self.rows_read = 0
        self.scan = scan
        self.change = ZSet((), [], [])  # the source's change this epoch, for delta_of_scan

    # the source's change, as StoreInputs gives it: tuples, or Arrow
    def columns(self, table: str) -> tuple[str, ...]:
        assert self.scan is not None
        return tuple(a.name for a in self.scan.attrs)

    def changes(self, table: str) -> tuple[list[tuple], list[int]]:
        return list(self.change.rows), list(self.change.weights)

    def changes_arrow(self, table: str) -> tuple[pa.Table, pa.Array]:
        assert self.scan is not None
        return change_table(self.scan, self.change)

    def read_state(self, info: TableInfo, keys: list[tuple]) -> dict[tuple, list]:
        return {k: list(self.rows[k]) for k in keys if k in self.rows}

    def read_state_arrow(self, info: TableInfo, keys: list[tuple]) -> pa.Table:
        return state_table(info, self.rows, keys)

    def apply(self, upserts: list[list], deletes: list[list], ng: int) -> None:
        for r in upserts:
            self.rows[tuple(r[:ng])] = list(r[ng:])
        for r in deletes:
            self.rows.pop(tuple(r[:ng]), None)


def _state_info(agg: Aggregate) -> TableInfo:
    st = groups_table("v", agg)
    return TableInfo(st.name, 77, st.ddl, st.primary_key, kind="state")


def run_epoch(st: AggregateState, agg: Aggregate, store, z: ZSet, how: bool | str):
    """Run ``st``'s epoch over change ``z`` by the row path ("rows"), the columnar path over
    tuples (True, "columnar") or over the source's change as Arrow ("arrow"): the output change
    and every touched group's new state values."""
    if how == "rows":
        st.why_rows = "held to the row path by the test"
    if how == "arrow":
        store.change = z
        scan = agg.child
        names = [a.name for a in scan.attrs]  # type: ignore[attr-defined]
        out = st.delta_of_scan(DeltaRules(store), agg, scan, scan, names)  # type: ignore[arg-type]
    else:
        out = st.delta(DeltaRules(store), agg, z)  # type: ignore[arg-type]
    st.lookup(DeltaRules(store), agg, [0], set(), "new")  # materializes the pending new states
    return out, {g: s.as_values(st.lay) for g, s in st.new.items()}


def _epoch(agg: Aggregate, info: TableInfo, store: _StateRows, z: ZSet, columnar_on: bool | str):
    """One epoch of the aggregate over change ``z``: by the row path, the columnar path over
    tuples (True), or the columnar path over the source's change as Arrow ("arrow")."""
    st = AggregateState(agg, info, store, "v")  # type: ignore[arg-type]
    out, news = run_epoch(st, agg, store, z, "rows" if not columnar_on else columnar_on)
    # (the order of the state rows does not matter: a write sorts them by key)
    upserts, deletes = sorted(st.upserts, key=repr), sorted(st.deletes, key=repr)
    return st.path, consolidate(out.rows, out.weights), upserts, deletes, news


def random_change(
    rng: random.Random,
    live: list[tuple],
    most: int,
    p_delete: float,
    fresh: Callable[[], tuple],
    moved: Callable[[tuple], tuple],
) -> ZSet:
    """A random change of 1 to ``most`` - 1 rows: with probability ``p_delete`` a live row
    deleted, half of those updated (the new image ``moved(old)``), else ``fresh()`` inserted.
    ``live`` follows it."""
    rows, weights = [], []
    for _ in range(rng.randrange(1, most)):
        r = rng.random()
        if live and r < p_delete:
            old = live.pop(rng.randrange(len(live)))
            rows.append(old)
            weights.append(-1)
            if r < p_delete / 2:  # an update: the new image too
                rows.append(moved(old))
                weights.append(1)
                live.append(rows[-1])
            continue
        rows.append(fresh())
        weights.append(1)
        live.append(rows[-1])
    return ZSet(tuple(range(1, len(rows[0]) + 1)), rows, weights)


def _change(rng: random.Random, live: list[tuple], group_values: list) -> ZSet:
    """A random change: inserts, deletes of live rows, updates of the group, NULL x and y."""

    def fresh() -> tuple:
        x = None if rng.random() < 0.15 else rng.randrange(-(10**12), 10**12)
        y = None if rng.random() < 0.3 else "s"
        return (rng.choice(group_values), x, y)

    return random_change(
        rng, live, 40, 0.4, fresh, lambda old: (rng.choice(group_values), *old[1:])
    )


@pytest.mark.parametrize(
    "seed,group_dtype,computed,bare",
    [
        (0, "int", False, False),
        (1, "bigint", True, False),
        (2, "string", False, False),
        (3, "boolean", False, False),
        (4, "int", False, True),
    ],
)
def test_the_columnar_path_equals_the_row_path(seed, group_dtype, computed, bare):
    rng = random.Random(seed)
    values = {
        "int": list(range(-3, 9)),
        "bigint": [-(2**62), 0, 5, 2**40],
        "string": ["a", "b", "", "é"],
        "boolean": [True, False],
    }[group_dtype]
    agg = _agg(group_dtype, computed, bare)
    _equal_over_history(agg, 60, lambda live: _change(rng, live, values))


def test_a_global_aggregate_takes_the_columnar_path_and_keeps_its_row_at_count_zero():
    """No GROUP BY: one row, there while its state row is, COUNT 0 and SUM NULL included (the
    changes delete every row now and then)."""
    rng = random.Random(11)
    agg = _agg(global_agg=True)
    assert columnar.columnar_reason(agg) is None
    epochs = []

    def change(live: list) -> ZSet:
        epochs.append(len(live))
        if len(epochs) % 5 == 0 and live:  # every row deleted: COUNT 0, SUM NULL
            rows = list(live)
            live.clear()
            return ZSet((1, 2, 3), rows, [-1] * len(rows))
        return _change(rng, live, [1])

    _equal_over_history(agg, 60, change)
    assert epochs.count(0) >= 10  # (the epochs after those deletes start from no row)


def _equal_over_history(agg: Aggregate, epochs: int, change: Callable[[list], ZSet]) -> None:
    """``epochs`` random changes (``change(live)``) through the row path, the columnar path over
    tuples and over Arrow: equal outputs, state writes and new states at every epoch, and the
    columnar path taken every time."""
    info = _state_info(agg)
    a, b, c = (_StateRows(info, agg.child) for _ in range(3))  # type: ignore[arg-type]
    live: list[tuple] = []
    paths = set()
    for _ in range(epochs):
        z = change(live)
        got = _epoch(agg, info, a, z, True)
        got_arrow = _epoch(agg, info, c, z, "arrow")
        want = _epoch(agg, info, b, z, False)
        paths |= {got[0], got_arrow[0]}
        assert got[1:] == want[1:]
        assert got_arrow[1:] == want[1:]
        for store, (_, _, ups, dels, _) in ((a, got), (b, want), (c, got_arrow)):
            store.apply(ups, dels, max(len(agg.groups), 1))
        assert a.rows == b.rows == c.rows
    assert paths == {"columnar"}, "the columnar path was not taken"


def test_decimal_and_computed_sums_take_the_columnar_path_and_equal_the_rows():
    rng = random.Random(7)
    agg = _decimal_agg()
    assert columnar.columnar_reason(agg) is None

    def fresh() -> tuple:
        x = None if rng.random() < 0.15 else rng.choice([rng.randrange(-99, 99), 10**9])
        d = None if rng.random() < 0.15 else Decimal(rng.randrange(-(10**10) + 1, 10**10)) / 100
        e = None if rng.random() < 0.15 else Decimal(rng.randrange(-(10**20) + 1, 10**20)) / 1000
        return (rng.randrange(-2, 5), x, "s", d, e)

    def moved(old: tuple) -> tuple:
        return (rng.randrange(-2, 5), *old[1:])

    _equal_over_history(agg, 40, lambda live: random_change(rng, live, 30, 0.4, fresh, moved))


def test_a_planted_sign_slip_in_a_decimal_sum_is_caught(monkeypatch):
    """Unscaled values read without their sign (a deleted row's value added, not taken away):
    the epochs still run over Arrow, and their sums differ from the row path's."""
    real = columnar.unscaled
    monkeypatch.setattr(columnar, "unscaled", lambda col, dtype: columnar.pc.abs(real(col, dtype)))
    with pytest.raises(AssertionError) as caught:
        test_decimal_and_computed_sums_take_the_columnar_path_and_equal_the_rows()
    assert "not taken" not in str(caught.value)


def test_a_null_group_key_and_an_overflowing_sum_fall_back_to_the_rows():
    agg = _agg()
    info = _state_info(agg)
    store = _StateRows(info)
    path, *_ = _epoch(agg, info, store, ZSet((1, 2, 3), [(None, 1, "a")], [1]), True)
    assert path == "rows"
    store.scan = agg.child  # type: ignore[assignment]
    path, *_ = _epoch(agg, info, store, ZSet((1, 2, 3), [(None, 1, "a")], [1]), "arrow")
    assert path == "rows"
    big = 2**62
    z = ZSet((1, 2, 3), [(1, big, None), (1, big, None)], [1, 1])
    store.rows[(1,)] = [2, *([0, 0] * 4), Decimal(0), 0, Decimal(0), 0]
    with pytest.raises(EvalError, match="sum: 9223372036854775808 overflows BIGINT"):
        _epoch(agg, info, store, z, True)  # the row path raises Spark's ANSI error


def test_a_planted_fault_in_the_columnar_merge_is_caught(monkeypatch):
    """A merge that forgets the stored non-NULL count makes the epochs differ."""
    real = columnar.pc.add_checked
    calls = {"n": 0}

    def forgetful(x, y):
        calls["n"] += 1
        return y if calls["n"] % 3 == 2 else real(x, y)

    monkeypatch.setattr(columnar.pc, "add_checked", forgetful)
    with pytest.raises(AssertionError):
        test_the_columnar_path_equals_the_row_path(0, "int", False, False)


def test_plain_source_follows_column_copies_only():
    """An aggregate's child is taken as the source's change only through plain copies."""
    from spark_sink.ivm.ops.aggregate import plain_source
    from spark_sink.ivm.plan import Project

    scan = _agg().child
    assert plain_source(scan) == (scan, ["g", "x", "y"])
    swapped = Project(
        ((Attr(7, "y2", "string", True), Col(3)), (Attr(8, "g2", "int", False), Col(1))), scan
    )
    assert plain_source(swapped) == (scan, ["y", "g"])
    again = Project(((Attr(9, "g3", "int", False), Col(8)),), swapped)
    assert plain_source(again) == (scan, ["g"])
    computed = Project(
        ((Attr(7, "x1", "bigint", True), Call("add", (Col(2), Lit(1, "bigint")), "bigint")),), scan
    )
    assert plain_source(computed) is None
