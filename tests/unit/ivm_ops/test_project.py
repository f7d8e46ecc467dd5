"""Project against the reference: computed columns (expressions, callables, both in one
projection), weights kept, rows that project alike adding up; projection is linear; checked
arithmetic raises instead of wrapping; a projection that drops weights is caught."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.project import ProjectSpec, apply_project
from spark_sink.ivm.ops.zset import ArrowZSet
from tests.unit.ivm_ops.zsets import LEFT, SETTINGS, arrow, caught, counter, left_rows


def plus(a, b):
    return None if a is None or b is None else a + b


EXPRESSIONS = ProjectSpec(
    (
        ("kv", pc.add_checked(pc.field("k"), pc.field("v"))),
        ("s", pc.field("s")),
        ("f", pc.field("f")),
    )
)
MIXED = ProjectSpec(
    (
        ("v0", lambda t: pc.coalesce(t["v"], 0)),
        ("k", pc.field("k")),
        ("s2", lambda t: pc.binary_join_element_wise(t["s"], t["s"], "")),
    )
)
CASES = [
    (EXPRESSIONS, lambda r: (plus(r[0], r[1]), r[3], r[2])),
    (MIXED, lambda r: (0 if r[1] is None else r[1], r[0], None if r[3] is None else r[3] * 2)),
]


@pytest.mark.parametrize("i", range(len(CASES)))
@SETTINGS
@given(left_rows)
def test_project_equals_the_reference(i, rw):
    spec, fn = CASES[i]
    got = apply_project(spec, arrow(LEFT, rw))
    assert got.schema.names == [n for n, _ in spec.columns]
    assert got.to_counter() == ref.project(counter(rw), fn)


@SETTINGS
@given(left_rows, left_rows)
def test_project_is_linear(a, b):
    za, zb = arrow(LEFT, a), arrow(LEFT, b)
    for spec, _ in CASES:
        assert (
            apply_project(spec, za + zb).to_counter()
            == (apply_project(spec, za) + apply_project(spec, zb)).to_counter()
        )


def test_checked_arithmetic_raises_on_bigint_overflow():
    z = ArrowZSet.from_rows(LEFT, [(2**63 - 1, 1, 0.0, "a")], [1])
    with pytest.raises(pa.ArrowInvalid, match="overflow"):
        apply_project(EXPRESSIONS, z)


def test_names_must_be_distinct():
    with pytest.raises(ValueError, match="distinct"):
        apply_project(
            ProjectSpec((("a", pc.field("k")), ("a", pc.field("v")))), arrow(LEFT, ([], []))
        )


def test_planted_fault_dropping_weights_is_caught():
    spec, fn = CASES[0]

    def drops_weights(rw):
        # the fault: the projected rows rebuilt with weight 1 each (a set, not a Z-set)
        got = ArrowZSet.from_table(apply_project(spec, arrow(LEFT, rw)).data).to_counter()
        return got != ref.project(counter(rw), fn)

    _, weights = caught(left_rows, drops_weights)
    assert any(w != 1 for w in weights)
