"""EpochWriter and writeStream.format("snapview"): one store transaction per batch, exactly once."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import threading
from contextlib import contextmanager

import pytest
from pyspark.errors import PySparkException
from pyspark.sql.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import coordinator
from coordinator.epoch_attempt import EpochTarget, Heartbeat
from coordinator.errors import SecondWriter
from coordinator.jobs import EpochState
from kvstore.errors import SnapviewError
from kvstore.mvcc.records import LockOp
from spark_sink import EpochWriter
from spark_sink.epoch_writer import DEFAULT_TTL_MS, QUERY_ID_PROPERTY
from tests.conftest import snapview_reader, wait_for

ALL_TYPES = StructType(
    [
        StructField("id", LongType(), False),
        StructField("i", IntegerType()),
        StructField("d", DoubleType()),
        StructField("b", BooleanType()),
        StructField("s", StringType()),
        StructField("m", DecimalType(10, 2)),
        StructField("day", DateType()),
        StructField("ts", TimestampType()),
    ]
)
DDL = "id BIGINT, i INT, d DOUBLE, b BOOLEAN, s STRING, m DECIMAL(10,2), day DATE, ts TIMESTAMP"


def _rows(version: int) -> list[tuple]:
    return [
        (
            1,
            7 + version,
            1.5,
            True,
            f"héllo{version}",
            decimal.Decimal("12.34"),
            dt.date(2024, 2, 29),
            dt.datetime(2024, 1, 2, 3, 4, 5, 6 + version),
        ),
        (2, None, None, None, None, None, None, None),
        (
            -3,
            -(2**31),
            -0.25,
            False,
            "",
            decimal.Decimal("-99999999.99"),
            dt.date(1970, 1, 1),
            dt.datetime(1969, 12, 31, 23, 59, 59),
        ),
    ]


@pytest.mark.parametrize("direct", [True, False], ids=["direct-lmdb", "grpc-only"])
def test_round_trip_every_type_at_each_commit(spark, server, client, table_name, direct):
    """Every supported type and nulls go through the sink and come back through the source at
    each epoch's commit ts, unchanged, whether executors prewrite into LMDB or over gRPC."""
    client.create_table(table_name, DDL, primary_key=["id"])
    w = EpochWriter(server.address, table=table_name, direct=direct)
    commits = {}
    for version in (0, 1):
        w(spark.createDataFrame(_rows(version), ALL_TYPES), version)
        commits[version] = w.last_epoch.commit_ts
    for version, ts in commits.items():
        got = snapview_reader(spark, server.address, table_name, at=ts).orderBy("id").collect()
        assert [tuple(r) for r in got] == sorted(_rows(version), key=lambda r: r[0])


def test_modes_upsert_delete_append(spark, server, client, table_name):
    """upsert replaces by key, delete removes the keys named, append adds rows with row ids."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    events = f"{table_name}_ev"
    client.create_table(events, "id BIGINT, v STRING", primary_key=[])
    EpochWriter(server.address, table=table_name)(
        spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id BIGINT, v STRING"), 0
    )
    EpochWriter(server.address, table=table_name)(
        spark.createDataFrame([(2, "B")], "id BIGINT, v STRING"), 1
    )
    EpochWriter(server.address, table=table_name, mode="delete")(
        spark.createDataFrame([(3,)], "id BIGINT"), 2
    )
    assert sorted(
        map(
            tuple,
            client.read(table_name).to_pylist()
            and [(r["id"], r["v"]) for r in client.read(table_name).to_pylist()],
        )
    ) == [(1, "a"), (2, "B")]
    app = EpochWriter(server.address, table=events, mode="append")
    df = spark.createDataFrame([(1, "x"), (1, "x"), (2, "y")], "id BIGINT, v STRING")
    app(df, 0)
    app(df, 1)
    assert sorted((r["id"], r["v"]) for r in client.read(events).to_pylist()) == sorted(
        [(1, "x"), (1, "x"), (2, "y")] * 2
    )
    with pytest.raises(SnapviewError, match="append-only"):
        EpochWriter(server.address, table=events)(df, 0)


def test_a_second_writer_job_for_a_table_is_refused(spark, server, client, table_name):
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    df = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")
    EpochWriter(server.address, table=table_name)(df, 0)
    with pytest.raises(SecondWriter, match=f"'{table_name}' is already written by job"):
        EpochWriter(server.address, table=table_name, job="intruder")(
            spark.createDataFrame([(1, "zzz")], "id BIGINT, v STRING"), 0
        )
    assert client.read(table_name).to_pylist() == [{"id": 1, "v": "a"}]


@contextmanager
def in_stream(spark, query_id: str):
    """Run the body as foreachBatch does: with Spark's query id set on this thread (Spark sets
    it on the thread that runs a micro-batch; only a restart after a crash replays a batch)."""
    sc = spark.sparkContext
    sc.setLocalProperty(QUERY_ID_PROPERTY, query_id)
    try:
        yield
    finally:
        sc.setLocalProperty(QUERY_ID_PROPERTY, None)


def test_replayed_committed_batch_is_skipped(spark, server, client, table_name):
    """In a stream, the same batch id of the same query, after its commit, writes nothing
    again, and the call says it was a replay."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=[])
    w = EpochWriter(server.address, table=table_name, mode="append")
    df = spark.createDataFrame([(i, "r") for i in range(10)], "id BIGINT, v STRING")
    with in_stream(spark, "q-replay"):
        w(df, 0)
        done, first = w.last_write, w.last_epoch
        w(df, 0)
        again = w.last_write
    assert done is not None and not done.replayed and done.rows == 10 and done.batch == "q-replay:0"
    assert again is not None and again.replayed and again.rows == 0
    assert again.epoch.epoch == first.epoch and again.epoch.commit_ts == first.commit_ts
    assert client.read(table_name).num_rows == 10


def test_one_off_loads_each_land(spark, server, client, table_name):
    """Outside a stream every call is its own epoch: the one-off load ``writer(df, 0)`` twice
    (as docs/cluster.md showed it), ``writer(df)`` and ``writer.load(df)`` all land."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=[])
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id BIGINT, v STRING")
    for _ in range(2):
        EpochWriter(server.address, table=table_name, mode="append")(df, 0)
    assert sorted(r["id"] for r in client.read(table_name).to_pylist()) == [1, 1, 2, 2]
    w = EpochWriter(server.address, table=table_name, mode="append")
    w(df, 0)
    first = w.last_write
    w(df)
    writes = [first, w.last_write, w.load(df)]
    assert [x.replayed for x in writes] == [False] * 3 and [x.rows for x in writes] == [2] * 3
    assert len({x.epoch.epoch for x in writes}) == 3
    assert sorted(r["id"] for r in client.read(table_name).to_pylist()) == [1] * 5 + [2] * 5


def test_repeated_dedup_key_is_skipped_and_reported(spark, server, client, table_name, caplog):
    """A load that names a dedup key is deduplicated against the job's newest epoch: the
    repeat writes nothing, returns ``replayed`` and logs a WARNING naming job and key."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=[])
    df = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")
    w = EpochWriter(server.address, table=table_name, mode="append")
    first = w.load(df, dedup_key="2026-07-01")
    with caplog.at_level(logging.WARNING, logger="spark_sink.epoch_writer"):
        again = EpochWriter(server.address, table=table_name, mode="append").load(
            df, dedup_key="2026-07-01"
        )
    assert not first.replayed and again.replayed and again.rows == 0
    assert again.epoch.epoch == first.epoch.epoch and again.batch == "dedup:2026-07-01"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and "dedup:2026-07-01" in warned[0].getMessage()
    assert repr(table_name) in warned[0].getMessage()
    assert client.read(table_name).num_rows == 1
    assert not w.load(df, dedup_key="2026-07-02").replayed
    assert client.read(table_name).num_rows == 2
    with pytest.raises(SnapviewError, match="dedup_key"):
        w.load(df, dedup_key="")


def test_bad_row_fails_batch_and_names_column_and_value(spark, server, client, table_name):
    """A value that does not fit fails the batch with the column and value in the error, and
    nothing of the batch becomes visible."""
    client.create_table(table_name, "id BIGINT, small INT", primary_key=["id"])
    df = spark.createDataFrame(
        [(i, i) for i in range(100)] + [(100, 3_000_000_000)], "id BIGINT, small BIGINT"
    ).repartition(2)
    w = EpochWriter(server.address, table=table_name)
    with pytest.raises(PySparkException) as e:
        w(df, 0)
    assert "'small'" in str(e.value) and "3000000000" in str(e.value)
    assert client.read(table_name).num_rows == 0
    assert client.jobs.get_epoch(table_name, w.last_epoch.epoch).state is EpochState.ABORTED
    with pytest.raises(SnapviewError, match="unknown column 'nope'"):
        w(spark.createDataFrame([(1, 1)], "id BIGINT, nope INT"), 1)


@pytest.mark.parametrize("direct", [True, False], ids=["direct-lmdb", "grpc-only"])
def test_two_rows_for_one_key_fail_the_batch(spark, server, client, table_name, direct):
    """Two different rows with one primary key in one batch (here in different partitions, so
    different prewrites) fail the batch with an error naming table and key; nothing is visible.
    The same row twice is a retry, and commits once."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    w = EpochWriter(server.address, table=table_name, direct=direct)
    rows = [(i, "a") for i in range(100)]
    two = spark.createDataFrame(rows, "id BIGINT, v STRING").union(
        spark.createDataFrame([(42, "b")], "id BIGINT, v STRING")
    )
    with pytest.raises(PySparkException) as e:
        w(two, 0)
    assert f"table {table_name!r} key (42,)" in str(e.value), str(e.value)[:2000]
    assert "already wrote a different row" in str(e.value)
    assert client.read(table_name).num_rows == 0
    same = spark.createDataFrame(rows, "id BIGINT, v STRING").union(
        spark.createDataFrame([(42, "a")], "id BIGINT, v STRING")
    )
    w(same, 1)
    assert client.read(table_name).num_rows == 100


def test_feed_high_water_carries_over_batches_without_feed_rows(spark, server, client, table_name):
    """Each epoch records the highest _commit_ts of the change feed consumed so far: a batch with
    feed rows records its own, later batches without any carry it forward, whether the writer
    remembers it or (a new writer) reads it back from the job's newest epoch."""
    from coordinator.jobs import FEED, EpochMetadata

    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    w = EpochWriter(server.address, table=table_name)
    rows = "id BIGINT, v STRING"
    w(spark.createDataFrame([(1, "a", 123), (2, "b", 456)], rows + ", _commit_ts BIGINT"), 0)
    epochs = [w.last_epoch.epoch]
    w(spark.createDataFrame([(3, "c")], rows), 1)
    epochs.append(w.last_epoch.epoch)
    fresh = EpochWriter(server.address, table=table_name)
    fresh(spark.createDataFrame([(4, "d")], rows), 2)
    epochs.append(fresh.last_epoch.epoch)
    recorded = [
        json.loads(client.jobs.get_epoch(table_name, e).metadata)["sources"].get(FEED)
        for e in epochs
    ]
    assert recorded == [456, 456, 456]
    last = client.jobs.last_committed_metadata(table_name)
    assert isinstance(last, EpochMetadata) and last.feed == 456
    assert client.read(table_name).num_rows == 4


def test_heartbeat_keeps_long_epoch_alive(client, table_name):
    """With a heartbeat, an epoch outlives its lock TTL: readers wait instead of rolling it back,
    and the commit succeeds."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    info = client.describe_table(table_name)
    e = client.jobs.open_transaction(table_name, 0, lock_ttl_ms=600, batch="q:0", owner="o")
    target = EpochTarget(
        client.address, None, info, "upsert", table_name, e.epoch, e.start_ts, e.primary_key, 600
    )
    k = info.key_codec.encode({"id": 1})
    with Heartbeat.of(target):
        client.prewrite(
            [(LockOp.PUT, k, info.row_codec.encode({"id": 1, "v": "a"}))],
            e.primary_key,
            e.start_ts,
            600,
        )
        impatient = coordinator.connect(client.address, lock_wait_s=2.0)
        with pytest.raises(coordinator.KeyIsLocked):
            impatient.read(table_name)  # 2 s > 3 TTLs: only the heartbeat kept it alive
        impatient.close()
    done = client.jobs.commit_transaction(table_name, e.epoch, e.start_ts)
    assert done.state is EpochState.COMMITTED and client.read(table_name).num_rows == 1


def test_dead_job_locks_resolved_after_ttl(client, table_name):
    """A writer that dies mid-epoch leaves locks; after their TTL a reader rolls them back."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    info = client.describe_table(table_name)
    e = client.jobs.open_transaction(table_name, 0, lock_ttl_ms=300, batch="q:0", owner="dead")
    muts = [
        (LockOp.PUT, info.key_codec.encode({"id": i}), info.row_codec.encode({"id": i, "v": "x"}))
        for i in range(50)
    ]
    client.prewrite(muts, e.primary_key, e.start_ts, 300)
    assert client.read(table_name).num_rows == 0  # waits out the TTL, then rolls back
    st = client.store.check_txn_status(e.primary_key, e.start_ts)
    assert st.status == "rolled_back"
    assert client.store.resolved_ts(table_name) > e.start_ts  # no lock left


def _start_sink(df, server, table, mode, checkpoint):
    """``df.writeStream.format("snapview")`` into ``table``, started."""
    w = df.writeStream.format("snapview").option("coordinator", server.address)
    w = w.option("table", table).option("mode", mode)
    return w.option("checkpointLocation", str(checkpoint)).start()


def test_write_stream_format_snapview(spark, server, client, table_name, tmp_path):
    """writeStream.format('snapview') appends each micro-batch once, through restarts."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=[])
    src = tmp_path / "in"
    src.mkdir()
    for f in range(3):
        (src / f"f{f}.json").write_text(
            "".join(json.dumps({"id": f * 10 + i, "v": "x"}) + "\n" for i in range(10))
        )

    def run():
        df = spark.readStream.schema("id BIGINT, v STRING").option("maxFilesPerTrigger", 1)
        q = _start_sink(df.json(str(src)), server, table_name, "append", tmp_path / "ck")
        try:
            q.processAllAvailable()
        finally:
            q.stop()

    run()
    (src / "f3.json").write_text(json.dumps({"id": 99, "v": "late"}) + "\n")
    run()
    ids = sorted(r["id"] for r in client.read(table_name).to_pylist())
    assert ids == sorted(list(range(30)) + [99])


def test_large_epoch_is_never_partly_visible(spark, server, client, table_name):
    """While a 200k-row epoch is being prewritten, concurrent snapshot reads see none or all."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    with client.transaction() as t:
        t.put(table_name, {"id": -1, "v": "base"})
    df = spark.range(0, 200_000, numPartitions=4).selectExpr("id", "'v' as v")
    w = EpochWriter(server.address, table=table_name)
    writer = threading.Thread(target=w, args=(df, 0))
    seen: list[int] = []
    writer.start()
    reader = coordinator.connect(server.address)
    while writer.is_alive():
        seen.append(reader.read(table_name).num_rows)
    writer.join()
    seen.append(reader.read(table_name).num_rows)
    spark_seen = snapview_reader(spark, server.address, table_name).count()
    reader.close()
    assert set(seen) <= {1, 200_001}, sorted(set(seen))
    assert seen[-1] == 200_001 and spark_seen == 200_001
    assert len(seen) >= 2


def test_a_stream_stopped_mid_batch_leaves_no_open_epoch(
    spark, server, client, table_name, tmp_path
):
    """``q.stop()`` while a batch is being written: the writer's abort releases the epoch its
    tasks opened (rolled back through its primary), so nothing of the stopped stream holds the
    GC safepoint; the next run writes the batch once. (The server's --epoch-ttl covers a
    writer that cannot say so: a driver killed with -9.)

    The bound: Spark calls the abort in the thread ``stop()`` interrupts, and when the interrupt
    lands mid-call Spark logs "failed to abort" and our abort never runs (seen once in a fresh
    clone's ``make test``, 2026-11-27). The epoch is then released when its attempt's TTL lapses
    after the killed tasks stop heartbeating it (``DEFAULT_TTL_MS``), which is the guarantee
    this waits for; usually the abort releases it at once."""
    from pyspark.sql import functions as F

    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    src = tmp_path / "in"
    src.mkdir()
    (src / "f0.json").write_text(json.dumps({"id": 1, "v": "x"}) + "\n")
    release = tmp_path / "go"  # the slow column waits for this file (at most 20 s)

    def slow(v: str) -> str:
        import os
        import time

        deadline = time.monotonic() + 20
        while not os.path.exists(str(release)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return v

    def start():
        df = spark.readStream.schema("id BIGINT, v STRING").json(str(src))
        df = df.withColumn("v", F.udf(slow, "string")("v"))
        return _start_sink(df, server, table_name, "upsert", tmp_path / "ck")

    def open_epoch():
        try:
            e = client.jobs.get_epoch(table_name, 0)
        except SnapviewError:
            return None
        return e if e.state == EpochState.PREWRITE else None

    q = start()
    try:
        opened = wait_for(open_epoch, 30, "the batch's epoch to open")
    finally:
        q.stop()
    wait_for(
        lambda: open_epoch() is None,
        DEFAULT_TTL_MS / 1000 + 15,
        "the stopped stream's epoch to be released (by the abort, or its TTL lapsing)",
    )
    assert client.jobs.get_epoch(table_name, opened.epoch).state == EpochState.ABORTED
    assert not any(
        h.kind == "job" and h.name.startswith(f"{table_name} (open epoch")
        for h in client.gc_status().holds
    )
    release.write_text("")
    q = start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert client.read(table_name).to_pylist() == [{"id": 1, "v": "x"}]
