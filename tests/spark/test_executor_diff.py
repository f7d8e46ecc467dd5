"""write_diff / write_rows and FullRecompute's executor path: a view over a source too large for
the driver path is built and maintained without its rows passing through the driver."""

from __future__ import annotations

import pytest
from pyspark.sql.classic.dataframe import DataFrame

from coordinator.epoch_attempt import EpochAttempt
from coordinator.jobs import EpochMetadata
from kvstore.errors import SchemaMismatch
from spark_sink import MaterializedView
from spark_sink import full_recompute as vm
from spark_sink.executor_diff import write_diff, write_rows
from spark_sink.job_session import prepare_session
from tests.conftest import snapview_reader

_collect = DataFrame.collect  # the test's own reads, not counted

SQL = (
    "SELECT id, name, v * 2 AS v2, CASE WHEN id % 7 = 0 THEN NULL ELSE v END AS vn "
    "FROM {src} WHERE v >= 0"
)


@pytest.fixture
def large(monkeypatch):
    """Every source counts as large: the executor path."""
    monkeypatch.setattr(vm, "LOCAL_SOURCE_ROWS", 5)


@pytest.fixture
def driver_rows(monkeypatch):
    """No toArrow, no driver diff; the size of every collect() is recorded (of the classic
    DataFrame, the class a local session's DataFrames are)."""
    sizes: list[int] = []
    collect = DataFrame.collect

    def counted(self):
        rows = collect(self)
        sizes.append(len(rows))
        return rows

    def refuse(*a, **k):
        raise AssertionError("the view passed through the driver")

    monkeypatch.setattr(DataFrame, "collect", counted)
    monkeypatch.setattr(DataFrame, "toArrow", refuse)
    monkeypatch.setattr(vm.FullRecompute, "diff", refuse)
    return sizes


def expected(spark, address: str, src: str, ts: int, sql: str) -> list[dict]:
    """Spark's batch query over ``src`` as of ``ts``."""
    snapview_reader(spark, address, src, at=ts).createOrReplaceTempView(src)
    return sorted((r.asDict() for r in _collect(spark.sql(sql.format(src=src)))), key=str)


def check(spark, server, client, job, src: str, view: str, sql: str) -> None:
    job.await_barrier(client.tso(), timeout=120)
    snap = client.snapshot([src, view], wait_s=60)
    got = sorted(snap.read(view).to_pylist(), key=str)
    assert got == expected(spark, server.address, src, snap.read_ts(src), sql)


def test_large_view_is_maintained_from_the_executors(
    spark, server, client, table_name, large, driver_rows
):
    src, view = f"{table_name}_s", f"{table_name}_v"
    client.create_table(src, "id BIGINT, name STRING, v BIGINT", primary_key=["id"])
    with client.transaction() as t:
        for i in range(300):
            t.put(src, {"id": i, "name": f"n{i}" if i % 5 else None, "v": i})
    job = (
        MaterializedView.builder(spark)
        .coordinator(server.address)
        .query(SQL.format(src=src))
        .target(view)
        .primary_key("id")
        .strategy("full_recompute")  # (auto would maintain it incrementally)
        .trigger_interval("100 milliseconds")
        .build()
        .start()
    )
    try:
        check(spark, server, client, job, src, view, SQL)
        p = job.progress()
        assert p.mutations == 300
        with client.transaction() as t:  # updates (one to null), a row filtered out, inserts
            t.put(src, {"id": 1, "name": "changed", "v": 1})
            t.put(src, {"id": 2, "name": None, "v": 2})
            t.put(src, {"id": 3, "name": "n3", "v": -3})
            for i in range(300, 320):
                t.put(src, {"id": i, "name": "new", "v": i})
        check(spark, server, client, job, src, view, SQL)
        with client.transaction() as t:  # deletes
            for i in range(100, 150):
                t.delete(src, {"id": i})
        check(spark, server, client, job, src, view, SQL)
        p = job.progress()
        assert p.mutations == 300 + 2 + 1 + 20 + 50
        assert "run_diff_write" in p.last_steps or list(p.last_steps) == ["open", "commit"]
        assert p.recomputed >= 3
    finally:
        job.stop()
    assert driver_rows and max(driver_rows) < 50  # barrier rows and counts, never the view


def test_one_row_view(spark, server, client, table_name, large, driver_rows):
    src, view = f"{table_name}_s", f"{table_name}_v"
    client.create_table(src, "id BIGINT, v DOUBLE", primary_key=["id"])
    with client.transaction() as t:
        for i in range(50):
            t.put(src, {"id": i, "v": i / 2})
    sql = "SELECT SUM(v) AS s, COUNT(*) AS n, MAX(CAST(NULL AS STRING)) AS x FROM {src}"
    v = MaterializedView.builder(spark).coordinator(server.address).query(sql.format(src=src))
    job = v.target(view).strategy("full_recompute").trigger_interval("100 milliseconds")
    job = job.build().start()
    try:
        check(spark, server, client, job, src, view, sql)
        with client.transaction() as t:
            t.put(src, {"id": 100, "v": 1.0})
        check(spark, server, client, job, src, view, sql)
        assert job.progress().mutations == 2
    finally:
        job.stop()
    # a one-row view's query returning no row is refused
    empty = f"SELECT SUM(v) AS s, COUNT(*) AS n, MAX(CAST(NULL AS STRING)) AS x FROM {src} "
    job = (
        MaterializedView.builder(spark)
        .coordinator(server.address)
        .query(empty + "HAVING COUNT(*) > 1000")
        .target(f"{view}2")
        .build()
        .start()
    )
    try:
        with pytest.raises(SchemaMismatch, match="one-row view's query returned 0 rows"):
            job.await_barrier(client.tso(), timeout=120)
    finally:
        job.stop()


@pytest.fixture(scope="module")
def session(spark):
    """One job session (JobSessionSource registered) for the tests that call write_diff
    themselves: Spark 4.3 cannot look the name up in a second session cloned after it."""
    s = spark.newSession()
    prepare_session(s)
    return s


def _attempt(client, job: str, table: str) -> EpochAttempt:
    client.jobs.register_job(job, table)
    return EpochAttempt.open(client, job, 0, ttl_ms=20_000, batch="b1", owner="test")


def test_duplicate_key_is_refused_before_anything_is_written(session, server, client, table_name):
    client.create_table(table_name, "k BIGINT, v STRING", primary_key=["k"])
    with client.transaction() as t:
        t.put(table_name, {"k": 1, "v": "old"})
    attempt = _attempt(client, f"{table_name}_job", table_name)
    target = attempt.target(server.address, None, client.describe_table(table_name), "upsert")
    new = session.createDataFrame([(k, "x") for k in [5, 6, 7, 7, 8]], "k BIGINT, v STRING")
    msg = rf"view '{table_name}': primary key \(k\) is not unique .*\(7,\) appears more than once"
    with pytest.raises(SchemaMismatch, match=msg):
        write_diff(session, new, target, attempt.start_ts, False)
    # Nothing was prewritten: committing the attempt changes nothing.
    attempt.commit(EpochMetadata(sources={}, fields={}))
    assert client.read(table_name).to_pylist() == [{"k": 1, "v": "old"}]


def test_write_diff_and_write_rows_directly(session, server, client, table_name):
    client.create_table(table_name, "k BIGINT, v STRING, d DOUBLE", primary_key=["k"])
    info = client.describe_table(table_name)
    job = f"{table_name}_job"
    attempt = _attempt(client, job, table_name)
    target = attempt.target(server.address, None, info, "upsert")
    rows = [(k, f"v{k}", k / 3) for k in range(1000)]
    df = session.createDataFrame(rows, "k BIGINT, v STRING, d DOUBLE").repartition(3)
    assert write_rows(df, target) == 1000
    attempt.commit(EpochMetadata(sources={}, fields={}))
    assert client.read(table_name).num_rows == 1000

    attempt = EpochAttempt.open(client, job, 0, ttl_ms=20_000, batch="b2", owner="test")
    target = attempt.target(server.address, None, info, "upsert")
    new = [(k, None if k == 3 else f"v{k}", float("nan") if k == 4 else k / 3) for k in range(5)]
    new += [(k, f"v{k}", k / 3) for k in range(10, 1000)] + [(2000, "n", None)]
    df = session.createDataFrame(new, "k BIGINT, v STRING, d DOUBLE").repartition(4)
    # k 3 and 4 change, 5..9 are deleted, 2000 is new
    assert write_diff(session, df, target, attempt.start_ts, False) == 2 + 5 + 1
    attempt.commit(EpochMetadata(sources={}, fields={}))
    got = {r["k"]: (r["v"], r["d"]) for r in client.read(table_name).to_pylist()}
    assert len(got) == len(new) and got[2000] == ("n", None) and got[3][0] is None
    assert got[4][1] != got[4][1] and 5 not in got  # NaN


def _no_old_read(monkeypatch) -> None:
    """Fail the test if write_diff reads the table's old version (the diff's join input)."""
    import spark_sink.executor_diff as ed

    def refuse(*a, **k):
        raise AssertionError("write_diff read the old version of a table that held no row")

    monkeypatch.setattr(ed, "read_table", refuse)


def test_a_table_that_holds_no_row_is_written_without_a_diff(
    session, server, client, table_name, monkeypatch
):
    """A first build: every row is a PUT, written without reading the (empty) old version; a
    table whose rows were all deleted before the snapshot counts as empty too."""
    client.create_table(table_name, "k BIGINT, v STRING", primary_key=["k"])
    with client.transaction() as t:
        t.put(table_name, {"k": 1, "v": "gone"})
    with client.transaction() as t:
        t.delete(table_name, {"k": 1})
    info = client.describe_table(table_name)
    attempt = _attempt(client, f"{table_name}_job", table_name)
    target = attempt.target(server.address, None, info, "upsert")
    _no_old_read(monkeypatch)
    df = session.createDataFrame([(k, f"v{k}") for k in range(500)], "k BIGINT, v STRING")
    assert write_diff(session, df.repartition(3), target, attempt.start_ts, False) == 500
    attempt.commit(EpochMetadata(sources={}, fields={}))
    got = client.read(table_name).to_pylist()
    assert sorted((r["k"], r["v"]) for r in got) == [(k, f"v{k}") for k in range(500)]


def test_a_duplicate_key_is_refused_on_the_fresh_path_too(
    session, server, client, table_name, monkeypatch
):
    client.create_table(table_name, "k BIGINT, v STRING", primary_key=["k"])
    attempt = _attempt(client, f"{table_name}_job", table_name)
    target = attempt.target(server.address, None, client.describe_table(table_name), "upsert")
    _no_old_read(monkeypatch)
    new = session.createDataFrame([(k, "x") for k in [5, 6, 7, 7, 8]], "k BIGINT, v STRING")
    with pytest.raises(SchemaMismatch, match=r"\(7,\) appears more than once"):
        write_diff(session, new, target, attempt.start_ts, False)
    attempt.commit(EpochMetadata(sources={}, fields={}))
    assert client.read(table_name).num_rows == 0


def test_a_table_with_rows_is_still_diffed(session, server, client, table_name):
    """The fresh path is taken only when the table holds no row: one committed row makes
    write_diff read the old version (and delete what the new one lacks)."""
    import spark_sink.executor_diff as ed

    client.create_table(table_name, "k BIGINT, v STRING", primary_key=["k"])
    with client.transaction() as t:
        t.put(table_name, {"k": 1, "v": "old"})
    attempt = _attempt(client, f"{table_name}_job", table_name)
    target = attempt.target(server.address, None, client.describe_table(table_name), "upsert")
    assert ed.holds_rows(target, attempt.start_ts - 1)
    df = session.createDataFrame([(2, "new")], "k BIGINT, v STRING")
    assert write_diff(session, df, target, attempt.start_ts, False, unique=True) == 2
    attempt.commit(EpochMetadata(sources={}, fields={}))
    assert client.read(table_name).to_pylist() == [{"k": 2, "v": "new"}]


def test_a_first_build_with_a_proven_key_skips_the_key_check(
    spark, server, client, table_name, monkeypatch
):
    """orders JOIN customers ON the customers' key, keyed by the orders' key: the plan proves
    the key unique (spark_sink.ivm.unique_keys), so the first build runs no key check, and its
    view and index state table are written into empty tables without a diff; the view then
    equals Spark's result, at the build and after a delta through the index."""
    import spark_sink.executor_diff as ed

    orders, customers, view = f"{table_name}_o", f"{table_name}_c", f"{table_name}_v"
    client.create_table(orders, "id BIGINT, customer BIGINT, amount BIGINT", ["id"])
    client.create_table(customers, "id BIGINT, region INT", ["id"])
    with client.transaction() as t:
        for i in range(40):
            t.put(customers, {"id": i, "region": i % 3})
        for i in range(400):
            t.put(orders, {"id": i, "customer": (i * 7) % 40, "amount": i})
    sql = (
        f"SELECT o.id, o.amount, c.region FROM {orders} o JOIN {customers} c "
        "ON o.customer = c.id WHERE c.region < 2"
    )
    checks, old_reads = [], []
    monkeypatch.setattr(ed, "_check_key", lambda *a: checks.append(a))
    real_read = ed.read_table
    monkeypatch.setattr(ed, "read_table", lambda *a: old_reads.append(a) or real_read(*a))
    v = (
        MaterializedView.builder(spark)
        .coordinator(server.address)
        .query(sql)
        .target(view)
        .primary_key("id")
        .strategy("incremental")
        .build()
    )
    v.maintain_available(until=client.tso(), timeout=120)
    assert checks == [] and old_reads == []
    with client.transaction() as t:  # a customer's region changes: a lookup through the index
        t.put(customers, {"id": 5, "region": 2})
        t.put(customers, {"id": 3, "region": 0})
    v.maintain_available(until=client.tso(), timeout=120)
    assert v._strategy.progress.last_strategy == "delta"  # through the index, not a build
    snap = client.snapshot([orders, customers, view], wait_s=60)
    got = sorted((r["id"], r["amount"], r["region"]) for r in snap.read(view).to_pylist())
    region = {r["id"]: r["region"] for r in snap.read(customers).to_pylist()}
    want = sorted(
        (r["id"], r["amount"], region[r["customer"]])
        for r in snap.read(orders).to_pylist()
        if region[r["customer"]] < 2
    )
    assert got == want and len(got) > 100
