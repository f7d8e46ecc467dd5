"""UNION ALL against the reference: columns by position under the first child's names,
duplicates kept (weights add); union is linear; a UNION that deduplicates is caught."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.union import union_all
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet
from tests.unit.ivm_ops.zsets import LEFT, SETTINGS, arrow, caught, counter, left_rows

OTHER = pa.schema([(f"x{i}", f.type) for i, f in enumerate(LEFT)])


@SETTINGS
@given(left_rows, left_rows, left_rows)
def test_union_all_equals_the_reference(a, b, c):
    got = union_all([arrow(LEFT, a), arrow(OTHER, b), arrow(LEFT, c)])
    assert got.schema == LEFT
    assert got.to_counter() == ref.union_all(counter(a), counter(b), counter(c))


@SETTINGS
@given(left_rows, left_rows, left_rows, left_rows)
def test_union_all_is_linear(a1, a2, b1, b2):
    za1, za2, zb1, zb2 = (arrow(LEFT, x) for x in (a1, a2, b1, b2))
    assert (
        union_all([za1 + za2, zb1 + zb2]).to_counter()
        == (union_all([za1, zb1]) + union_all([za2, zb2])).to_counter()
    )


def test_children_must_agree_on_column_count_and_types():
    with pytest.raises(ValueError, match="columns"):
        union_all([ArrowZSet.empty(LEFT), ArrowZSet.empty(pa.schema([("k", pa.int64())]))])
    with pytest.raises(ValueError, match="different schemas"):
        union_all(
            [
                ArrowZSet.empty(LEFT),
                ArrowZSet.empty(pa.schema([(n, pa.string()) for n in LEFT.names])),
            ]
        )


def test_planted_fault_deduplicating_is_caught():
    def distinct(rw):
        # the fault: UNION's set semantics (every surviving row once) in place of UNION ALL's
        u = union_all([arrow(LEFT, rw), arrow(LEFT, rw)]).consolidate()
        w = pa.array([1] * len(u), pa.int64())
        once = ArrowZSet(u.table.set_column(u.table.num_columns - 1, WEIGHT, w))
        return once.to_counter() != ref.union_all(counter(rw), counter(rw))

    assert caught(left_rows, distinct)[0]
