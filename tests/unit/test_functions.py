"""The function table (spark_sink.ivm.functions): each entry's value against Spark's documented
results, its Arrow translation against its row value on seeded inputs (a planted wrong kernel
is caught), and the table's wiring (every entry reachable from the evaluator, no name twice).
The differential views v_functions and v_function_groups compare the same against Spark."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from spark_sink.ivm import functions as F
from spark_sink.ivm.expressions import compile_expr
from spark_sink.ivm.plan import Call, Col, Lit


def test_values_spark_documents():
    # the examples of Spark's SQL function reference
    s = "Spark SQL"
    assert F.substring_sql(s, 5, 1) == "k"
    assert F.substring_sql(s, -3, 2) == "SQ"
    assert F.substring_sql(s, 0, 3) == "Spa"  # position 0 reads as 1
    assert F.substring_sql("abc", -5, 3) == "a"  # the start clamps, the end does not move
    assert F.substring_sql("abc", 2, -1) == ""
    assert F.substring_sql("héllo", 2, 3) == "éll"  # code points, not bytes
    day = dt.date(2009, 7, 30)  # a Thursday
    assert F.BY_OP["dayofweek"].value(day) == 5  # Sunday is 1
    assert F.BY_OP["weekday"].value(day) == 3  # Monday is 0
    assert F.BY_OP["dayofyear"].value(dt.date(2016, 4, 9)) == 100
    assert F.BY_OP["quarter"].value(dt.date(2016, 8, 31)) == 3
    assert F.BY_OP["datediff"].value(dt.date(2009, 7, 31), dt.date(2009, 7, 30)) == 1
    assert F.BY_OP["trim"].value("\t  a b  ") == "\t  a b"  # spaces only, as Spark's trim
    assert F.BY_OP["length"].value("héllo") == 5
    t = dt.datetime(2009, 7, 30, 12, 58, 59, tzinfo=dt.UTC)
    assert [F.BY_OP[p].value(t) for p in ("hour", "minute", "second")] == [12, 58, 59]
    # an instant given in another zone reads on the UTC clock (the session's zone)
    east = t.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30)))
    assert [F.BY_OP[p].value(east) for p in ("hour", "minute", "second")] == [12, 58, 59]
    assert all(F.BY_OP[p].zoned for p in ("hour", "minute", "second"))


def test_a_null_argument_gives_null():
    null = Lit(None, "string")
    for op in ("substring", "concat", "length", "startswith"):
        args = (null, Lit(1, "int"), Lit(2, "int")) if op == "substring" else (null,)
        args = (null, Lit("x", "string")) if op in ("concat", "startswith") else args
        assert compile_expr(Call(op, args, "string"), {})(()) is None, op


def test_every_entry_is_reachable_and_named_once():
    ops = [f.op for f in F.FUNCTIONS]
    assert len(ops) == len(set(ops))
    names = [c for f in F.FUNCTIONS for c in f.catalyst]
    assert len(names) == len(set(names))
    for f in F.FUNCTIONS:  # compile_expr finds each by its op (no Unsupported)
        compile_expr(Call(f.op, (Col(1),), "int"), {1: 0})


# ---------------------------------------------------------------------- Arrow = rows

_TEXT = ["", " ", "  a ", "héllo wörld", "Spark SQL", "x", "ab  ", " 日本語 ", "PROMO BRUSHED"]


def _inputs(rng: random.Random, n: int) -> dict[str, list]:
    day = lambda: dt.date(1, 1, 1) + dt.timedelta(days=rng.randrange(3_652_059))  # noqa: E731
    epoch = dt.datetime(1900, 1, 1, tzinfo=dt.UTC)
    span = 200 * 365 * 86_400 * 10**6  # 200 years of microseconds
    instant = lambda: epoch + dt.timedelta(microseconds=rng.randrange(span))  # noqa: E731
    return {
        "d": [None if rng.random() < 0.1 else day() for _ in range(n)],
        "e": [None if rng.random() < 0.1 else day() for _ in range(n)],
        "s": [None if rng.random() < 0.1 else rng.choice(_TEXT) for _ in range(n)],
        "t": [None if rng.random() < 0.1 else instant() for _ in range(n)],
    }


def _cases(rng: random.Random):
    """(function, plan arguments) pairs covering every entry with an Arrow translation."""
    for f in F.FUNCTIONS:
        if f.arrow is None:
            continue
        if f.op == "datediff":
            yield f, (Col(1), Col(2))
        elif f.op == "substring":
            for _ in range(8):
                yield f, (Col(3), Lit(rng.randint(0, 6), "int"), Lit(rng.randint(0, 6), "int"))
        elif f.op in ("startswith", "endswith", "contains"):
            yield f, (Col(3), Lit(rng.choice(["", " ", "a", "é", "SQL", "PROMO"]), "string"))
        elif f.accepts(("date",), "int"):
            yield f, (Col(1),)
        elif f.accepts(("timestamp",), "int"):
            yield f, (Col(4),)
        else:
            yield f, (Col(3),)


_COLS = {1: "d", 2: "e", 3: "s", 4: "t"}


def _arrow_equals_rows(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    data = _inputs(rng, n)
    table = pa.table(
        {
            "d": pa.array(data["d"], pa.date32()),
            "e": pa.array(data["e"], pa.date32()),
            "s": pa.array(data["s"], pa.string()),
            "t": pa.array(data["t"], pa.timestamp("us", tz="UTC")),  # a TIMESTAMP column's type
        }
    )
    rows = list(zip(data["d"], data["e"], data["s"], data["t"], strict=True))
    pos = {1: 0, 2: 1, 3: 2, 4: 3}
    wrong = []
    for f, args in _cases(rng):
        xs = [pc.field(_COLS[a.id]) if isinstance(a, Col) else pc.scalar(a.value) for a in args]
        expr = f.arrow(xs, args)
        if expr is None:
            continue
        got = ds.dataset(table).to_table(columns={"x": expr})["x"].to_pylist()
        row = compile_expr(Call(f.op, args, "int"), pos)
        want = [row(r) for r in rows]
        if got != want:
            bad = next(i for i in range(n) if got[i] != want[i])
            wrong.append(f"{f.op}{args}: row {rows[bad]}: arrow {got[bad]!r}, rows {want[bad]!r}")
    return wrong


@pytest.mark.parametrize("seed", range(3))
def test_arrow_translations_equal_the_row_values(seed):
    assert _arrow_equals_rows(seed) == []


def test_a_planted_wrong_kernel_is_caught(monkeypatch):
    sub = F.BY_OP["substring"]
    planted = F.Function(
        sub.op,
        sub.catalyst,
        sub.accepts,
        sub.value,
        lambda xs, args: pc.utf8_slice_codeunits(
            xs[0], start=int(args[1].value), stop=int(args[1].value) + int(args[2].value)
        ),  # 0-based: one character late
    )
    monkeypatch.setitem(F.BY_OP, "substring", planted)
    monkeypatch.setattr(F, "FUNCTIONS", (planted,))
    assert any(w.startswith("substring") for w in _arrow_equals_rows(0))


def test_arrow_declines_what_it_does_not_match():
    sub = F.BY_OP["substring"]
    x = [pc.field("s"), pc.scalar(-2), pc.scalar(3)]
    assert sub.arrow is not None
    assert sub.arrow(x, (Col(3), Lit(-2, "int"), Lit(3, "int"))) is None  # from the end
    assert sub.arrow(x, (Col(3), Col(1), Lit(3, "int"))) is None  # a computed position


def test_accepts_refuses_other_types():
    assert F.BY_OP["year"].accepts(("date",), "int")
    assert not F.BY_OP["year"].accepts(("timestamp",), "int")
    assert not F.BY_OP["substring"].accepts(("binary", "int", "int"), "binary")
    assert F.BY_OP["concat"].accepts(("string", "string", "string"), "string")
    assert not F.BY_OP["concat"].accepts(("binary", "binary"), "binary")
