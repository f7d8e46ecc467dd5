"""Reads and prewrites over a real ``snapview serve`` that meet the locks of a large committed
transaction whose secondaries are not resolved yet: they resolve the locks in their way and
answer at once, never waiting for the whole transaction (a keyed read right after a view's
first build at TPC-H SF 1 met 13.3M such locks and ran past its 60 s deadline)."""

from __future__ import annotations

import coordinator
from kvstore.mvcc.records import LockOp
from snapview.embedded import EmbeddedServer
from tests.conftest import client_fixture, server_fixture, wait_for

ROWS = 20_000
SCHEMA = "id BIGINT, v STRING"

# The planted fault: a committed epoch's owner never queues its secondaries (as if it had not
# reached them yet), so they stay locked until a restart's recovery.
slow_owner = server_fixture(
    "slow_owner", "--no-sync", env={"SNAPVIEW_FAILPOINTS": "epoch.secondaries.left=on"}
)
c = client_fixture("slow_owner")


def _muts(info, ids, tag: str):
    return [
        (LockOp.PUT, info.key_codec.encode({"id": i}), info.row_codec.encode({"id": i, "v": tag}))
        for i in ids
    ]


def _prewrite_all(client, muts, primary: bytes, start_ts: int) -> None:
    """Prewrite ``muts`` under ``primary`` at ``start_ts``, 4,096 at a time (one request's cap)."""
    for i in range(0, len(muts), 4096):
        client.store.prewrite(muts[i : i + 4096], primary, start_ts)


def _dead_load(client, table: str, commit: bool) -> int:
    """A new ``table`` loaded with ROWS rows in one transaction by a client that then goes away:
    its primary committed (``commit``) or not, every other key left locked. Its start_ts."""
    client.create_table(table, SCHEMA, ["id"])
    start_ts = client.tso()
    muts = _muts(client.describe_table(table), range(ROWS), table)
    primary = muts[0][1]
    _prewrite_all(client, muts, primary, start_ts)
    if commit:
        client.store.commit(start_ts, client.tso(), [primary])
    assert client.resolved_ts(table) < start_ts
    return start_ts


def _keys_read(client, info, ids, at):
    ranges = [(k, k + b"\0") for k in (info.key_codec.encode({"id": i}) for i in ids)]
    got = client.with_lock_wait(lambda: list(client.store.scan_ranges(ranges, at)))
    return [info.row_codec.decode(v)["id"] for _, vs in got for v in vs]


def test_reads_of_a_committed_epoch_left_locked_resolve_only_their_keys(c):
    c.create_table("loaded", SCHEMA, ["id"])
    info = c.describe_table("loaded")
    e = c.jobs.open_transaction("loader", 1)
    _prewrite_all(c, _muts(info, range(ROWS), "e1"), e.primary_key, e.start_ts)
    done = c.jobs.commit_transaction("loader", 1, e.start_ts)
    # Its secondaries are all still locked: the table's history is not final past start_ts.
    assert c.resolved_ts("loaded") < e.start_ts
    # A client that never saw the load reads 200 keys at once, twice.
    with coordinator.connect(c.address, lock_wait_s=5) as other:
        ids = list(range(3, ROWS, ROWS // 200))
        assert _keys_read(other, info, ids, other.tso()) == ids
        assert _keys_read(other, info, ids, other.tso()) == ids
        assert _keys_read(other, info, ids, done.commit_ts - 1) == []
    # Only those were resolved: the epoch's other locks wait for their owner (an epoch's
    # transaction is the server's, so no finisher takes it either).
    assert c.resolved_ts("loaded") < e.start_ts
    # A scan of the whole table, chunk by chunk, still sees every row once.
    assert sorted(c.read("loaded", at=done.commit_ts)["id"].to_pylist()) == list(range(ROWS))


def test_a_prewrite_and_a_read_over_a_dead_clients_load(c):
    """A client loaded rows in one transaction, committed its primary and was gone. Another
    client's prewrite over 50 of its keys resolves those 50 (``ResolveLocks`` with keys) and
    commits; a read of a key resolves it; the server finishes the rest in the background, so
    the table's resolved_ts moves past the load."""
    start_ts = _dead_load(c, "orphaned", commit=True)
    info = c.describe_table("orphaned")
    with coordinator.connect(c.address, lock_wait_s=5) as other:
        t2 = other.tso()
        mine = _muts(info, range(500, 550), "mine")
        other.prewrite(mine, mine[0][1], t2)
        other.store.commit(t2, other.tso(), [k for _, k, _ in mine])
        assert other.get("orphaned", {"id": 510})["v"] == "mine"
        assert other.get("orphaned", {"id": 9_999})["v"] == "orphaned"  # the dead client's value
    wait_for(lambda: c.resolved_ts("orphaned") > start_ts, 60, "the load to be finished")
    rows = c.read("orphaned").to_pylist()
    assert len(rows) == ROWS
    assert sorted(r["id"] for r in rows if r["v"] == "mine") == list(range(500, 550))


def test_a_dead_clients_loads_are_finished_after_a_kill_9_of_the_server(tmp_path):
    """Two clients each loaded rows in one transaction and were gone: one had committed its
    primary, the other had not. The server is killed (kill -9: whatever its finisher had queued
    is lost) and restarted on the same data dir. Nobody reads the loaded keys, yet each table's
    resolved_ts moves past its load (the stale-lock check of resolved_ts finds both through
    their primaries): the committed load is there in full, the other is rolled back."""
    srv = EmbeddedServer(str(tmp_path / "d"), extra_args=["--no-sync"]).start()
    try:
        with coordinator.connect(srv.address) as dead:
            loads = {t: _dead_load(dead, t, commit=t == "kept") for t in ("kept", "dropped")}
        srv.kill()
        srv.start()
        with coordinator.connect(srv.address, lock_wait_s=5) as c:
            settled = lambda: all(c.resolved_ts(t) > ts for t, ts in loads.items())  # noqa: E731
            wait_for(settled, 60, "both loads settled")
            assert sorted(c.read("kept")["id"].to_pylist()) == list(range(ROWS))
            assert c.read("dropped").num_rows == 0
    finally:
        srv.stop()
