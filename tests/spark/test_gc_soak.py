"""GC with Spark: the source's reader leases, and a bounded soak run.

The soak: steady updates to a fixed set of keys, a view maintained incrementally, a short
retention, and readers that hold leased snapshots older than the retention. The data directory
must stop growing (its size at the end within 25% of its size after 20 s, 10% of its size after
the first third of a run of two minutes or more: tests/settled.py says why), every
leased snapshot must read the same rows at its end as at its start, and an unleased read below
the safepoint must fail with SnapshotTooOld. ``make test`` runs it for 45 s; ``make soak``
for 5 minutes (SNAPVIEW_SOAK_S).
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

import coordinator
from kvstore.errors import SnapshotTooOld
from spark_sink import MaterializedView
from tests.conftest import client_fixture, server_fixture, snapview_reader, wait_for
from tests.settled import settled_failure

SOAK_S = float(os.environ.get("SNAPVIEW_SOAK_S", "45"))
RETENTION_S = 4.0
KEYS = 400


soak_server = server_fixture(
    "soak",
    "--barrier-interval",
    "250ms",
    "--retention",
    f"{RETENTION_S}s",
    "--gc-interval",
    "500ms",
)
sc = client_fixture("soak_server")


def dir_bytes(path: str) -> int:
    """Bytes allocated on disk under ``path`` (as du counts them)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def test_a_batch_read_with_leaseSeconds_holds_its_snapshot(spark, soak_server, sc):
    """leaseSeconds on a batch read: the driver leases the read's timestamp when it plans the
    read, so a read planned before the retention passed still reads its snapshot after."""
    sc.create_table("leased", "id BIGINT, v BIGINT", primary_key=["id"])
    with sc.transaction() as t:
        for i in range(10):
            t.put("leased", {"id": i, "v": 1})
    # Warm the Python workers (the first read of a session takes seconds, longer than this
    # server's 4 s retention: without a lease, GC would pass its timestamp mid-read).
    snapview_reader(spark, soak_server.address, "leased", leaseSeconds=30).collect()
    ts = sc.tso()
    df = snapview_reader(spark, soak_server.address, "leased", at=ts, leaseSeconds=30)
    rows = sorted(tuple(r) for r in df.collect())
    assert rows == [(i, 1) for i in range(10)]
    lease = next(x for x in sc.gc_status().leases if x.ts == ts)  # the warm-up's is older
    assert lease.holder == "spark read of leased" and lease.ttl_ms == 30_000
    with sc.transaction() as t:
        for i in range(10):
            t.put("leased", {"id": i, "v": 2})
    wait_for(
        lambda: any(h.kind == "retention" and h.ts > ts for h in sc.gc_status().holds),
        3 * RETENTION_S,
        "the retention to pass the read's timestamp",
    )
    assert sc.gc_status().safepoint <= ts
    assert sorted(tuple(r) for r in df.collect()) == rows  # a second execution renews it
    assert sc.release_lease(lease.id)
    for x in sc.gc_status().leases:  # the warm-up read's
        sc.release_lease(x.id)
    # Without a lease the same read is refused once GC passes it: a clear error, no rows.
    wait_for(lambda: sc.gc_status().safepoint > ts, 10, "the safepoint to pass the read")
    with pytest.raises(Exception, match="SnapshotTooOld|older than the GC safepoint"):
        snapview_reader(spark, soak_server.address, "leased", at=ts).collect()


def test_a_change_feed_stream_holds_a_lease_on_its_offset(spark, soak_server, sc, tmp_path):
    """A change-feed stream leases its committed offset and moves the lease as it commits;
    after the query stops, the lease lapses one TTL later (leaseSeconds=3 here)."""
    sc.create_table("fed", "id BIGINT, v BIGINT", primary_key=["id"])
    with sc.transaction() as t:
        t.put("fed", {"id": 1, "v": 1})
    got: list = []
    q = (
        spark.readStream.format("snapview")
        .option("coordinator", soak_server.address)
        .option("table", "fed")
        .option("readChangeFeed", "true")
        .option("leaseSeconds", 3)
        .load()
        .writeStream.foreachBatch(lambda df, _: got.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        q.processAllAvailable()
        first = [x for x in sc.gc_status().leases if x.holder == "change feed of fed"]
        assert len(first) == 1

        # Spark commits a batch's offsets when it starts the next batch: feed it until the
        # lease follows (one commit per round).
        def moved():
            with sc.transaction() as t:
                t.put("fed", {"id": len(got) + 10, "v": 2})
            q.processAllAvailable()
            now = [x for x in sc.gc_status().leases if x.holder == "change feed of fed"]
            return len(now) == 1 and now[0].ts > first[0].ts and now

        now = wait_for(moved, 60, "the stream's lease to move with its offsets")
        assert now[0].id == first[0].id
    finally:
        q.stop()
    wait_for(
        lambda: not [x for x in sc.gc_status().leases if x.holder == "change feed of fed"],
        20,
        "the stopped stream to release its lease",
    )


def test_soak_the_data_dir_stops_growing(spark, soak_server, sc):
    sc.create_table("soak", "id BIGINT, g INT, v BIGINT, pad STRING", primary_key=["id"])
    with sc.transaction() as t:
        for i in range(KEYS):
            t.put("soak", {"id": i, "g": i % 20, "v": 0, "pad": "x" * 150})
    job = (
        MaterializedView.builder(spark)
        .coordinator(soak_server.address)
        .query("SELECT g, COUNT(*) AS n, SUM(v) AS total FROM soak GROUP BY g")
        .target("soak_by_g")
        .primary_key("g")
        .trigger_interval("250 milliseconds")
        .strategy("incremental")
        .build()
        .start()
    )
    stop = threading.Event()
    errors: list[BaseException] = []
    leased_checks: list[int] = []

    def writer() -> None:
        rnd = random.Random(7)
        with coordinator.connect(soak_server.address) as w:
            while not stop.is_set():
                try:
                    with w.transaction() as t:
                        for _ in range(5):
                            i = rnd.randrange(KEYS)
                            t.put(
                                "soak",
                                {"id": i, "g": i % 20, "v": rnd.randrange(1000), "pad": "y" * 150},
                            )
                except coordinator.WriteConflict:
                    pass
                except BaseException as e:  # noqa: BLE001 - reported by the test
                    errors.append(e)
                    return
                stop.wait(0.02)  # a steady ~40 commits per second

    def leased_reader() -> None:
        """Lease a snapshot of the source and the view, read it again 1.5 retentions later
        (collected by then without the lease), check it did not change; again a second later."""
        with coordinator.connect(soak_server.address) as r:
            while not stop.is_set():
                try:
                    with r.snapshot(["soak", "soak_by_g"], wait_s=10, lease_s=5) as snap:
                        first = (snap.read("soak"), snap.read("soak_by_g"))
                        if stop.wait(1.5 * RETENTION_S):
                            return
                        assert (snap.read("soak"), snap.read("soak_by_g")) == first
                        leased_checks.append(snap.barrier)
                except BaseException as e:  # noqa: BLE001 - reported by the test
                    errors.append(e)
                    return
                stop.wait(1.0)

    threads = [threading.Thread(target=writer), threading.Thread(target=leased_reader)]
    for th in threads:
        th.start()
    sizes: list[tuple[float, int, int]] = []
    data_dir = soak_server.data_dir
    t0 = time.monotonic()
    old_ts = sc.tso()
    try:
        while time.monotonic() - t0 < SOAK_S and not errors:
            time.sleep(2.0)  # the sampling period of the size
            sizes.append((time.monotonic() - t0, dir_bytes(data_dir), sc.status().used_bytes))
    finally:
        stop.set()
        for th in threads:
            th.join(60)
    assert not errors, errors
    # A view equal to its query at its newest barrier, maintained all along.
    snap = sc.snapshot(["soak", "soak_by_g"], wait_s=30)
    src = snap.read("soak").to_pylist()
    expect: dict[int, tuple[int, int]] = {}
    for r in src:
        n, s = expect.get(r["g"], (0, 0))
        expect[r["g"]] = (n + 1, s + r["v"])
    assert {r["g"]: (r["n"], r["total"]) for r in snap.read("soak_by_g").to_pylist()} == expect
    job.stop()
    # Each check holds its snapshot 1.5 retentions (6 s), then waits 1 s.
    assert len(leased_checks) >= max(1, int(SOAK_S // 10)), leased_checks
    # Unleased, a read that old is refused.
    with pytest.raises(SnapshotTooOld):
        sc.read("soak", at=old_ts)
    st = sc.gc_status()
    assert st.progress.versions_removed > 1000
    # The size settles once the longest hold (a leased snapshot, 6 s, on top of the 4 s
    # retention) has been through a whole cycle; the slack and why: tests/settled.py.
    end = sizes[-1]
    print(
        f"\nsoak {SOAK_S:g}s: data dir {end[1] / 1e6:.2f} MB at {end[0]:.0f}s; "
        f"LMDB used {end[2] / 1e6:.2f} MB; {st.progress.versions_removed} versions collected"
    )
    failure = settled_failure(sizes, SOAK_S)
    assert failure is None, failure
