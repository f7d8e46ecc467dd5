"""unique_keys: which key sets a plan proves unique, and that it proves nothing it should not
(a wrong proof would let a build skip its key check and collapse duplicate rows)."""

from __future__ import annotations

from spark_sink.ivm.plan import (
    AggCall,
    AggRef,
    Aggregate,
    Attr,
    Col,
    Filter,
    GroupRef,
    Join,
    Lit,
    Project,
    Scan,
    Union,
)
from spark_sink.ivm.unique_keys import key_is_unique

PKS = {"orders": ("id",), "customers": ("id",), "lines": ("order_id", "n"), "log": ()}


def pk_of(t: str) -> tuple[str, ...]:
    return PKS[t]


def a(i: int, name: str, dtype: str = "bigint") -> Attr:
    return Attr(i, name, dtype, True)


ORDERS = Scan("orders", (a(1, "id"), a(2, "customer"), a(3, "amount")))
CUSTOMERS = Scan("customers", (a(11, "id"), a(12, "region")))
LINES = Scan("lines", (a(21, "order_id"), a(22, "n"), a(23, "qty")))


def test_a_scan_is_unique_on_its_primary_key_only_when_it_reads_all_of_it():
    assert key_is_unique(ORDERS, [1], pk_of)
    assert key_is_unique(ORDERS, [1, 3], pk_of)  # a superset of a unique set
    assert not key_is_unique(ORDERS, [2], pk_of)
    assert not key_is_unique(Scan("lines", (a(21, "order_id"), a(23, "qty"))), [21], pk_of)
    assert not key_is_unique(Scan("log", (a(31, "x"),)), [31], pk_of)  # no primary key


def test_filters_keep_and_projections_copy_or_lose_the_key():
    f = Filter(Col(3), ORDERS)  # any condition: rows only drop
    assert key_is_unique(f, [1], pk_of)
    p = Project(((a(41, "oid"), Col(1)), (a(42, "c"), Col(2))), ORDERS)
    assert key_is_unique(p, [41], pk_of)
    computed = Project(((a(43, "x"), Lit(1, "bigint")), (a(44, "c"), Col(2))), ORDERS)
    assert not key_is_unique(computed, [43], pk_of)


def test_a_fk_join_keeps_the_many_sides_key_and_a_many_to_many_join_does_not():
    fk = Join(ORDERS, CUSTOMERS, (2,), (11,), None)  # each order meets <= 1 customer
    assert key_is_unique(fk, [1], pk_of)
    assert not key_is_unique(fk, [11], pk_of)  # a customer appears once per order
    assert key_is_unique(fk, [1, 11], pk_of)
    nn = Join(ORDERS, LINES, (1,), (21,), None)  # an order meets many lines
    assert not key_is_unique(nn, [1], pk_of)
    assert key_is_unique(nn, [21, 22], pk_of)  # a line meets one order (orders' key)
    left = Join(ORDERS, CUSTOMERS, (2,), (11,), None, "left")
    assert key_is_unique(left, [1], pk_of)
    assert not key_is_unique(Join(ORDERS, CUSTOMERS, (2,), (11,), None, "full"), [1], pk_of)
    assert not key_is_unique(Join(ORDERS, LINES, (1,), (21,), None, "left"), [1], pk_of)


def test_a_join_on_a_floating_point_key_proves_nothing_one_to_one():
    """0.0 and -0.0 are two keys of a table but one join key: an order meets both."""
    prices = Scan("customers", (Attr(11, "id", "double", True), a(12, "region")))
    orders = Scan("orders", (a(1, "id"), Attr(2, "customer", "double", True)))
    assert not key_is_unique(Join(orders, prices, (2,), (11,), None), [1], pk_of)


def test_an_aggregate_is_unique_on_its_groups_and_a_union_on_nothing():
    agg = Aggregate(
        (Col(2),),
        ("bigint",),
        (AggCall("count", (), "bigint", ""),),
        ((a(51, "customer"), GroupRef(0)), (a(52, "n"), AggRef(0))),
        ORDERS,
    )
    assert key_is_unique(agg, [51], pk_of)
    assert not key_is_unique(agg, [52], pk_of)
    u = Union((a(61, "id"), a(62, "c"), a(63, "amt")), (ORDERS, ORDERS))
    assert not key_is_unique(u, [61], pk_of)
