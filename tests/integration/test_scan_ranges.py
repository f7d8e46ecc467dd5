"""ScanRanges over a real ``snapview serve``: many keys or key prefixes of one table at one
version in one request (incremental view maintenance reads 1,000 keys this way, not 1,000 Gets)."""

from __future__ import annotations

import threading

import grpc
import pytest

from kvstore import limits
from kvstore.errors import InvalidArgument, KeyIsLocked, RequestTooLarge
from kvstore.mvcc.records import LockOp
from snapview_proto.snapview.v1 import kvstore_pb2 as kpb


def point(key: bytes) -> tuple[bytes, bytes]:
    return key, key + b"\0"


def pairs(store, ranges, version, limit=0) -> list[tuple[bytes, bytes]]:
    return [
        (k, v)
        for keys, values in store.scan_ranges(ranges, version, limit)
        for k, v in zip(keys, values, strict=True)
    ]


@pytest.fixture
def idx(client, table_name):
    """A composite-key table (a secondary index's shape): 20 values of ``a``, 5 rows each."""
    client.create_table(table_name, "a BIGINT, b BIGINT, v STRING", primary_key=["a", "b"])
    with client.transaction() as t:
        for a in range(20):
            for b in range(5):
                t.put(table_name, {"a": a, "b": b, "v": f"{a}.{b}"})
    return client.describe_table(table_name)


def prefix(info, a: int) -> bytes:
    return info.key_codec.encode({"a": a, "b": 0})[:12]  # table id + a


def values(info, rows) -> list[str]:
    return [info.row_codec.decode(v)["v"] for _, v in rows]


def test_points_present_and_absent(client, idx):
    keys = [idx.key_codec.encode({"a": a, "b": b}) for a, b in [(3, 1), (99, 0), (0, 4), (3, 9)]]
    got = pairs(client.store, [point(k) for k in keys], client.tso())
    assert values(idx, got) == ["3.1", "0.4"]


def test_prefix_ranges_over_a_composite_key(client, idx):
    ranges = [(prefix(idx, a), prefix(idx, a + 1)) for a in (2, 7, 50)]
    got = pairs(client.store, ranges, client.tso())
    assert values(idx, got) == [f"{a}.{b}" for a in (2, 7) for b in range(5)]
    assert values(idx, pairs(client.store, ranges, client.tso(), limit=7)) == values(idx, got)[:7]
    firsts = [
        idx.row_codec.decode(v)["v"]
        for _, vs in client.store.scan_ranges(ranges, client.tso(), range_limit=2)
        for v in vs
    ]
    assert firsts == ["2.0", "2.1", "7.0", "7.1"]  # the first two keys of each range


def test_versions(client, idx):
    """An update after the version is not seen; a key deleted at or below it is absent."""
    before = client.tso()
    with client.transaction() as t:
        t.put(idx.name, {"a": 1, "b": 0, "v": "new"})
        t.delete(idx.name, {"a": 1, "b": 1})
    after = client.tso()
    ranges = [point(idx.key_codec.encode({"a": 1, "b": b})) for b in (0, 1)]
    assert values(idx, pairs(client.store, ranges, before)) == ["1.0", "1.1"]
    assert values(idx, pairs(client.store, ranges, after)) == ["new"]


def test_a_lock_below_the_version_is_waited_for_like_scan(server, client, idx):
    """An uncommitted prewrite below the read version: KeyIsLocked while it lives (the client's
    lock wait retries it), and once it commits the same read sees the new value."""
    k = idx.key_codec.encode({"a": 5, "b": 0})
    start = client.tso()
    client.store.prewrite(
        [(LockOp.PUT, k, idx.row_codec.encode({"a": 5, "b": 0, "v": "locked"}))],
        k,
        start,
        ttl_ms=20_000,
    )
    version = client.tso()
    ranges = [(prefix(idx, 5), prefix(idx, 6))]
    with pytest.raises(KeyIsLocked) as e:
        pairs(client.store, ranges, version)
    assert e.value.start_ts == start
    commit_ts = client.tso()
    committer = threading.Timer(0.3, lambda: client.store.commit(start, commit_ts, [k]))
    committer.start()
    try:
        got = client.with_lock_wait(lambda: pairs(client.store, ranges, version))
    finally:
        committer.join()
    assert values(idx, got) == ["5.0", "5.1", "5.2", "5.3", "5.4"]  # committed above version
    assert values(idx, pairs(client.store, ranges, client.tso()))[0] == "locked"


def test_ranges_in_two_tables_are_invalid_argument_naming_it(server, client, idx, table_name):
    other = client.create_table(table_name + "_o", "k BIGINT", primary_key=["k"])
    ranges = [
        point(idx.key_codec.encode({"a": 1, "b": 1})),
        point(other.key_codec.encode({"k": 1})),
    ]
    with pytest.raises(InvalidArgument, match="range 1 .*one table"):
        pairs(client.store, ranges, client.tso())
    # The server refuses it too (a client that does not check first).
    req = kpb.ScanRangesRequest(
        ranges=[kpb.KeyRange(start_key=s, end_key=e) for s, e in ranges], version=client.tso()
    )
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as err:
            list(ch.unary_stream("/snapview.v1.KvStore/ScanRanges")(req.SerializeToString()))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "one table" in err.value.details()


def test_too_many_ranges_are_refused_by_the_server(server, client, idx):
    n = limits.MAX_SCAN_RANGES + 1
    k = idx.key_codec.encode({"a": 1, "b": 1})
    req = kpb.ScanRangesRequest(
        ranges=[kpb.KeyRange(start_key=k, end_key=k + b"\0")] * n, version=client.tso()
    )
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as err:
            list(ch.unary_stream("/snapview.v1.KvStore/ScanRanges")(req.SerializeToString()))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{n} ranges" in err.value.details()
    assert f"the limit is {limits.MAX_SCAN_RANGES}" in err.value.details()
    assert RequestTooLarge.__name__ in dict(err.value.trailing_metadata())["snapview-error-class"]


def test_the_client_splits_a_long_list(client, idx, monkeypatch):
    """Above the request limit RemoteStore sends several requests; the answer is the same."""
    ranges = [(prefix(idx, a), prefix(idx, a + 1)) for a in range(20)]
    version = client.tso()
    whole = pairs(client.store, ranges, version)
    monkeypatch.setattr(limits, "MAX_SCAN_RANGES", 3)
    assert pairs(client.store, ranges, version) == whole and len(whole) == 100
    assert pairs(client.store, ranges, version, limit=17) == whole[:17]


def test_an_empty_list_returns_nothing(client, idx):
    assert list(client.store.scan_ranges([], client.tso())) == []
