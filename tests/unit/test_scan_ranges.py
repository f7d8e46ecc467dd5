"""LocalStore.scan_ranges: many key ranges of one table at one version, in one call, read exactly
as scan reads each range."""

from __future__ import annotations

import pytest

from kvstore.errors import InvalidArgument, KeyIsLocked, RequestTooLarge, TableNotFound
from kvstore.limits import MAX_SCAN_RANGES, split_ranges
from kvstore.mvcc import LockOp
from kvstore.mvcc.keys import table_prefix
from kvstore.testing import Kv, must_err


@pytest.fixture
def kv(store) -> Kv:
    return Kv(store)


@pytest.fixture
def ts(clock):
    run = [clock() for _ in range(32)]
    return lambda n: run[n]


def point(key: bytes) -> tuple[bytes, bytes]:
    return key, key + b"\0"


def read(store, ranges, version, limit=0) -> list[tuple[bytes, bytes]]:
    return [
        (k, v)
        for keys, values in store.scan_ranges(ranges, version, limit)
        for k, v in zip(keys, values, strict=True)
    ]


def put_many(kv: Kv, ks: list[int], v: str = "v") -> None:
    start = kv.store.clock()
    muts = [(LockOp.PUT, kv.key(k), kv.row(k, f"{v}{k}")) for k in ks]
    kv.store.prewrite(muts, muts[0][1], start)
    kv.store.commit(start, kv.store.clock(), [m[1] for m in muts])


def test_points_present_and_absent_in_the_order_given(kv):
    put_many(kv, [1, 2, 3, 5])
    rows = read(kv.store, [point(kv.key(5)), point(kv.key(4)), point(kv.key(1))], kv.store.clock())
    assert [(k, kv.value_of(v)) for k, v in rows] == [(kv.key(5), "v5"), (kv.key(1), "v1")]


def test_point_range_ending_at_key_plus_zero_byte_works_for_scan_too(kv):
    """[key, key + 0x00) is that key alone: the end is compared with user keys, not versioned."""
    put_many(kv, [7, 8])
    got = [k for ks, _ in kv.store.scan(*point(kv.key(7)), kv.store.clock()) for k in ks]
    assert got == [kv.key(7)]


def test_prefix_ranges_over_a_composite_key(store):
    info = store.create_table("idx", "a BIGINT, b BIGINT, v STRING", ["a", "b"])
    rows = [{"a": a, "b": b, "v": f"{a}.{b}"} for a in range(5) for b in range(3)]
    start = store.clock()
    muts = [(LockOp.PUT, info.key_codec.encode(r), info.row_codec.encode(r)) for r in rows]
    store.prewrite(muts, muts[0][1], start)
    store.commit(start, store.clock(), [m[1] for m in muts])

    def prefix(a: int) -> bytes:
        return info.key_codec.encode({"a": a, "b": 0})[:12]  # table id + a

    ranges = [(prefix(a), prefix(a + 1)) for a in (1, 3, 9)]
    got = [info.row_codec.decode(v)["v"] for _, v in read(store, ranges, store.clock())]
    assert got == ["1.0", "1.1", "1.2", "3.0", "3.1", "3.2"]


def test_range_limit_reads_the_first_keys_of_every_range(store, monkeypatch):
    """range_limit=k: the k smallest keys of each prefix, for many prefixes in one call, never
    a range split between read transactions (chunks smaller than the ranges' total)."""
    import kvstore.store as store_mod

    info = store.create_table("rl", "a BIGINT, b BIGINT, v STRING", ["a", "b"])
    rows = [{"a": a, "b": b, "v": f"{a}.{b}"} for a in range(40) for b in range(9, -1, -1)]
    start = store.clock()
    muts = [(LockOp.PUT, info.key_codec.encode(r), info.row_codec.encode(r)) for r in rows]
    store.prewrite(muts, muts[0][1], start)
    store.commit(start, store.clock(), [m[1] for m in muts])

    def prefix(a: int) -> bytes:
        return info.key_codec.encode({"a": a, "b": 0})[:12]

    monkeypatch.setattr(store_mod, "SCAN_CHUNK_ROWS", 5)  # 3 ranges of 2 fit in no chunk
    ranges = [(prefix(a), prefix(a + 1)) for a in range(0, 40, 3)]
    chunks = list(store.scan_ranges(ranges, store.clock(), range_limit=2))
    got = [info.row_codec.decode(v)["v"] for _, vs in chunks for v in vs]
    assert got == [f"{a}.{b}" for a in range(0, 40, 3) for b in (0, 1)]
    assert all(len(vs) % 2 == 0 for _, vs in chunks)  # whole ranges per chunk
    with pytest.raises(InvalidArgument, match="range_limit 6 is outside"):
        store.scan_ranges(ranges, store.clock(), range_limit=6)


def test_versions_updates_after_version_unseen_deletes_absent(kv, ts):
    kv.must_put(1, "old", ts(1), ts(2))
    kv.must_put(2, "gone", ts(1), ts(2))
    kv.must_put(1, "new", ts(5), ts(6))
    kv.must_prewrite_delete(2, 2, ts(3))
    kv.must_commit(2, ts(3), ts(4))
    ranges = [point(kv.key(1)), point(kv.key(2))]
    assert [kv.value_of(v) for _, v in read(kv.store, ranges, ts(2))] == ["old", "gone"]
    assert [kv.value_of(v) for _, v in read(kv.store, ranges, ts(4))] == ["old"]
    assert [kv.value_of(v) for _, v in read(kv.store, ranges, ts(7))] == ["new"]


def test_lock_of_a_committed_txn_is_resolved_and_a_live_one_raises(kv, ts):
    kv.must_prewrite_put(1, "p", 1, ts(1))
    kv.must_prewrite_put(2, "s", 1, ts(1))
    kv.must_commit(1, ts(1), ts(2))  # the primary only
    kv.must_locked(2, ts(1))
    assert [kv.value_of(v) for _, v in read(kv.store, [point(kv.key(2))], ts(3))] == ["s"]
    kv.must_unlocked(2)

    kv.must_prewrite_put(3, "live", 3, ts(4), ttl_ms=60_000)
    must_err(KeyIsLocked, read, kv.store, [point(kv.key(2)), point(kv.key(3))], ts(5))
    assert read(kv.store, [point(kv.key(3))], ts(3)) == []  # below the lock's start_ts
    # A lock outside every range read does not stop the read.
    assert [kv.value_of(v) for _, v in read(kv.store, [point(kv.key(1))], ts(5))] == ["p"]


def test_many_rows_and_ranges_match_scan_in_few_read_transactions(kv, monkeypatch):
    put_many(kv, list(range(3000)))
    version = kv.store.clock()
    ranges = [point(kv.key(k)) for k in range(0, 2000, 2)]  # 1,000 points
    ranges.append((kv.key(2000), kv.key(2600)))  # and one long range
    expected = [
        (k, v)
        for s, e in ranges
        for ks, vs in kv.store.scan(s, e, version)
        for k, v in zip(ks, vs, strict=True)
    ]
    txns = 0
    real = kv.store.storage.read_txn

    def counting():
        nonlocal txns
        txns += 1
        return real()

    monkeypatch.setattr(kv.store.storage, "read_txn", counting)
    got = read(kv.store, ranges, version)
    assert got == expected and len(got) == 1600
    assert txns <= 3, txns
    assert read(kv.store, ranges, version, limit=1003) == expected[:1003]


def test_ranges_in_two_tables_are_refused_naming_them(kv, store):
    other = store.create_table("other", "k BIGINT", ["k"])
    ranges = [point(kv.key(1)), point(other.key_codec.encode({"k": 1}))]
    e = must_err(InvalidArgument, store.scan_ranges, ranges, store.clock())
    assert "range 1" in str(e) and "one table" in str(e)
    # Nor may one range run into the next table; up to its prefix is fine.
    must_err(InvalidArgument, store.scan_ranges, [(kv.key(1), table_prefix(other.id) + b"\0")], 9)
    assert read(store, [(kv.key(1), table_prefix(kv.info.id + 1))], store.clock()) == []


def test_bad_ranges_and_versions_are_refused(kv, store):
    must_err(InvalidArgument, store.scan_ranges, [(b"\0\0", b"")], store.clock())
    must_err(InvalidArgument, store.scan_ranges, [(kv.key(2), kv.key(1))], store.clock())
    must_err(InvalidArgument, store.scan_ranges, [point(kv.key(1))], 0)
    must_err(TableNotFound, store.scan_ranges, [(table_prefix(999), b"")], store.clock())


def test_too_many_ranges_are_refused_naming_count_and_limit(kv, store):
    ranges = [point(kv.key(k)) for k in range(MAX_SCAN_RANGES + 1)]
    e = must_err(RequestTooLarge, store.scan_ranges, ranges, store.clock())
    assert str(MAX_SCAN_RANGES + 1) in str(e) and f"the limit is {MAX_SCAN_RANGES}" in str(e)
    assert [len(r) for r in split_ranges(ranges)] == [MAX_SCAN_RANGES, 1]


def test_an_empty_list_returns_nothing(store):
    assert list(store.scan_ranges([], store.clock())) == []
