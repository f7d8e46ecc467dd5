"""The semi/anti join's decision on rows (spark_sink.ivm.ops.semi_join.decide), without a store:
a match needs equal non-NULL keys and a TRUE residual; a NULL key never matches (an anti join
keeps its row); weights pass through; a right row of weight 0 or less is no match."""

from __future__ import annotations

from spark_sink.ivm.delta import DeltaRules
from spark_sink.ivm.ops.operator import ZSet
from spark_sink.ivm.ops.semi_join import decide
from spark_sink.ivm.plan import Attr, Call, Col, Scan, SemiJoin

L = Scan("l", (Attr(1, "k", "bigint", True), Attr(2, "x", "int", True)))
R = Scan("r", (Attr(3, "k", "bigint", True), Attr(4, "y", "int", True)))
LEFT = ZSet((1, 2), [(1, 10), (2, 20), (None, 30), (3, 40)], [1, 2, 1, 1])
RIGHT = ZSet((3, 4), [(1, 5), (2, 25), (None, 0), (3, 1)], [1, 1, 1, 0])


def _run(anti: bool, residual=None) -> dict:
    node = SemiJoin(L, R, (1,), (3,), residual, anti)
    out = ZSet((1, 2))
    decide(DeltaRules(None), node, LEFT, RIGHT, out)  # type: ignore[arg-type]
    return dict(zip(out.rows, out.weights, strict=True))


def test_semi_keeps_matched_rows_with_their_weights():
    # key 3's only right row has weight 0: no match; the NULL key never matches
    assert _run(anti=False) == {(1, 10): 1, (2, 20): 2}


def test_anti_keeps_unmatched_rows_and_null_keys():
    assert _run(anti=True) == {(None, 30): 1, (3, 40): 1}


def test_a_residual_must_be_true_for_a_match():
    lt = Call("lt", (Col(2), Col(4)), "boolean")  # x < y: only (2, 20) vs (2, 25)
    assert _run(anti=False, residual=lt) == {(2, 20): 2}
    assert _run(anti=True, residual=lt) == {(1, 10): 1, (None, 30): 1, (3, 40): 1}
