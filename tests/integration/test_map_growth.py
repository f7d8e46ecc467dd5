"""The LMDB map grows under concurrent readers without a deadlock (issue 24 item 3).

Growing the map waits until no read transaction is open; a reader that opened a second read
transaction inside its first one used to wait for the growth, which waited for it: the server
stopped answering for good. A real ``snapview serve`` on a 1 MiB map grows it five times while
threads plan barriers and consistent snapshots over two roots and a view; every call is answered.
"""

from __future__ import annotations

import threading
import time

import coordinator
from kvstore.remote import RetryPolicy
from tests.conftest import server_fixture, wait_for

SCHEMA = "id BIGINT, v STRING"
CALL_S = 10.0  # an answered call takes milliseconds; a deadlocked one never returns


def put(c: coordinator.Client, table: str, rows: list[dict]) -> None:
    with c.transaction() as t:
        for row in rows:
            t.put(table, row)


small = server_fixture("d", "--map-size-mb", "1", "--barrier-interval", "20ms", scope="function")


def test_map_grows_under_barrier_planning_and_snapshots(small):
    policy = RetryPolicy(max_attempts=1, rpc_timeout_s=CALL_S)
    with coordinator.connect(small.address, retry=policy) as c:
        for t in ("r1", "r2"):
            c.create_table(t, SCHEMA, primary_key=["id"])
            put(c, t, [{"id": 0, "v": "x"}])
        c.create_table("v", SCHEMA, primary_key=["id"], kind="view")
        c.jobs.register_job("vj", "v", ["r1", "r2"], kind="view", query="select ...")
        first = c.snapshot(["r1", "r2"], wait_s=5).barrier
        e = c.jobs.open_transaction("vj", first)
        c.jobs.commit_transaction("vj", first, e.start_ts)
        # Barriers pile up after the job's epoch: each plan walks them, asking each source for
        # its resolved ts and its changes (nested reads before the fix).
        wait_for(lambda: len(c.jobs.plan_barriers("vj").barriers) >= 50, 10, "50 barriers")
        map_size = c.status().map_size_bytes
        stop = threading.Event()
        errors: list[BaseException] = []
        calls = [0]

        def reader(i: int) -> None:
            try:
                with coordinator.connect(small.address, retry=policy) as rc:
                    while not stop.is_set():
                        if i % 2:
                            rc.jobs.plan_barriers("vj")
                        else:
                            rc.snapshot(["r1", "r2", "v"])
                        calls[0] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(6)]
        for th in threads:
            th.start()
        try:
            big = "y" * 4000
            started = time.monotonic()
            for n in range(8):  # about 32 MiB of rows: the 1 MiB map doubles five times
                put(c, "r1", [{"id": 1000 * n + i, "v": big} for i in range(1000)])
                assert not errors, errors
            assert c.status().map_size_bytes >= 32 * map_size
        finally:
            stop.set()
            for th in threads:
                th.join(2 * CALL_S)
        assert not any(th.is_alive() for th in threads), "a reader never got its answer"
        assert not errors, errors
        assert calls[0] > 0 and time.monotonic() - started < 60
        assert len(c.jobs.plan_barriers("vj").barriers) > 0


def test_a_direct_reader_opened_after_the_map_grew_adopts_its_size(small, monkeypatch):
    """A view driver learns the server's map size when its job is built and opens the LMDB
    environment at its first delta epoch, after the server may have grown the map (a first build
    writes the view and its state), even while it opens: opening with the stale size must adopt
    the grown one, not fail with MDB_MAP_RESIZED (it did, at the first epoch of a view over
    300,000 rows, the server growing the map between LMDB's open and the first transaction;
    planted here: the first transaction is refused once)."""
    import lmdb

    from kvstore.storage import Storage
    from spark_sink.partition_writer import close_direct, direct_info, direct_reader

    real_open_cf = Storage._open_cf
    refused: list[str] = []

    def open_cf(self, name, readonly):
        if not refused:
            refused.append(name)
            raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED (planted)")
        return real_open_cf(self, name, readonly)

    monkeypatch.setattr(Storage, "_open_cf", open_cf)

    with coordinator.connect(small.address) as c:
        info = direct_info(c)
        assert info is not None and info[3] == 1 << 20  # the 1 MiB map the server started on
        c.create_table("grown", SCHEMA, primary_key=["id"])
        for i in range(0, 6000, 500):
            put(c, "grown", [{"id": j, "v": "x" * 1000} for j in range(i, i + 500)])
        assert c.status().map_size_bytes > info[3]  # the server grew it
        try:
            reader = direct_reader(info)  # opened with the size of before
            assert reader is not None and refused
            t = c.describe_table("grown")
            ts = c.tso()
            c.get("grown", {"id": 0})  # a read the server answers at a later ts: settled
            reader.settle(ts)
            rows = reader.scan_ranges([(t.prefix, t.prefix + b"\xff")], ts)
            assert len(rows) == 6000
        finally:
            close_direct()
