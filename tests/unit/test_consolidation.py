"""The row path's consolidation (``spark_sink.ivm.ops.operator.consolidate``): equal rows' weights
add up and what nets to zero is gone (the columnar one: ivm_ops/test_zset.py)."""

from __future__ import annotations

from spark_sink.ivm.ops.operator import consolidate


def test_consolidate_cancels_equal_rows():
    net = consolidate([(1, "a"), (1, "a"), (2, "b")], [1, -1, 1])
    assert net == {(2, "b"): 1}
