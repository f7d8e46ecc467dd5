"""write_diff / write_rows and FullRecompute's executor path: a view over a source too large for
the driver path is built and maintained without its rows passing through the driver."""

from __future__ import annotations

import pytest
from pyspark.sql.classic.dataframe import DataFrame

from coordinator.jobs import EpochMetadata
from kvstore.errors import SchemaMismatch
from spark_sink import MaterializedView
from spark_sink import view_maintenance as vm
from spark_sink.epoch_attempt import EpochAttempt
from spark_sink.executor_diff import write_diff, write_rows
from spark_sink.query_analysis import prepare_session
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
