"""TopK per partition maintained incrementally (spark_sink.ivm.ops.window) against a real server and
Spark: ROW_NUMBER, RANK and DENSE_RANK views equal Spark's batch result at every barrier of the
seeded workload; a NULL partition makes its epochs builds; a planted wrong window rule is
caught."""

from __future__ import annotations

import pytest

from coordinator.jobs import EpochMetadata
from kvstore.errors import InvalidArgument, NotFound, SchemaMismatch
from tests.conftest import client_fixture, server_fixture
from tests.spark.differential import ViewCase
from tests.spark.test_incremental import ROUNDS, SEED, _issued, run_differential

ivm_server = server_fixture("ivm_window", "--barrier-interval", "1s")
ic = client_fixture("ivm_server")


TOP3 = ViewCase(
    "v_top3_qty",
    "SELECT id, customer, qty, rn FROM (SELECT id, customer, qty, ROW_NUMBER() OVER "
    "(PARTITION BY customer ORDER BY qty DESC NULLS LAST, id) AS rn FROM orders) WHERE rn <= 3",
    ("id",),
    ("row_number topk", "nullable order column", "tie-breaker"),
)
RANK = ViewCase(
    "v_rank_qty",
    "SELECT id, customer, qty, rk FROM (SELECT id, customer, qty, RANK() OVER "
    "(PARTITION BY customer ORDER BY qty) AS rk FROM orders) WHERE rk <= 2",
    ("id",),
    ("rank with ties", "nulls first"),
)
DENSE = ViewCase(
    "v_dense_price",
    "SELECT id, item, price, amount, dr FROM (SELECT id, item, price, amount, DENSE_RANK() OVER "
    "(PARTITION BY item ORDER BY price DESC, amount) AS dr FROM orders) WHERE dr <= 3",
    ("id",),
    ("dense_rank with ties", "double and decimal order", "string partition"),
)
JOIN_TOP = ViewCase(
    "v_region_top2",
    "SELECT id, region, amount FROM (SELECT o.id, c.region, o.amount, ROW_NUMBER() OVER "
    "(PARTITION BY c.region ORDER BY o.amount DESC NULLS LAST, o.id) AS rn FROM orders o "
    "JOIN customers c ON o.customer = c.id) WHERE rn <= 2",
    ("id",),
    ("topk over a join", "rank column projected away"),
)
JOIN_ABOVE = ViewCase(
    "v_top2_with_region",
    "SELECT t.id, t.qty, t.rn, c.region, c.tier FROM (SELECT id, customer, qty, ROW_NUMBER() "
    "OVER (PARTITION BY customer ORDER BY qty DESC NULLS LAST, id) AS rn FROM orders) t "
    "JOIN customers c ON t.customer = c.id WHERE t.rn <= 2",
    ("id",),
    ("a join above a topk: the window looked up by its partition column",),
)
CASES = [TOP3, RANK, DENSE, JOIN_TOP, JOIN_ABOVE]

NULL_PART = ViewCase(
    "v_carrier_top2",
    "SELECT id, carrier, weight, rn FROM (SELECT id, carrier, weight, ROW_NUMBER() OVER "
    "(PARTITION BY carrier ORDER BY weight DESC, id) AS rn FROM shipments) WHERE rn <= 2",
    ("id",),
    ("NULL partition: a build",),
)


def test_topk_views_equal_spark_at_every_barrier(spark, ivm_server, ic):
    """Every TopK view is incremental (explain names the window and its keyed reads) and equals
    the query run by Spark over the sources at each barrier."""
    out = run_differential(spark, ivm_server, ic, CASES, ROUNDS, SEED)
    for case in CASES:
        text = out["views"][case.name].explain()
        assert "strategy: incremental" in text, text
        assert "partitioned by (" in text and "read whole by (" in text, text
        assert out["checked"][case.name] >= ROUNDS, out["checked"]
        p = out["views"][case.name]._strategy.progress
        assert p.last_strategy == "delta" and p.recomputed == 1, (case.name, p)
    text = out["views"]["v_region_top2"].explain()
    assert "window row_number() partitioned by (region)" in text, text
    assert "index state table v_region_top2__sv_ix_customers_region" in text, text


def test_a_null_partition_makes_the_epoch_a_build(spark, ivm_server, ic):
    """Shipments' carrier is NULL for a third of them: an epoch whose change touches the NULL
    partition is a build (its record says why), the others deltas; the view is right at every
    barrier."""
    out = run_differential(spark, ivm_server, ic, [NULL_PART], ROUNDS, SEED)
    assert out["checked"][NULL_PART.name] >= ROUNDS
    view = out["views"][NULL_PART.name]
    assert "strategy: incremental" in view.explain()
    last = ic.jobs.plan_barriers(NULL_PART.name, limit=1).last_committed
    steps = []
    for b in _issued(ic, NULL_PART.name, 2, last):  # after barrier 1 (after=0: the last)
        try:
            meta = ic.jobs.get_epoch(NULL_PART.name, b).metadata
        except NotFound:  # a barrier the job did not open (maintained by a later one)
            continue
        steps.append(EpochMetadata.from_json(meta).fields)
    whys = [f["why"] for f in steps if f["step"] == "build"]
    assert any("NULL window partition" in w for w in whys), steps
    assert any(f["step"] == "delta" and f["changes"] for f in steps), steps


def test_a_wrong_window_rule_is_caught(spark, ivm_server, ic, monkeypatch):
    """Plant a fault in the window rule (the touched partitions' old rows are not retracted):
    the run must fail, in the differential check or earlier (a key put twice)."""
    from spark_sink.ivm.ops import window

    right = window.window_delta

    def wrong(rules, node):
        z = right(rules, node)
        keep = [i for i, w in enumerate(z.weights) if w > 0]
        return window.ZSet(z.ids, [z.rows[i] for i in keep], [z.weights[i] for i in keep])

    monkeypatch.setattr(window, "window_delta", wrong)
    with pytest.raises(
        (AssertionError, SchemaMismatch), match=r"v_top3_qty'?:? (at barrier|primary key)"
    ):
        run_differential(spark, ivm_server, ic, [TOP3], 8, SEED + 1)


@pytest.mark.parametrize(
    "query, reason",
    [
        (
            "SELECT id, SUM(v) OVER (PARTITION BY g ORDER BY v) AS s FROM wr_src",
            r"window function sum\(\) is not maintained incrementally",
        ),
        (
            "SELECT id, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v) AS rn, "
            "lead(v) OVER (PARTITION BY g ORDER BY v) AS nx FROM wr_src",
            r"window function lead\(\) is not maintained incrementally",
        ),
        (
            "SELECT id, ROW_NUMBER() OVER (ORDER BY v) AS rn FROM wr_src",
            r"row_number\(\) without PARTITION BY is not maintained incrementally",
        ),
        (
            "SELECT id, RANK() OVER (PARTITION BY d ORDER BY v) AS r FROM wr_src",
            r"partitioned by a DOUBLE column \(d\)",
        ),
        (
            "SELECT a.id, a.rn, b.v FROM (SELECT id, g, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v) "
            "AS rn FROM wr_src) a JOIN wr_src b ON a.id = b.id",
            r"a lookup into a window function's result",
        ),
    ],
)
def test_windows_outside_the_class_are_refused_by_name(spark, ivm_server, ic, query, reason):
    from spark_sink import MaterializedView

    ic.drop_table("wr_src", if_exists=True, cascade=True)
    ic.create_table("wr_src", "id BIGINT, g INT, v INT, d DOUBLE", primary_key=["id"])
    b = (
        MaterializedView.builder(spark)
        .coordinator(ivm_server.address)
        .query(query)
        .target("wr_view")
        .primary_key("id")
        .strategy("incremental")
    )
    with pytest.raises(InvalidArgument, match=reason):
        b.build()
