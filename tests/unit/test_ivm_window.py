"""Spark's ordering and the ranking functions of spark_sink.ivm.ops.window, without Spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from spark_sink.ivm.ops.window import compare_keys, compare_values, rank_rows
from tests.unit.net_change import cut, net_change

NAN = float("nan")
ASC, DESC = (True, True), (False, False)  # Spark's defaults: ASC NULLS FIRST, DESC NULLS LAST


def test_values_compare_as_spark_orders_them():
    assert compare_values(1, 2) == -1 and compare_values(2, 1) == 1 and compare_values(3, 3) == 0
    assert compare_values(Decimal("1.10"), Decimal("1.1")) == 0
    assert compare_values("B", "a") == -1  # binary (code point) order, not case-insensitive
    assert compare_values("é", "z") == 1
    assert compare_values(False, True) == -1
    assert compare_values(dt.date(2020, 1, 2), dt.date(2020, 1, 1)) == 1
    assert compare_values(b"\x00", b"\x01") == -1


def test_nan_is_above_every_double_and_negative_zero_equals_zero():
    assert compare_values(NAN, float("inf")) == 1
    assert compare_values(float("inf"), NAN) == -1
    assert compare_values(NAN, NAN) == 0
    assert compare_values(-0.0, 0.0) == 0


def test_nulls_keep_their_place_under_desc():
    assert compare_keys((None,), (1,), [ASC]) == -1  # ASC NULLS FIRST
    assert compare_keys((None,), (1,), [DESC]) == 1  # DESC NULLS LAST
    assert compare_keys((None,), (1,), [(False, True)]) == -1  # DESC NULLS FIRST
    assert compare_keys((None,), (1,), [(True, False)]) == 1  # ASC NULLS LAST
    assert compare_keys((None,), (None,), [DESC]) == 0
    assert compare_keys((2, "a"), (1, "b"), [DESC, ASC]) == -1
    assert compare_keys((1, "a"), (1, "b"), [DESC, ASC]) == -1
    assert compare_keys((1, "b"), (1, "b"), [DESC, ASC]) == 0


def _ranked(rows, spec, kinds, key=lambda r: (r[1],)):
    keys = [key(r) for r in rows]
    return [(rows[i], v) for i, v in rank_rows(rows, keys, spec, kinds)]


def test_row_number_rank_and_dense_rank_with_ties():
    rows = [(1, 5), (2, None), (3, 7), (4, 5), (5, 7), (6, 1)]
    got = _ranked(rows, [DESC], ["row_number", "rank", "dense_rank"])
    assert got == [
        ((3, 7), (1, 1, 1)),
        ((5, 7), (2, 1, 1)),
        ((1, 5), (3, 3, 2)),
        ((4, 5), (4, 3, 2)),
        ((6, 1), (5, 5, 3)),
        ((2, None), (6, 6, 4)),  # DESC: NULLS LAST
    ]
    asc = _ranked(rows, [ASC], ["rank"])
    assert asc[0] == ((2, None), (1,)) and asc[-1][1] == (5,)  # ASC: NULLS FIRST; 7,7 share 5


def test_ties_under_row_number_are_broken_by_the_whole_row_deterministically():
    rows = [(3, 1), (1, 1), (2, 1)]
    a = _ranked(rows, [ASC], ["row_number"])
    b = _ranked(list(reversed(rows)), [ASC], ["row_number"])
    assert a == b == [((1, 1), (1,)), ((2, 1), (2,)), ((3, 1), (3,))]


def test_nan_and_signed_zero_rank_as_spark():
    rows = [(1, NAN), (2, 0.0), (3, -0.0), (4, 1.0), (5, NAN)]
    got = _ranked(rows, [ASC], ["rank", "dense_rank"])
    assert [(r[0], v) for r, v in got] == [
        (2, (1, 1)),
        (3, (1, 1)),  # -0.0 == 0.0
        (4, (3, 2)),
        (1, (4, 3)),  # NaN above 1.0, NaN == NaN
        (5, (4, 3)),
    ]


def test_an_empty_partition_ranks_nothing():
    assert rank_rows([], [], [ASC], ["row_number"]) == []


# ---------------------------------------------------------------------- the delta rule


class _Inputs:
    """delta.Inputs over two in-memory versions of one table t(id, g, v); ``fetch`` returns the
    whole version (a superset: the rule must cut it to the touched partitions)."""

    def __init__(self, old: dict[int, tuple], new: dict[int, tuple]) -> None:
        self.old, self.new = old, new

    def columns(self, table):
        return ("id", "g", "v")

    def primary_key(self, table):
        return ("id",)

    def changes(self, table):
        return net_change(self.old, self.new)

    def fetch(self, access, side, values, columns=None):
        rows = list((self.new if side == "new" else self.old).values())
        return cut(rows, self.columns(access.table), columns)


def _window_node(kinds):
    from spark_sink.ivm.plan import Attr, Col, Scan, Window

    scan = Scan(
        "t", (Attr(1, "id", "bigint", False), Attr(2, "g", "int", True), Attr(3, "v", "int", True))
    )
    funcs = tuple((Attr(10 + i, k, "int", False), k) for i, k in enumerate(kinds))
    # ORDER BY v DESC NULLS LAST: ties, broken by the whole row (so by id) under row_number
    return Window(funcs, (2,), ((Col(3), False, False),), scan)


def _batch(rows: dict[int, tuple]) -> list[tuple]:
    """row_number, rank and dense_rank of every row, computed independently of the module."""
    out = []
    for g in {r[1] for r in rows.values()}:
        part = sorted(
            (r for r in rows.values() if r[1] == g),
            key=lambda r: (r[2] is None, -(r[2] or 0), r[0]),
        )
        for n, r in enumerate(part):
            rank = next(i for i, x in enumerate(part) if x[2] == r[2]) + 1
            dense = len({x[2] for x in part[: rank - 1]}) + 1
            out.append((*r, n + 1, rank, dense))
    return out


def test_window_delta_equals_the_difference_of_the_batch_results():
    import random
    from collections import Counter

    from spark_sink.ivm.delta import DeltaRules
    from spark_sink.ivm.ops.operator import consolidate

    rng = random.Random(7)
    node = _window_node(["row_number", "rank", "dense_rank"])

    def row(k):
        return (k, rng.choice([1, 2, 3]), rng.choice([None, 0, 1, 1, 2, 5]))

    for _ in range(200):
        old = {k: row(k) for k in rng.sample(range(30), rng.randint(0, 20))}
        new = dict(old)
        for _ in range(rng.randint(0, 5)):
            k = rng.randrange(35)
            if k in new and rng.random() < 0.3:
                del new[k]
            else:
                new[k] = row(k)
        rules = DeltaRules(_Inputs(old, new))
        z = rules.delta(node)
        want = Counter(_batch(new))
        want.subtract(Counter(_batch(old)))
        assert consolidate(z.rows, z.weights) == {r: w for r, w in want.items() if w}, (old, new)


def test_a_planted_window_rule_that_never_retracts_old_rows_is_caught(monkeypatch):
    """The harness above can fail: a rule that emits the touched partitions' new rows but never
    retracts their old ones is told apart from the batch results."""
    import random
    from collections import Counter

    from spark_sink.ivm.delta import DeltaRules
    from spark_sink.ivm.ops import window as window_mod
    from spark_sink.ivm.ops.operator import consolidate

    real = window_mod._ranked
    monkeypatch.setattr(
        window_mod,
        "_ranked",
        lambda rules, node, parts, side: [] if side == "old" else real(rules, node, parts, side),
    )
    rng = random.Random(7)
    node = _window_node(["row_number", "rank", "dense_rank"])
    caught = 0
    for _ in range(50):
        old = {k: (k, rng.choice([1, 2]), rng.choice([None, 0, 1, 2])) for k in range(8)}
        new = dict(old)
        k = rng.randrange(10)
        new[k] = (k, rng.choice([1, 2]), rng.choice([None, 0, 1, 2]))
        z = DeltaRules(_Inputs(old, new)).delta(node)
        want = Counter(_batch(new))
        want.subtract(Counter(_batch(old)))
        caught += consolidate(z.rows, z.weights) != {r: w for r, w in want.items() if w}
    assert caught


def test_a_null_partition_in_the_change_asks_for_a_build():
    import pytest

    from spark_sink.ivm.delta import DeltaRules
    from spark_sink.ivm.ops.operator import NeedsBuild

    rules = DeltaRules(_Inputs({1: (1, 1, 5)}, {1: (1, None, 5)}))
    with pytest.raises(NeedsBuild, match="NULL window partition"):
        rules.delta(_window_node(["row_number"]))


def test_a_lookup_into_a_window_reads_and_ranks_the_partitions_of_the_values():
    import pytest

    from spark_sink.ivm.delta import DeltaRules, lookup_accesses
    from spark_sink.ivm.plan import Unsupported

    old = {1: (1, 1, 5), 2: (2, 1, 7), 3: (3, 2, 1), 4: (4, 3, None)}
    new = {**old, 5: (5, 1, 9)}
    node = _window_node(["row_number"])
    rules = DeltaRules(_Inputs(old, new))
    got = rules.lookup(node, (2,), {(1,), (None,)}, "new")  # NULL never matches
    assert sorted(got.rows) == [(1, 1, 5, 3), (2, 1, 7, 2), (5, 1, 9, 1)]
    assert got.weights == [1, 1, 1]
    assert sorted(rules.lookup(node, (1, 2), {(9, 2)}, "old").rows) == [(3, 2, 1, 1)]
    assert lookup_accesses(node, (2,), lambda t: ("id",))[0].columns == ("g",)
    with pytest.raises(Unsupported, match="do not include all its PARTITION BY columns"):
        lookup_accesses(node, (1,), lambda t: ("id",))
