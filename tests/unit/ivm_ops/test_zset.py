"""ArrowZSet against the reference: consolidation (NULLs equal, NaN one value, -0.0 is 0.0),
sum, negation, the overflow checks, and the package's isolation from Spark."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet, WeightOverflow, concat
from tests.unit.ivm_ops.zsets import LEFT, SETTINGS, arrow, caught, counter, left_rows

OPS = Path(__file__).resolve().parents[3] / "spark_sink" / "ivm" / "ops"


@SETTINGS
@given(left_rows)
def test_consolidate_equals_the_reference(rw):
    z = arrow(LEFT, rw)
    assert z.to_counter() == counter(rw)
    c = z.consolidate()
    assert len(c) == len(counter(rw))  # one physical row per distinct row, zeros dropped
    assert c.to_counter() == counter(rw)


@SETTINGS
@given(left_rows, left_rows)
def test_sum_and_negation(a, b):
    za, zb = arrow(LEFT, a), arrow(LEFT, b)
    assert (za + zb).to_counter() == ref.add(counter(a), counter(b))
    assert (za - zb).to_counter() == ref.add(counter(a), ref.neg(counter(b)))
    assert (za - za).consolidate().to_counter() == {}


def test_nulls_nans_and_signed_zeros_cancel():
    z = ArrowZSet.from_rows(
        LEFT,
        [(None, None, float("nan"), None), (None, None, -float("nan"), None)]
        + [(1, 2, -0.0, "a"), (1, 2, 0.0, "a")],
        [1, -1, 2, -2],
    )
    assert len(z.consolidate()) == 0


def test_empty_and_keyless_zsets():
    assert ArrowZSet.empty(LEFT).consolidate().to_counter() == {}
    assert ArrowZSet.empty(LEFT).schema == LEFT
    keyless = ArrowZSet(pa.table({WEIGHT: pa.array([2, 3, -1], pa.int64())}))
    assert keyless.to_counter() == {(): 4}


def test_weights_never_wrap():
    big = ArrowZSet.from_rows(LEFT, [(1, 1, 1.0, "a")] * 2, [2**62, 2**62])
    with pytest.raises(WeightOverflow, match=WEIGHT):
        big.consolidate()
    with pytest.raises(WeightOverflow):
        ArrowZSet.from_rows(LEFT, [(1, 1, 1.0, "a")], [-(2**63)]).negate()
    # a sum that passes through int64's edge but ends inside it is exact
    edge = ArrowZSet.from_rows(LEFT, [(1, 1, 1.0, "a")] * 3, [2**62, 2**62, -(2**62)])
    assert edge.to_counter() == {(1, 1, 1.0, "a"): 2**62}


def test_concat_refuses_different_schemas():
    with pytest.raises(ValueError, match="different schemas"):
        concat([ArrowZSet.empty(LEFT), ArrowZSet.empty(pa.schema([("k", pa.int32())]))])


def test_planted_fault_consolidating_without_float_normalization_is_caught():
    def wrong(rw):
        # the fault: Arrow's grouping alone compares floats bitwise (-0.0 apart from 0.0, NaNs
        # by payload), so a row and its retraction can stay two rows that never cancel
        out = arrow(LEFT, rw).table.group_by(LEFT.names, use_threads=False)
        sums = out.aggregate([(WEIGHT, "sum")])[f"{WEIGHT}_sum"].to_pylist()
        return sum(1 for w in sums if w != 0) != len(counter(rw))

    rows, _ = caught(left_rows, wrong)
    assert any(isinstance(r[2], float) for r in rows)


def _spark_sink_imports(path: Path) -> set[str]:
    """Every module ``path`` imports (at any depth of its code), absolute and dotted."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            base = node.module or ""
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def _algebra_closure() -> dict[str, set[str]]:
    """The operators' modules and every spark_sink module they import, transitively: module ->
    what it imports."""
    root = OPS.parents[2]
    todo = [f"spark_sink.ivm.ops.{p.stem}" for p in OPS.glob("*.py") if p.stem != "__init__"]
    seen: dict[str, set[str]] = {}
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        path = root / (m.replace(".", "/") + ".py")
        if not path.exists():  # "from pkg.mod import name" names a module and its attributes
            continue
        seen[m] = _spark_sink_imports(path)
        todo += [n for n in seen[m] if n.startswith("spark_sink.")]
    return seen


def test_the_operators_and_what_they_import_load_no_spark():
    """The algebra stays apart from Spark: no operator module, and no spark_sink module they
    reach through their imports (the delta rules, the plan tree, the expression evaluator),
    imports pyspark, py4j, the client or the store (its error types aside), or the modules that
    drive Spark."""
    closure = _algebra_closure()
    assert {"spark_sink.ivm.ops.join", "spark_sink.ivm.delta", "spark_sink.ivm.plan"} <= set(
        closure
    )
    for m, names in closure.items():
        for n in names:
            assert not n.startswith(("pyspark", "py4j", "coordinator")), (m, n)
            # the store's error types are the shared vocabulary of errors; nothing else of it
            assert not n.startswith("kvstore") or n.startswith("kvstore.errors"), (m, n)
            assert not n.startswith(("spark_sink.ivm.strategy", "spark_sink.materialized_view")), (
                m,
                n,
            )


def test_the_closure_sees_a_planted_spark_import():
    """The check above can fail: a module that imports pyspark is reported."""
    planted = OPS / "zz_planted_for_test.py"
    planted.write_text("from pyspark.sql import SparkSession\n")
    try:
        names = _algebra_closure()["spark_sink.ivm.ops.zz_planted_for_test"]
    finally:
        planted.unlink()
    assert "pyspark.sql" in names


def test_concat_of_z_sets_differing_only_in_declared_nullability():
    """A decoded table declares its key NOT NULL and a join's output does not: their Z-sets
    concatenate (every column then nullable); a different type is still refused."""
    strict = pa.schema([pa.field("x", pa.int64(), nullable=False), pa.field(WEIGHT, pa.int64())])
    a = ArrowZSet(pa.table({"x": [1], WEIGHT: [1]}, schema=strict))
    b = ArrowZSet.from_table(pa.table({"x": pa.array([2], pa.int64())}), [-1])
    both = concat([a, b])
    assert both.to_counter() == {(1,): 1, (2,): -1}
    assert both.table.schema.field("x").nullable
    with pytest.raises(ValueError, match="different schemas"):
        concat([a, ArrowZSet.from_table(pa.table({"x": ["s"]}), [1])])
