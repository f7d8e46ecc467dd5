"""The order key of an ORDER BY ... LIMIT's state (spark_sink.ivm.topk_state): sorting rows by
it is Spark's order (ASC/DESC, NULLS FIRST/LAST) with ties broken by the whole row; a row too
long for the store's key limit still gets one fixed place; ``take`` expands multiplicities."""

from __future__ import annotations

import functools
import random
from decimal import Decimal

import pytest

from kvstore.errors import SchemaMismatch
from spark_sink.ivm.ops.topk import topk_table
from spark_sink.ivm.ops.window import compare_values
from spark_sink.ivm.plan import Attr, Col, Scan, TopK
from spark_sink.ivm.topk_state import TopKOrder, take

ATTRS = (
    Attr(1, "a", "int", True),
    Attr(2, "s", "string", True),
    Attr(3, "d", "decimal(10,2)", True),
)


def _node(order, limit=3) -> TopK:
    return TopK(order, limit, Scan("t", ATTRS))


def _spark_cmp(order):
    """Spark's order of rows for ``order`` [(position, ascending, nulls first)], then the whole
    row ascending with NULLs first (our tie-break)."""

    def one(a, b, asc, nulls_first):
        if a is None or b is None:
            if a is None and b is None:
                return 0
            return (-1 if a is None else 1) * (1 if nulls_first else -1)
        c = compare_values(a, b)
        return c if asc else -c

    def cmp(x, y):
        for i, asc, nf in order:
            c = one(x[i], y[i], asc, nf)
            if c:
                return c
        for a, b in zip(x, y, strict=True):
            c = one(a, b, True, True)
            if c:
                return c
        return 0

    return cmp


def _rows(rng: random.Random, n: int) -> list[tuple]:
    def maybe(v):
        return None if rng.random() < 0.2 else v

    return [
        (
            maybe(rng.randint(-3, 3)),
            maybe(rng.choice(["", "a", "ab", "b", "é", "a\x00b", "zz"])),
            maybe(Decimal(rng.randint(-500, 500)) / 100),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", range(4))
def test_the_order_key_sorts_as_spark_with_ties_by_the_row(seed):
    rng = random.Random(seed)
    for _ in range(20):
        spec = [(rng.randrange(3), rng.random() < 0.5, rng.random() < 0.5) for _ in range(2)]
        cols = [Col(a.id) for a in ATTRS]
        node = _node(tuple((cols[i], asc, nf) for i, asc, nf in spec))
        order = TopKOrder(node, "v")
        rows = list(dict.fromkeys(_rows(rng, 60)))
        got = sorted(rows, key=order)
        want = sorted(rows, key=functools.cmp_to_key(_spark_cmp(spec)))
        assert got == want, spec


def test_a_planted_wrong_descending_order_is_caught():
    node = _node(((Col(1), False, False),))
    order = TopKOrder(node, "v")
    order.sort[0].descending = False  # the fault: DESC encoded as ASC
    rows = [(1, "a", None), (3, "a", None), (2, "a", None)]
    want = sorted(rows, key=functools.cmp_to_key(_spark_cmp([(0, False, False)])))
    assert sorted(rows, key=order) != want


def test_a_row_past_the_key_limit_gets_one_fixed_place():
    node = _node(((Col(1), True, True),))
    order = TopKOrder(node, "v")
    long_a, long_b = (1, "x" * 600 + "a", None), (1, "x" * 600 + "b", None)
    oa, ob = order(long_a), order(long_b)
    assert oa != ob and oa == order(long_a)
    assert len(oa) < 480 and order((0, "y", None)) < oa < order((2, "", None))
    wide = _node(((Col(2), True, True),))
    with pytest.raises(SchemaMismatch, match="ORDER BY key"):
        TopKOrder(wide, "v")((1, "k" * 600, None))


def test_take_expands_multiplicities_in_order():
    rows = [(b"\x02", ("b",), 2), (b"\x01", ("a",), 1), (b"\x03", ("c",), 5), (b"\x00", ("z",), 0)]
    assert take(rows, 4) == [(("a",), 1), (("b",), 2), (("c",), 1)]
    assert take(rows, 0) == []


def test_the_state_table_keeps_every_input_column():
    st = topk_table("v", 0, _node(((Col(1), True, True),)))
    assert st.primary_key == ("o",) and st.role == "topk"
    assert st.ddl == "o BINARY, c0 INT, c1 STRING, c2 DECIMAL(10,2), n BIGINT"
