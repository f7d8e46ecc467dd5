"""The snapview data source in a real SparkSession against a real server."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.errors import PySparkException

from tests.conftest import snapview_reader


@pytest.fixture
def accounts(client, table_name):
    client.create_table(table_name, "id BIGINT, name STRING, bal BIGINT", primary_key=["id"])
    with client.transaction() as t:
        for i in range(1000):
            t.put(table_name, {"id": i, "name": f"n{i}", "bal": i})
    return table_name, t.commit_ts


def test_snapshot_in_key_range_partitions(spark, server, accounts):
    """A snapshot read is cut into key-range partitions sized from the table, all at one ts."""
    table, _ = accounts
    df = snapview_reader(spark, server.address, table, rowsPerPartition=300)
    assert df.rdd.getNumPartitions() >= 3
    rows = df.collect()
    assert sorted(r.id for r in rows) == list(range(1000))
    assert {r.id: r.bal for r in rows} == {i: i for i in range(1000)}


def test_snapshot_at_timestamp(spark, server, client, accounts):
    """option('at') reads the table as of that ts, whatever committed later."""
    table, ts = accounts
    with client.transaction() as t:
        t.delete(table, {"id": 0})
        t.put(table, {"id": 5000, "name": "late", "bal": 1})
    old = snapview_reader(spark, server.address, table, at=ts)
    new = snapview_reader(spark, server.address, table)
    assert old.count() == 1000 and old.filter("id = 5000").count() == 0
    assert new.count() == 1000 and new.filter("id = 0").count() == 0


@pytest.mark.parametrize(
    "where, expected_ids",
    [
        ("id = 7", [7]),
        ("id in (3, 9, 4000)", [3, 9]),
        ("id >= 995", [995, 996, 997, 998, 999]),
        ("id < 3", [0, 1, 2]),
        ("id > 10 and id <= 12", [11, 12]),
    ],
)
def test_primary_key_filters(spark, server, accounts, where, expected_ids):
    """=, IN, <, <=, >, >= on the primary key select exactly their rows (Spark evaluates them on
    the whole table: see test_filters_do_not_leak_into_other_queries_of_a_dataframe)."""
    table, _ = accounts
    df = snapview_reader(spark, server.address, table, rowsPerPartition=300).filter(where)
    assert sorted(r.id for r in df.collect()) == expected_ids


def test_non_key_filter_still_applied(spark, server, accounts):
    """A filter on another column is left to Spark and still holds."""
    table, _ = accounts
    df = snapview_reader(spark, server.address, table).filter("bal < 5 and name != 'n2'")
    assert sorted(r.id for r in df.collect()) == [0, 1, 3, 4]


def ids(df) -> list[int]:
    return sorted(r.id for r in df.collect())


def test_filters_do_not_leak_into_other_queries_of_a_dataframe(spark, server, accounts):
    """Spark 4.3 plans a Python source's read once per loaded DataFrame and every query of it
    (and every scan of it within one query) reuses that plan: a query's filter must not narrow
    what another query of the same DataFrame reads."""
    table, _ = accounts
    df = snapview_reader(spark, server.address, table)
    assert ids(df.filter("id in (1, 2, 3)")) == [1, 2, 3]
    assert df.count() == 1000  # the filter's query came first
    assert ids(df.filter("id >= 995")) == [995, 996, 997, 998, 999]
    assert ids(df.filter("id < 3")) == [0, 1, 2]  # a second, different key filter
    assert df.filter("id % 2 = 1").count() == 500  # a filter Spark cannot hand to a source
    assert df.count() == 1000
    first = snapview_reader(spark, server.address, table)
    assert first.count() == 1000  # the unfiltered query came first
    assert ids(first.filter("id = 7")) == [7]
    assert first.count() == 1000
    both = df.filter("id = 1").union(df.filter("id = 2"))  # two scans of one DataFrame
    assert ids(both) == [1, 2]


def test_every_query_of_a_dataframe_reads_one_snapshot(spark, server, client, accounts):
    """A DataFrame without ``at`` reads the table as of its first query's planning, in every
    later query too, filtered or not; loading it again reads a newer state."""
    table, _ = accounts
    df = snapview_reader(spark, server.address, table)
    assert df.count() == 1000
    with client.transaction() as t:
        t.put(table, {"id": 5000, "name": "late", "bal": 1})
    assert df.filter("id = 5000").count() == 0 and df.filter("id >= 999").count() == 1
    assert df.count() == 1000
    assert snapview_reader(spark, server.address, table).filter("id = 5000").count() == 1


def test_change_read(spark, server, client, accounts):
    """changes_from/changes_to give the net change per key with Delta-CDF columns."""
    table, ts = accounts
    with client.transaction() as t:
        t.put(table, {"id": 1, "name": "changed", "bal": 5})
        t.delete(table, {"id": 2})
        t.put(table, {"id": 5000, "name": "new", "bal": 0})
        t.put(table, {"id": 6000, "name": "gone", "bal": 0})
    with client.transaction() as t:
        t.delete(table, {"id": 6000})  # inserted then deleted inside the interval: nothing
    end = t.commit_ts
    df = snapview_reader(spark, server.address, table, changes_from=ts, changes_to=end)
    got = sorted((r.id, r._change_type, r.name) for r in df.collect())
    assert got == [
        (1, "update_postimage", "changed"),
        (1, "update_preimage", "n1"),
        (2, "delete", "n2"),
        (5000, "insert", "new"),
    ]
    assert {r._commit_ts for r in df.collect()} <= {end, end - 1} or all(
        ts < r._commit_ts <= end for r in df.collect()
    )


def test_bad_options_are_clear(spark, server, accounts):
    """Options that contradict each other fail with a message naming them."""
    table, _ = accounts
    with pytest.raises(PySparkException, match="changes_from and changes_to go together"):
        snapview_reader(spark, server.address, table, changes_from=5).collect()
    with pytest.raises(PySparkException, match="does not exist"):
        snapview_reader(spark, server.address, "no_such_table").collect()


def test_stream_needs_read_change_feed(spark, server, accounts):
    """A stream without readChangeFeed is refused with the option to add."""
    table, _ = accounts
    df = (
        spark.readStream.format("snapview")
        .option("coordinator", server.address)
        .option("table", table)
        .load()
    )
    with pytest.raises(PySparkException, match="readChangeFeed"):
        q = df.writeStream.format("memory").queryName("nofeed").start()
        try:
            q.processAllAvailable()
        finally:
            q.stop()


def _feed(spark, address, table, **options):
    r = (
        spark.readStream.format("snapview")
        .option("coordinator", address)
        .option("table", table)
        .option("readChangeFeed", "true")
    )
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def test_stream_snapshot_then_changes_and_resume(spark, server, client, accounts, tmp_path):
    """The feed emits a snapshot, then changes; a restart from the checkpoint repeats nothing."""
    table, _ = accounts
    seen: list[list] = []

    def collect(df, batch_id):
        seen.append(sorted((r.id, r._change_type) for r in df.collect()))

    ckpt = str(tmp_path / "ckpt")

    def run():
        q = (
            _feed(spark, server.address, table)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", ckpt)
            .start()
        )
        try:
            q.processAllAvailable()
        finally:
            q.stop()

    run()
    assert len(seen) == 1 and len(seen[0]) == 1000
    assert {c for _, c in seen[0]} == {"insert"}
    with client.transaction() as t:
        t.put(table, {"id": 1, "name": "x", "bal": 1})
        t.delete(table, {"id": 2})
    run()  # restart on the same checkpoint: only the new change
    assert seen[1:] == [[(1, "update_postimage"), (1, "update_preimage"), (2, "delete")]]
    run()  # nothing new: no batch at all
    assert len(seen) == 2


def test_stream_admission_control(spark, server, client, accounts, tmp_path):
    """maxRowsPerTrigger bounds each change batch without splitting a transaction."""
    table, _ = accounts
    sizes: list[int] = []
    q = (
        _feed(spark, server.address, table, maxRowsPerTrigger=10)
        .writeStream.foreachBatch(lambda df, b: sizes.append(df.count()))
        .option("checkpointLocation", str(tmp_path / "c"))
        .start()
    )
    try:
        q.processAllAvailable()
        for k in range(5):
            with client.transaction() as t:
                for i in range(10):
                    t.put(table, {"id": 10_000 + k * 10 + i, "name": "a", "bal": k})
        q.processAllAvailable()
    finally:
        q.stop()
    assert sizes[0] == 1000  # the snapshot is one batch
    assert sum(sizes[1:]) == 50 and len(sizes[1:]) == 5 and max(sizes[1:]) == 10


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    history=st.lists(
        st.lists(
            st.tuples(st.integers(0, 15), st.one_of(st.none(), st.integers(0, 3))),
            min_size=1,
            max_size=6,
        ),
        min_size=2,
        max_size=6,
    ),
    cut=st.data(),
)
def test_change_read_equals_snapshot_diff(client, table_name, history, cut):
    """On random histories, the net changes in (t0, t1] are exactly the diff of the snapshots
    at t0 and t1 (store level, many histories; the Spark path is the same call)."""
    name = f"{table_name}_{abs(hash(str(history))) % 10**9}"
    client.create_table(name, "id BIGINT, v BIGINT", primary_key=["id"], if_not_exists=True)
    stamps = [client.tso()]
    for txn in history:
        with client.transaction() as t:
            for k, v in txn:
                if v is None:
                    t.delete(name, {"id": k})
                else:
                    t.put(name, {"id": k, "v": v})
        stamps.append(client.tso())
    i = cut.draw(st.integers(0, len(stamps) - 2))
    j = cut.draw(st.integers(i + 1, len(stamps) - 1))
    before = {r["id"]: r["v"] for r in client.read(name, at=stamps[i]).to_pylist()}
    after = {r["id"]: r["v"] for r in client.read(name, at=stamps[j]).to_pylist()}
    info = client.describe_table(name)
    changes = client.store.scan_changes(name, stamps[i], stamps[j])
    got = {}
    for c in changes:
        k = info.key_codec.decode(c.key)[0]
        old = None if c.old is None else info.row_codec.decode(c.old)["v"]
        new = None if c.new is None else info.row_codec.decode(c.new)["v"]
        got[k] = (old, new)
    expected = {
        k: (before.get(k), after.get(k))
        for k in set(before) | set(after)
        if before.get(k) != after.get(k)
    }
    assert got == expected
    client.drop_table(name)


def test_spark_change_read_equals_snapshot_diff(spark, server, client, accounts):
    """Through Spark: post-images and deletes of the change read turn the old snapshot into
    the new one."""
    table, t0 = accounts
    with client.transaction() as t:
        for i in range(0, 1000, 7):
            t.put(table, {"id": i, "name": "u", "bal": -i})
        for i in range(3, 1000, 11):
            t.delete(table, {"id": i})
        t.put(table, {"id": 2000, "name": "i", "bal": 1})
    t1 = t.commit_ts
    old = {
        r.id: (r.name, r.bal)
        for r in snapview_reader(spark, server.address, table, at=t0).collect()
    }
    new = {
        r.id: (r.name, r.bal)
        for r in snapview_reader(spark, server.address, table, at=t1).collect()
    }
    applied = dict(old)
    for r in snapview_reader(
        spark, server.address, table, changes_from=t0, changes_to=t1
    ).collect():
        if r._change_type == "delete":
            applied.pop(r.id)
        elif r._change_type in ("insert", "update_postimage"):
            applied[r.id] = (r.name, r.bal)
    assert applied == new
