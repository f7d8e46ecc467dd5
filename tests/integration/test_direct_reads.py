"""Direct reads of the server's LMDB environment from another process (kvstore.direct_reads),
against the same reads answered by a real ``snapview serve`` over gRPC: the same rows and
change records, and every read that needs the server handed back (an unsettled ts, a lock in
the way, a ts below the GC safepoint)."""

from __future__ import annotations

import pytest

from kvstore.direct import DirectPrewriter, DirectUnavailable
from kvstore.direct_reads import DirectReader
from kvstore.errors import KeyIsLocked
from kvstore.mvcc.keys import KeyCodec
from kvstore.mvcc.records import LockOp
from spark_source.key_ranges import after
from tests.conftest import connected, server_fixture

# No retention, so a test may move the safepoint itself; no GC ticks of the server's own.
direct_reads_server = server_fixture("direct_reads", "--retention", "0s", "--gc-interval", "1h")


@pytest.fixture(scope="module")
def env(direct_reads_server):
    for c in connected(direct_reads_server):
        st = c.status()
        prewriter = DirectPrewriter(st.lmdb_path, st.map_size_bytes)  # one open per process
        try:
            yield c, DirectReader(prewriter.storage)
        finally:
            prewriter.close()


def _load(c, table: str):
    info = c.create_table(table, "id BIGINT, g INT, v STRING", primary_key=["id"])
    with c.transaction() as t:
        for i in range(300):
            t.put(table, {"id": i, "g": i % 7, "v": "x" * (i % 5) * 40})
    first = c.tso()
    with c.transaction() as t:
        for i in range(0, 300, 4):
            t.delete(table, {"id": i})
        for i in range(1, 300, 4):
            t.put(table, {"id": i, "g": -1, "v": "changed"})
        for i in range(300, 320):
            t.put(table, {"id": i, "g": 3, "v": "new"})
    return info, first, c.tso()


def _remote_values(c, ranges, ts, range_limit=0):
    return [v for _, vs in c.store.scan_ranges(ranges, ts, range_limit=range_limit) for v in vs]


def test_direct_reads_equal_the_servers_once_settled(env):
    c, reader = env
    info, first, last = _load(c, "dr_equal")
    keys = sorted(info.key_codec.encode({"id": i}) for i in range(0, 330, 3))
    points = [(k, after(k)) for k in keys]
    whole = [(info.prefix, KeyCodec.prefix_end(info.prefix))]
    with pytest.raises(DirectUnavailable, match="settled"):
        reader.scan_ranges(points, last)  # no read answered by the server at ``last`` yet
    with pytest.raises(DirectUnavailable, match="settled"):
        reader.scan_changes(info.id, first, last)
    c.store.get(info.prefix + b"\xff" * 9, last)  # answered at ``last``: every commit landed
    reader.settle(last)
    for ts in (first, last):
        assert reader.scan_ranges(points, ts) == _remote_values(c, points, ts)
        assert reader.scan_ranges(whole, ts) == _remote_values(c, whole, ts)
        assert reader.scan_ranges(whole, ts, range_limit=5) == _remote_values(c, whole, ts, 5)
    for most in (1, 10, 100, 10_000):
        assert reader.change_boundary(info.id, first, last, most) == c.store.change_boundary(
            "dr_equal", first, last, most
        )
    got = reader.scan_changes(info.id, first, last)
    want = c.store.scan_changes("dr_equal", first, last)
    assert [(r.key, r.old, r.new) for r in got] == [(r.key, r.old, r.new) for r in want]
    assert len(got) == 75 + 75 + 20


def test_a_lock_in_the_way_is_raised_for_the_server_to_resolve(env):
    c, reader = env
    info, first, _ = _load(c, "dr_locked")
    k = info.key_codec.encode({"id": 5})
    locked_at = c.tso()
    c.store.prewrite([(LockOp.PUT, k, info.row_codec.encode({"id": 5}))], k, locked_at, 60_000)
    ts = c.tso()
    c.store.get(info.prefix + b"\xff" * 9, ts)
    reader.settle(ts)
    with pytest.raises(KeyIsLocked):
        reader.scan_ranges([(k, after(k))], ts)
    with pytest.raises(KeyIsLocked):
        reader.scan_changes(info.id, first, ts)
    # below the lock's start_ts the lock is not in the way
    assert reader.scan_ranges([(k, after(k))], locked_at - 1) == _remote_values(
        c, [(k, after(k))], locked_at - 1
    )
    c.store.rollback(locked_at, [k])
    assert len(reader.scan_changes(info.id, first, ts)) == len(
        c.store.scan_changes("dr_locked", first, ts)
    )


def test_a_read_below_the_gc_safepoint_is_handed_back(env):
    c, reader = env
    info, first, last = _load(c, "dr_gc")
    now = c.tso()
    c.store.get(info.prefix + b"\xff" * 9, now)
    reader.settle(now)
    c.store.gc(last)
    whole = [(info.prefix, KeyCodec.prefix_end(info.prefix))]
    with pytest.raises(DirectUnavailable, match="safepoint"):
        reader.scan_ranges(whole, first)
    with pytest.raises(DirectUnavailable, match="safepoint"):
        reader.scan_changes(info.id, first, last)
    with pytest.raises(DirectUnavailable, match="safepoint"):
        reader.change_boundary(info.id, first, last, 10)
    assert reader.scan_ranges(whole, now) == _remote_values(c, whole, now)


def test_a_closed_environment_hands_the_read_back(tmp_path):
    """A reader whose environment was closed under it (its server restarted and the prewriter
    that opened it was closed) hands every read back instead of failing the epoch."""
    from kvstore.storage import Storage

    storage = Storage(str(tmp_path / "lmdb"), sync=False)
    reader = DirectReader(storage)
    reader.settle(100)
    key = b"\x00\x00\x00\x09" + b"\x01" * 8
    assert reader.scan_ranges([(key, after(key))], 50) == []
    storage.close()
    with pytest.raises(DirectUnavailable, match="the server reads it"):
        reader.scan_ranges([(key, after(key))], 50)
    with pytest.raises(DirectUnavailable, match="the server reads it"):
        reader.scan_changes(9, 10, 50)
