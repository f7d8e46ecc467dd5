"""The columnar path of an aggregate that keeps values (MIN, MAX, COUNT(DISTINCT x)) against the
row path over seeded random histories: every epoch's output change, group state rows, values
table rows and new states must be equal, and the stored state between epochs is an in-memory
copy of what both wrote (with ``read_first`` as the store answers it: the first values of a
group in key order). Values come from small domains, so extremes are deleted often (the next
extreme is read again) and values repeat (multiplicities above 1). Planted faults (the next
extreme not read again; a distinct count that forgets the values that went) must be caught.
Spark's differential tests stay the judge (tests/spark/test_incremental.py)."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa
import pytest

import spark_sink.ivm.aggregate_columnar as columnar
from kvstore.table_info import TableInfo
from spark_sink.ivm.aggregate import AggregateState
from spark_sink.ivm.aggregate_columnar import columnar_reason, value_orders
from spark_sink.ivm.ops.aggregate import groups_table, values_tables
from spark_sink.ivm.ops.operator import ZSet, consolidate
from spark_sink.ivm.plan import AggCall, AggRef, Aggregate, Attr, Col, GroupRef, Scan
from tests.unit.test_aggregate_columnar import (
    change_table,
    random_change,
    run_epoch,
    state_table,
)


def _agg(group_dtype: str) -> Aggregate:
    scan = Scan(
        "t",
        (
            Attr(1, "g", group_dtype, False),
            Attr(2, "x", "bigint", True),
            Attr(3, "y", "string", True),
            Attr(4, "d", "date", True),
            Attr(5, "i", "int", True),
            Attr(6, "m", "decimal(10,2)", True),
            Attr(7, "at", "timestamp", True),
        ),
    )
    aggs = (
        AggCall("count", (), "bigint", ""),
        AggCall("min", (Col(2),), "bigint", "bigint"),
        AggCall("max", (Col(2),), "bigint", "bigint"),
        AggCall("count", (Col(3),), "bigint", "string", distinct=True),
        AggCall("min", (Col(3),), "string", "string"),
        AggCall("max", (Col(3),), "string", "string"),
        AggCall("max", (Col(4),), "date", "date"),
        AggCall("count", (Col(5),), "bigint", "int", distinct=True),
        AggCall("sum", (Col(2),), "bigint", "bigint"),
        AggCall("min", (Col(6),), "decimal(10,2)", "decimal(10,2)"),
        AggCall("max", (Col(6),), "decimal(10,2)", "decimal(10,2)"),
        AggCall("count", (Col(6),), "bigint", "decimal(10,2)", distinct=True),
        AggCall("min", (Col(7),), "timestamp", "timestamp"),
        AggCall("max", (Col(7),), "timestamp", "timestamp"),
    )
    exprs = [GroupRef(0), *(AggRef(j) for j in range(len(aggs)))]
    outs = tuple((Attr(10 + i, f"c{i}", "bigint", True), e) for i, e in enumerate(exprs))
    return Aggregate((Col(1),), (group_dtype,), aggs, outs, scan)


def _info(st, tid: int) -> TableInfo:
    return TableInfo(st.name, tid, st.ddl, st.primary_key, kind="state")


class _Store:
    """Every state table of the aggregate between epochs: name -> key -> the row's values after
    the key; and the source's change this epoch (for the Arrow path)."""

    def __init__(self, scan: Scan) -> None:
        self.tables: dict[str, dict[tuple, list]] = {}
        self.scan = scan
        self.change = ZSet((), [], [])

    def _rows(self, info: TableInfo) -> dict[tuple, list]:
        return self.tables.setdefault(info.name, {})

    def columns(self, table: str) -> tuple[str, ...]:
        return tuple(a.name for a in self.scan.attrs)

    def changes(self, table: str) -> tuple[list[tuple], list[int]]:
        return list(self.change.rows), list(self.change.weights)

    def changes_arrow(self, table: str) -> tuple[pa.Table, pa.Array]:
        return change_table(self.scan, self.change)

    def read_state(self, info: TableInfo, keys: list[tuple]) -> dict[tuple, list]:
        rows = self._rows(info)
        return {k: list(rows[k]) for k in keys if k in rows}

    def read_state_arrow(self, info: TableInfo, keys: list[tuple]) -> pa.Table:
        return state_table(info, self._rows(info), keys)

    def read_first(self, info: TableInfo, prefixes: list[tuple], width: int) -> dict:
        rows = self._rows(info)
        out: dict[tuple, list] = {}
        for p in prefixes:
            mine = sorted(k for k in rows if k[: len(p)] == p)  # by o: the store's key order
            if mine:
                out[p] = [(k[-1], rows[k][0]) for k in mine[:width]]
        return out

    def apply(self, info: TableInfo, upserts: list[list], deletes: list[list]) -> None:
        rows, nk = self._rows(info), len(info.table_schema.primary_key)
        for r in upserts:
            rows[tuple(r[:nk])] = list(r[nk:])
        for r in deletes:
            rows.pop(tuple(r[:nk]), None)


def _epoch(agg: Aggregate, infos, store: _Store, z: ZSet, how: str):
    """One epoch over change ``z``: ``rows`` (the row path), ``columnar`` (over tuples) or
    ``arrow`` (over the source's change as Arrow); what it wrote is applied to ``store``."""
    groups, values = infos
    st = AggregateState(agg, groups, store, "v", values)  # type: ignore[arg-type]
    out, news = run_epoch(st, agg, store, z, how)
    writes = {groups.name: (sorted(st.upserts, key=repr), sorted(st.deletes, key=repr))}
    for vt in st.values.values():
        # The row path also rewrites a value whose changes cancelled (its count unchanged);
        # the columnar path drops it. Compared: the writes that change a row.
        rows, nk = store._rows(vt.info), len(vt.info.table_schema.primary_key)
        ups = [r for r in vt.upserts if rows.get(tuple(r[:nk])) != list(r[nk:])]
        writes[vt.info.name] = (sorted(ups, key=repr), sorted(vt.deletes, key=repr))
    store.apply(groups, st.upserts, st.deletes)
    for vt in st.values.values():
        store.apply(vt.info, vt.upserts, vt.deletes)
    return st.path, consolidate(out.rows, out.weights), writes, news


_DAYS = [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in (-400, -1, 0, 3, 30)]
_AMOUNTS = [
    Decimal(x) for x in ("-99999999.99", "-1.50", "-0.01", "0.00", "0.01", "2.50", "99999999.99")
]
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_TIMES = [_EPOCH + dt.timedelta(microseconds=k) for k in (-(10**15), -1, 0, 1, 10**15)]


def _row(rng: random.Random, group_values: list) -> tuple:
    def maybe(v):
        return None if rng.random() < 0.15 else v

    return (
        rng.choice(group_values),
        maybe(rng.choice([-(2**40), -7, -1, 0, 2, 5, 2**40])),
        maybe(rng.choice(["", "a", "a\x00", "b", "é", "zz"])),
        maybe(rng.choice(_DAYS)),
        maybe(rng.randrange(-3, 3)),
        maybe(rng.choice(_AMOUNTS)),
        maybe(rng.choice(_TIMES)),
    )


def _change(rng: random.Random, live: list[tuple], group_values: list) -> ZSet:
    """Inserts, deletes of live rows, and updates that move the values within the group."""
    return random_change(
        rng,
        live,
        30,
        0.5,
        lambda: _row(rng, group_values),
        lambda old: (old[0], *_row(rng, group_values)[1:]),
    )


@pytest.mark.parametrize("seed,group_dtype", [(0, "int"), (1, "string"), (2, "bigint")])
def test_the_columnar_path_keeps_values_as_the_row_path_does(seed, group_dtype):
    rng = random.Random(seed)
    agg = _agg(group_dtype)
    assert columnar_reason(agg) is None
    groups = _info(groups_table("v", agg), 77)
    values = {st.call: _info(st, 78 + k) for k, st in enumerate(values_tables("v", agg))}
    infos = (groups, values)
    domain = {"int": [1, 2, 3], "string": ["p", "q"], "bigint": [-5, 2**40]}[group_dtype]
    stores = {how: _Store(agg.child) for how in ("rows", "columnar", "arrow")}  # type: ignore[arg-type]
    live: list[tuple] = []
    paths = set()
    for _ in range(80):
        z = _change(rng, live, domain)
        got = {how: _epoch(agg, infos, store, z, how) for how, store in stores.items()}
        want = got.pop("rows")
        for path, *rest in got.values():
            paths.add(path)
            assert rest == list(want[1:])
        assert stores["rows"].tables == stores["columnar"].tables == stores["arrow"].tables
    assert paths == {"columnar"}, "the columnar path was not taken"


def test_value_orders_are_the_row_paths_bytes():
    """``value_orders`` makes the ``o`` of each value as ``aggregate.ValueOrder`` does."""
    from spark_sink.ivm.aggregate import ValueOrder

    agg = _agg("int")
    for st in values_tables("v", agg):
        info = _info(st, 90)
        col = next(c for c in info.table_schema.columns if c.name == "v")
        a = agg.aggs[st.call]
        sample = {
            "BIGINT": [-(2**63), -1, 0, 1, 2**63 - 1],
            "STRING": ["", "a", "a\x00", "\x00", "é"],
            "DATE": _DAYS,
            "INT": [-(2**31), -1, 0, 2**31 - 1],
            "DECIMAL": _AMOUNTS,
            "TIMESTAMP": _TIMES,
        }[col.type.kind]
        order = ValueOrder(info, a.kind == "max")
        got = value_orders(pa.array(sample, col.type.arrow()), col.type.kind, a.kind == "max")
        assert got.to_pylist() == [order(v) for v in sample], (a.kind, col.type.kind)


def test_a_planted_fault_in_the_next_extreme_is_caught(monkeypatch):
    """A path that does not read the next extreme when the stored one goes differs."""
    monkeypatch.setattr(
        columnar.ColumnarAggregate, "_reread", lambda self, both, j, s_new, *rest: s_new
    )
    with pytest.raises(AssertionError):
        test_the_columnar_path_keeps_values_as_the_row_path_does(0, "int")


def test_a_planted_fault_in_the_distinct_count_is_caught(monkeypatch):
    """A distinct count that counts values that came but forgets those that went differs."""
    real = columnar.distinct_change
    monkeypatch.setattr(
        columnar,
        "distinct_change",
        lambda n_old, n_new: columnar.pc.max_element_wise(real(n_old, n_new), 0),
    )
    with pytest.raises(AssertionError):
        test_the_columnar_path_keeps_values_as_the_row_path_does(1, "string")


def test_what_stays_on_the_row_path():
    """SUM(DISTINCT), MIN of a DOUBLE and MIN of a computed value are the row path's."""
    from spark_sink.ivm.plan import Call, Lit

    scan = _agg("int").child

    def one(call: AggCall) -> Aggregate:
        out = (
            (Attr(10, "g", "int", False), GroupRef(0)),
            (Attr(11, "a", "bigint", True), AggRef(0)),
        )
        return Aggregate((Col(1),), ("int",), (call,), out, scan)

    assert "DISTINCT" in columnar_reason(
        one(AggCall("sum", (Col(2),), "bigint", "bigint", distinct=True))
    )
    dbl = Scan("t", (Attr(1, "g", "int", False), Attr(2, "x", "double", True)))
    agg = Aggregate(
        (Col(1),),
        ("int",),
        (AggCall("min", (Col(2),), "double", "double"),),
        ((Attr(10, "g", "int", False), GroupRef(0)), (Attr(11, "a", "double", True), AggRef(0))),
        dbl,
    )
    assert columnar_reason(agg) == "MIN of double"
    computed = AggCall(
        "min", (Call("add", (Col(2), Lit(1, "bigint")), "bigint"),), "bigint", "bigint"
    )
    assert columnar_reason(one(computed)) == "MIN of a computed expression"


def test_the_switch_sends_every_aggregate_to_the_row_path(monkeypatch):
    """SNAPVIEW_COLUMNAR=off is among an aggregate's reasons, as for the view's tree: its epochs
    take the row path, and explain() says so."""
    agg = _agg("int")
    assert columnar_reason(agg) is None
    monkeypatch.setenv("SNAPVIEW_COLUMNAR", "off")
    assert columnar_reason(agg) == "SNAPVIEW_COLUMNAR is off"
    groups = _info(groups_table("v", agg), 77)
    st = AggregateState(agg, groups, _Store(agg.child), "v")  # type: ignore[arg-type]
    assert st.why_rows == "SNAPVIEW_COLUMNAR is off"
