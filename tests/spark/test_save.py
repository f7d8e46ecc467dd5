"""df.write.format("snapview").save(): one DataFrame as one epoch of the table's job, exactly
once, with the sink's modes; a failed write leaves nothing visible."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from coordinator.jobs import EpochState

BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def _save(df, address: str, table: str, save_mode: str = "append", **options) -> None:
    w = df.write.format("snapview").option("coordinator", address).option("table", table)
    for k, v in options.items():
        w = w.option(k, v)
    w.mode(save_mode).save()


def _pairs(client, table: str) -> list[tuple]:
    return sorted((r["id"], r["v"]) for r in client.read(table).to_pylist())


def test_each_save_is_its_own_epoch(spark, server, client, table_name):
    """Two saves of the same DataFrame into an append-only table both land, each as one
    committed epoch of the table's job tagged with its own save key."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=[])
    df = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id BIGINT, v STRING")
    _save(df.repartition(2), server.address, table_name, mode="append")
    _save(df, server.address, table_name, mode="append")
    assert _pairs(client, table_name) == sorted([(1, "a"), (2, "b"), (3, "c")] * 2)
    epochs = [client.jobs.get_epoch(table_name, e) for e in (1, 2)]
    assert all(e.state is EpochState.COMMITTED for e in epochs)
    assert all(e.batch.startswith("save:") for e in epochs)
    assert epochs[0].batch != epochs[1].batch


def test_modes_upsert_delete_and_job(spark, server, client, table_name):
    """The option ``mode`` as the stream sink's: upsert (the default) replaces by key, delete
    removes the keys named; the option ``job`` names the writer job."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    rows = "id BIGINT, v STRING"
    _save(spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], rows), server.address, table_name)
    _save(spark.createDataFrame([(2, "B")], rows), server.address, table_name)
    _save(spark.createDataFrame([(3,)], "id BIGINT"), server.address, table_name, mode="delete")
    assert _pairs(client, table_name) == [(1, "a"), (2, "B")]
    assert client.jobs.get_epoch(table_name, 0).epoch == 3
    other = f"{table_name}_j"
    client.create_table(other, "id BIGINT, v STRING", primary_key=["id"])
    _save(spark.createDataFrame([(7, "x")], rows), server.address, other, job="loader")
    assert client.jobs.get_epoch("loader", 0).committed and _pairs(client, other) == [(7, "x")]


def test_overwrite_is_refused_naming_the_option(spark, server, client, table_name):
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    _save(spark.createDataFrame([(1, "a")], "id BIGINT, v STRING"), server.address, table_name)
    df = spark.createDataFrame([(2, "b")], "id BIGINT, v STRING")
    with pytest.raises(PySparkException) as e:
        _save(df, server.address, table_name, save_mode="overwrite")
    assert f"table {table_name!r}: snapview cannot overwrite" in str(e.value)
    assert '.mode("append")' in str(e.value) and "option mode" in str(e.value)
    assert _pairs(client, table_name) == [(1, "a")]


def test_save_into_a_missing_table_names_it(spark, server, client, table_name):
    df = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")
    with pytest.raises(PySparkException) as e:
        _save(df, server.address, "no_such_table")
    assert "TableNotFound" in str(e.value) and "no_such_table" in str(e.value)


@pytest.mark.parametrize("partitions", [4, 1], ids=["others-reported", "none-reported"])
def test_a_failing_task_leaves_nothing_visible(spark, server, client, table_name, partitions):
    """A task fails mid-write (a UDF raises on one row, once the write has opened its epoch):
    Spark aborts the write and the epoch is rolled back, whether other tasks reported their
    attempt or no task reported anything. No row is visible, no lock is left, the next save
    writes, and a task of the failed write that Spark had not stopped yet cannot undo it."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    address, job = server.address, table_name

    def value(i):
        if i == 3_500:
            # The UDF runs upstream of the writer in the same task: on a busy machine it could
            # fail before the writer opened the epoch, and then there is nothing to roll back.
            import time

            import coordinator
            from kvstore.errors import NotFound

            with coordinator.connect(address) as c:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        c.jobs.get_epoch(job, 1)
                        break
                    except NotFound:
                        time.sleep(0.05)  # a poll of another process's progress
            raise ValueError("planted failure on row 3500")
        return f"v{i}"

    bad = spark.range(0, 4_000, numPartitions=partitions).select(
        "id", F.udf(value, StringType())("id").alias("v")
    )
    spark.conf.set(BATCH_ROWS, "500")  # the writer prewrites batches of 500 before the failure
    try:
        with pytest.raises(PySparkException, match="planted failure"):
            _save(bad, server.address, table_name)
    finally:
        spark.conf.unset(BATCH_ROWS)
    epoch = client.jobs.get_epoch(table_name, 1)
    assert epoch.batch.startswith("save:") and epoch.state is EpochState.ABORTED
    assert client.read(table_name).num_rows == 0
    assert client.store.resolved_ts(table_name) > epoch.start_ts  # no lock of it is left
    good = spark.range(0, 10).selectExpr("id", "CAST(id AS STRING) AS v")
    _save(good, server.address, table_name)
    assert client.read(table_name).num_rows == 10
