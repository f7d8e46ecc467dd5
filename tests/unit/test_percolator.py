"""Percolator scenarios on a real LMDB store, one per test (the TinyKV project-4 style)."""

from __future__ import annotations

import pytest

from kvstore.errors import (
    KeyIsLocked,
    TxnAlreadyCommitted,
    TxnLockNotFound,
    TxnRolledBack,
    WriteConflict,
)
from kvstore.mvcc import LockOp, WriteKind
from kvstore.mvcc.records import Lock, Write
from kvstore.mvcc.timestamp import compose, physical_ms
from kvstore.testing import Kv, must_err


@pytest.fixture
def kv(store) -> Kv:
    return Kv(store)


@pytest.fixture
def ts(clock):
    """ts(n) -> the n-th of a fresh, increasing run of real hybrid timestamps."""
    run = [clock() for _ in range(32)]
    return lambda n: run[n]


def test_prewrite_conflicts_with_newer_write(kv, ts):
    """A write committed at or after start_ts makes prewrite fail with WriteConflict."""
    kv.must_put(1, "a", ts(2), ts(3))
    err = must_err(WriteConflict, kv.must_prewrite_put, 1, "b", 1, ts(1))
    assert (err.start_ts, err.conflict_start_ts, err.conflict_commit_ts) == (ts(1), ts(2), ts(3))
    kv.must_unlocked(1)


def test_prewrite_blocked_by_foreign_lock(kv, ts):
    """Another txn's lock makes prewrite fail with KeyIsLocked naming that txn."""
    kv.must_prewrite_put(1, "a", 1, ts(1))
    err = must_err(KeyIsLocked, kv.must_prewrite_put, 1, "b", 1, ts(2))
    assert err.start_ts == ts(1) and err.primary == kv.key(1)
    kv.must_locked(1, ts(1))


def test_prewrite_is_idempotent(kv, ts):
    """Prewriting the same key twice for one start_ts leaves one lock and no error."""
    kv.must_prewrite_put(1, "a", 1, ts(1))
    kv.must_prewrite_put(1, "a", 1, ts(1))
    kv.must_locked(1, ts(1))
    kv.must_commit(1, ts(1), ts(2))
    kv.must_get(1, ts(3), "a")


def test_prewrite_of_a_locked_key_with_another_row_is_refused(kv, ts):
    """The same txn prewriting a key again with a different row (two rows for one key in one
    epoch) is refused, naming table and key; the first row stays locked."""
    from kvstore.errors import KeyPrewrittenTwice

    kv.must_prewrite_put(1, "a", 1, ts(1))
    err = must_err(KeyPrewrittenTwice, kv.must_prewrite_put, 1, "b", 1, ts(1))
    assert "table 'kv' key (1,)" in str(err)
    must_err(KeyPrewrittenTwice, kv.must_prewrite_delete, 1, 1, ts(1))
    kv.must_commit(1, ts(1), ts(2))
    kv.must_get(1, ts(3), "a")


def test_prewrite_all_or_nothing(kv, ts):
    """A prewrite that conflicts on one key locks none of its keys."""
    kv.must_put(2, "x", ts(2), ts(3))
    muts = [(LockOp.PUT, kv.key(1), kv.row(1, "a")), (LockOp.PUT, kv.key(2), kv.row(2, "b"))]
    must_err(WriteConflict, kv.store.prewrite, muts, kv.key(1), ts(1))
    kv.must_unlocked(1)
    kv.must_unlocked(2)


def test_commit_is_idempotent(kv, ts):
    """Committing twice succeeds and leaves exactly one write record."""
    kv.must_prewrite_put(1, "a", 1, ts(1))
    kv.must_commit(1, ts(1), ts(2))
    kv.must_commit(1, ts(1), ts(2))
    kv.must_written(1, ts(1), ts(2), WriteKind.PUT)
    kv.must_unlocked(1)


def test_prewrite_after_commit_is_a_noop(kv, ts):
    """A retried prewrite arriving after its commit neither fails nor locks again."""
    kv.must_prewrite_put(1, "a", 1, ts(1))
    kv.must_commit(1, ts(1), ts(2))
    kv.must_prewrite_put(1, "a", 1, ts(1))
    kv.must_unlocked(1)


def test_commit_without_lock_fails(kv, ts):
    """Commit of a key the txn never locked raises TxnLockNotFound."""
    must_err(TxnLockNotFound, kv.must_commit, 1, ts(1), ts(2))


def test_commit_after_rollback_fails_and_keeps_rollback_record(kv, ts):
    """After a rollback, commit fails and the rollback record stays."""
    kv.must_prewrite_put(1, "a", 1, ts(1))
    kv.must_rollback(1, ts(1))
    must_err(TxnRolledBack, kv.must_commit, 1, ts(1), ts(2))
    kv.must_written(1, ts(1), ts(1), WriteKind.ROLLBACK)
    kv.must_unlocked(1)
    kv.must_get(1, ts(3), None)


def test_late_prewrite_after_rollback_fails(kv, ts):
    """A rollback that arrives before the prewrite still stops it (the record protects)."""
    kv.must_rollback(1, ts(1))
    must_err(TxnRolledBack, kv.must_prewrite_put, 1, "a", 1, ts(1))
    kv.must_unlocked(1)


def test_rollback_of_committed_txn_fails(kv, ts):
    """Rolling back a committed txn raises TxnAlreadyCommitted and changes nothing."""
    kv.must_put(1, "a", ts(1), ts(2))
    err = must_err(TxnAlreadyCommitted, kv.must_rollback, 1, ts(1))
    assert err.commit_ts == ts(2)
    kv.must_get(1, ts(3), "a")


def test_rollback_records_of_other_txns_are_not_conflicts(kv, ts):
    """A newer txn's rollback record does not block an older txn's prewrite."""
    kv.must_rollback(1, ts(2))
    kv.must_prewrite_put(1, "a", 1, ts(1))
    kv.must_locked(1, ts(1))


def test_check_txn_status_live_lock(kv, ts):
    """A primary lock within its TTL is reported LOCKED and kept."""
    kv.must_prewrite_put(1, "a", 1, ts(1), ttl_ms=60_000)
    st = kv.store.check_txn_status(kv.key(1), ts(1))
    assert st.status == "locked" and st.lock.ttl_ms == 60_000
    kv.must_locked(1, ts(1))


def test_check_txn_status_expired_lock_is_rolled_back(kv):
    """A primary lock whose TTL ran out is rolled back and can no longer commit."""
    old = compose(physical_ms(kv.store.clock()) - 10_000, 0)  # started 10 s ago
    kv.must_prewrite_put(1, "a", 1, old, ttl_ms=100)
    st = kv.store.check_txn_status(kv.key(1), old)
    assert st.status == "rolled_back"
    kv.must_unlocked(1)
    kv.must_written(1, old, old, WriteKind.ROLLBACK)
    must_err(TxnRolledBack, kv.must_commit, 1, old, kv.store.clock())


def test_check_txn_status_committed(kv, ts):
    """A committed primary is reported COMMITTED with its commit_ts."""
    kv.must_put(1, "a", ts(1), ts(2))
    st = kv.store.check_txn_status(kv.key(1), ts(1))
    assert (st.status, st.commit_ts) == ("committed", ts(2))


def test_check_txn_status_missing_primary(kv, ts):
    """No lock and no record: TxnLockNotFound, or a protective rollback when asked."""
    must_err(TxnLockNotFound, kv.store.check_txn_status, kv.key(1), ts(1))
    st = kv.store.check_txn_status(kv.key(1), ts(1), rollback_if_not_exist=True)
    assert st.status == "rolled_back"
    must_err(TxnRolledBack, kv.must_prewrite_put, 1, "a", 1, ts(1))


def test_read_resolves_lock_of_committed_txn(kv, ts):
    """A read meeting a secondary lock whose primary committed commits it and sees the value."""
    kv.must_prewrite_put(1, "p", 1, ts(1))
    kv.must_prewrite_put(2, "s", 1, ts(1))
    kv.must_commit(1, ts(1), ts(2))  # the primary only: the process "dies" here
    kv.must_locked(2, ts(1))
    kv.must_get(2, ts(3), "s")
    kv.must_unlocked(2)
    kv.must_written(2, ts(1), ts(2), WriteKind.PUT)


def test_read_resolves_lock_of_expired_txn(kv):
    """A read meeting an expired txn's lock rolls the txn back and reads the older value."""
    clock = kv.store.clock
    t1, t2 = clock(), clock()
    kv.must_put(1, "old", t1, t2)
    old = compose(physical_ms(clock()) - 10_000, 0)
    # The expired txn's prewrite is older than the committed value, so it cannot conflict;
    # use another key to hold it.
    kv.must_prewrite_put(2, "never", 2, old, ttl_ms=100)
    kv.must_get(2, clock(), None)
    kv.must_unlocked(2)
    kv.must_get(1, clock(), "old")


def test_read_blocked_by_live_lock(kv, ts):
    """A read at or above a live lock's start_ts raises KeyIsLocked and never reads through."""
    kv.must_put(1, "a", ts(1), ts(2))
    kv.must_prewrite_put(1, "b", 1, ts(3), ttl_ms=60_000)
    must_err(KeyIsLocked, kv.store.get, kv.key(1), ts(4))
    kv.must_get(1, ts(2), "a")  # a read below the lock's start_ts is not blocked


def test_read_skips_rollback_and_sees_older_version(kv, ts):
    """Rollback records are skipped; the newest Put below the read ts is returned."""
    kv.must_put(1, "a", ts(1), ts(2))
    kv.must_rollback(1, ts(3))
    kv.must_get(1, ts(4), "a")


def test_delete_hides_older_versions(kv, ts):
    """A committed Delete makes the key absent at and after its commit_ts only."""
    kv.must_put(1, "a", ts(1), ts(2))
    kv.must_prewrite_delete(1, 1, ts(3))
    kv.must_commit(1, ts(3), ts(4))
    kv.must_get(1, ts(5), None)
    kv.must_get(1, ts(3), "a")


def test_resolve_locks_commits_whole_transaction(kv, ts):
    """resolve_locks with a commit_ts commits every lock of the txn via its index."""
    for k in (1, 2, 3):
        kv.must_prewrite_put(k, f"v{k}", 1, ts(1))
    assert kv.store.resolve_locks(ts(1), ts(2)) == 3
    for k in (1, 2, 3):
        kv.must_unlocked(k)
        kv.must_written(k, ts(1), ts(2), WriteKind.PUT)
    assert kv.store.resolve_locks(ts(1), ts(2)) == 0


def test_resolve_locks_rolls_back_whole_transaction(kv, ts):
    """resolve_locks with commit_ts 0 rolls back every lock of the txn."""
    for k in (1, 2):
        kv.must_prewrite_put(k, f"v{k}", 1, ts(1))
    assert kv.store.resolve_locks(ts(1), 0) == 2
    for k in (1, 2):
        kv.must_unlocked(k)
        kv.must_written(k, ts(1), ts(1), WriteKind.ROLLBACK)


def test_heartbeat_extends_ttl_and_never_shrinks(kv, ts):
    """txn_heartbeat raises the primary's TTL; a smaller advice keeps the larger TTL."""
    kv.must_prewrite_put(1, "a", 1, ts(1), ttl_ms=1000)
    ttl = kv.store.txn_heartbeat(kv.key(1), ts(1), 60_000)
    assert ttl >= 60_000 and kv.lock(1).ttl_ms == ttl
    assert kv.store.txn_heartbeat(kv.key(1), ts(1), 10) == ttl


def test_one_pc_writes_without_locks(kv, ts):
    """One-phase commit leaves no lock and makes the value visible at its commit_ts."""
    commit_ts = kv.store.prewrite(
        [(LockOp.PUT, kv.key(1), kv.row(1, "a"))], kv.key(1), ts(1), try_one_pc=True
    )
    assert commit_ts > ts(1)
    kv.must_unlocked(1)
    kv.must_written(1, ts(1), commit_ts, WriteKind.PUT)
    kv.must_get(1, kv.store.clock(), "a")


def test_large_value_goes_to_data_cf(kv, ts):
    """A value above SHORT_VALUE_MAX is kept in the data CF and read back whole."""
    big = "x" * 5000
    kv.must_put(1, big, ts(1), ts(2))
    w = kv.write_at(1, ts(2))
    assert w.short_value is None
    kv.must_get(1, ts(3), big)


def test_gc_keeps_newest_version_at_or_below_safepoint(kv, ts):
    """gc drops versions older than the newest one at or below the safepoint, nothing else."""
    kv.must_put(1, "v1", ts(1), ts(2))
    kv.must_put(1, "v2", ts(3), ts(4))
    kv.must_put(1, "v3", ts(6), ts(7))
    removed = kv.store.gc(ts(5))
    assert removed == 1
    assert kv.write_at(1, ts(2)) is None
    kv.must_written(1, ts(3), ts(4), WriteKind.PUT)
    kv.must_get(1, ts(5), "v2")
    kv.must_get(1, ts(8), "v3")


def test_gc_drops_deleted_key_entirely(kv, ts):
    """When the newest record at or below the safepoint is a Delete, the key's history goes."""
    kv.must_put(1, "v1", ts(1), ts(2))
    kv.must_prewrite_delete(1, 1, ts(3))
    kv.must_commit(1, ts(3), ts(4))
    assert kv.store.gc(ts(5)) == 2
    assert kv.write_at(1, ts(4)) is None and kv.write_at(1, ts(2)) is None
    kv.must_get(1, ts(6), None)


def test_prewrite_below_safepoint_refused(kv, ts):
    """After gc, a prewrite with start_ts at or below the safepoint is refused."""
    from kvstore.errors import FailedPrecondition

    kv.must_put(1, "v1", ts(1), ts(2))
    kv.store.gc(ts(5))
    must_err(FailedPrecondition, kv.must_prewrite_put, 2, "x", 2, ts(4))


def test_scan_changes_net_per_key(kv, ts):
    """Net change per key in (from, to]: insert+delete inside yields nothing; old/new images."""
    kv.must_put(1, "a", ts(1), ts(2))
    kv.must_put(2, "b", ts(1), ts(2))
    kv.must_put(1, "a2", ts(3), ts(4))  # update
    kv.must_put(3, "c", ts(3), ts(4))  # insert
    kv.must_prewrite_delete(2, 2, ts(5))  # delete
    kv.must_commit(2, ts(5), ts(6))
    kv.must_put(4, "tmp", ts(5), ts(6))  # inserted ...
    kv.must_prewrite_delete(4, 4, ts(7))  # ... and deleted inside the interval
    kv.must_commit(4, ts(7), ts(8))
    changes = kv.store.scan_changes("kv", ts(2), ts(9))
    got = {
        kv.info.key_codec.decode(c.key)[0]: (kv.value_of(c.old), kv.value_of(c.new))
        for c in changes
    }
    assert got == {1: ("a", "a2"), 2: ("b", None), 3: (None, "c")}
    assert [c.commit_ts for c in changes] == [ts(4), ts(6), ts(4)]


def test_resolved_ts_stays_below_live_locks(kv, ts):
    """resolved_ts is below the start_ts of every lock in the table, and moves once it goes."""
    kv.must_prewrite_put(1, "a", 1, ts(1))
    assert kv.store.resolved_ts("kv") == ts(1) - 1
    kv.must_commit(1, ts(1), ts(2))
    assert kv.store.resolved_ts("kv") > ts(2)


def test_txn_lock_index_holds_commit_record(kv, ts):
    """Each txn_locks entry holds the Write record that commits its lock, and exists exactly as
    long as the lock (gone after commit, rollback or resolve)."""
    from kvstore.mvcc import Write, txn_lock_key

    kv.must_prewrite_put(1, "a", 1, ts(1))
    kv.must_prewrite_delete(2, 1, ts(1))
    with kv.store.storage.read_txn() as r:
        assert Write.parse(r.get("txn_locks", txn_lock_key(ts(1), kv.key(1)))) == Write(
            WriteKind.PUT, ts(1), kv.row(1, "a")
        )
        assert Write.parse(r.get("txn_locks", txn_lock_key(ts(1), kv.key(2)))) == Write(
            WriteKind.DELETE, ts(1)
        )
    kv.must_commit(1, ts(1), ts(2))
    kv.store.rollback(ts(1), [kv.key(2)])
    with kv.store.storage.read_txn() as r:
        assert list(r.iter_prefix("txn_locks", txn_lock_key(ts(1), b""))) == []


def _bulk(kv, ks, v="b"):
    return [(LockOp.PUT, kv.key(k), kv.row(k, v)) for k in ks]


def _index_entries(kv, cf, start_ts):
    import struct

    with kv.store.storage.read_txn() as r:
        return r.items_between(cf, struct.pack(">Q", start_ts), struct.pack(">Q", start_ts + 1))


def test_bulk_prewrite_is_indexed_by_one_range(kv, ts):
    """A prewrite of RANGE_INDEX_MIN_KEYS keys or more writes one txn_ranges entry (first key
    -> last key) and no per-key txn_locks entries; resolving commits every key from it, with
    its change index entry, and leaves no lock or index entry behind."""
    from kvstore.actions.prewrite import RANGE_INDEX_MIN_KEYS

    n = RANGE_INDEX_MIN_KEYS + 36
    kv.store.prewrite(_bulk(kv, range(n)), kv.key(0), ts(1))
    assert _index_entries(kv, "txn_locks", ts(1)) == []
    [(first, last)] = [(k[8:], v) for k, v in _index_entries(kv, "txn_ranges", ts(1))]
    assert (first, last) == (kv.key(0), kv.key(n - 1))
    kv.must_commit(0, ts(1), ts(2))  # the primary decides
    assert kv.store.resolve_locks(ts(1), ts(2)) == n - 1
    for k in (1, n // 2, n - 1):
        kv.must_unlocked(k)
        kv.must_written(k, ts(1), ts(2), WriteKind.PUT)
        kv.must_get(k, ts(3), "b")
    assert len(kv.store.scan_changes("kv", ts(1), ts(3))) == n
    assert _index_entries(kv, "txn_ranges", ts(1)) == []
    assert kv.store.resolve_locks(ts(1), ts(2)) == 0  # idempotent


def _lock_records(kv, start_ts):
    with kv.store.storage.read_txn() as r:
        locks = r.items_between("lock", kv.key(0), kv.key(10_000))
    return locks, _index_entries(kv, "txn_locks", start_ts)


@pytest.mark.parametrize("n", [12, 200])
def test_a_prewrite_of_puts_and_deletes_takes_the_bulk_path(kv, ts, monkeypatch, n):
    """PUTs and DELETEs in one prewrite (a view's delta, an index's change) take the bulk path:
    the same lock and index records as the per-key path, byte for byte (a small batch; a large
    one is indexed by one range instead), and resolving commits each key as its op says."""
    import importlib

    pw = importlib.import_module("kvstore.actions.prewrite")  # the module, not its function
    for k in range(0, n, 2):
        kv.must_put(k, "a", ts(1), ts(2))
    muts = [
        (LockOp.DELETE, kv.key(k), b"") if k % 4 == 0 else (LockOp.PUT, kv.key(k), kv.row(k, "b"))
        for k in range(n)
    ]
    kv.store.prewrite(muts, kv.key(1), ts(3))
    bulk = _lock_records(kv, ts(3))
    if n >= pw.RANGE_INDEX_MIN_KEYS:
        assert bulk[1] == [] and len(_index_entries(kv, "txn_ranges", ts(3))) == 1
    else:
        kv.store.rollback(ts(3), [k for _, k, _ in muts])
        monkeypatch.setattr(pw, "_all_inline", lambda m: False)  # the per-key path
        kv.store.prewrite(muts, kv.key(1), ts(4))
        monkeypatch.undo()
        per_key = _lock_records(kv, ts(4))
        assert [k for k, _ in bulk[0]] == [k for k, _ in per_key[0]] == [k for _, k, _ in muts]
        for (_, a), (_, b) in zip(bulk[0], per_key[0], strict=True):  # parse checks each CRC
            la, lb = Lock.parse(a), Lock.parse(b)
            assert (la.start_ts, lb.start_ts) == (ts(3), ts(4))
            assert la.with_ttl(0) == lb.with_ttl(0).__class__(
                lb.op, lb.primary, ts(3), 0, lb.txn_size, lb.short_value
            )
        assert len(bulk[1]) == len(per_key[1]) == n
        for (ka, a), (kb, b) in zip(bulk[1], per_key[1], strict=True):
            wa, wb = Write.parse(a), Write.parse(b)
            assert ka[8:] == kb[8:] and (wa.kind, wa.short_value) == (wb.kind, wb.short_value)
        return
    kv.must_commit(1, ts(3), ts(5))
    assert kv.store.resolve_locks(ts(3), ts(5)) == n - 1
    assert len(kv.store.scan_changes("kv", ts(3), ts(6))) == n  # each key's change indexed
    for k in range(n):
        kv.must_unlocked(k)
        if k % 4 == 0:
            kv.must_written(k, ts(3), ts(5), WriteKind.DELETE)
            kv.must_get(k, ts(6), None)
        else:
            kv.must_get(k, ts(6), "b")


def test_overlapping_ranges_foreign_locks_and_keys_resolved_alone(kv, ts):
    """Two bulk prewrites of one txn with interleaved keys, another txn's lock inside their
    range, and a key a reader already committed alone: each of the txn's keys is committed
    exactly once, and the other txn's lock is left alone."""
    evens, odds = list(range(0, 202, 2)), list(range(1, 131, 2))
    kv.store.prewrite(_bulk(kv, evens), kv.key(0), ts(1))
    kv.store.prewrite(_bulk(kv, odds), kv.key(0), ts(1))
    kv.must_prewrite_put(151, "other", 151, ts(2))  # inside the evens' range
    assert len(_index_entries(kv, "txn_ranges", ts(1))) == 2
    kv.must_commit(0, ts(1), ts(3))
    kv.must_commit(2, ts(1), ts(3))  # as a reader resolving one lock would
    assert kv.store.resolve_locks(ts(1), ts(3)) == len(evens) + len(odds) - 2
    for k in evens + odds:
        kv.must_unlocked(k)
        kv.must_written(k, ts(1), ts(3), WriteKind.PUT)
    kv.must_locked(151, ts(2))
    kv.must_rollback(151, ts(2))  # a change read waits for it otherwise
    assert len(kv.store.scan_changes("kv", ts(1), ts(4))) == len(evens) + len(odds)


def test_rolling_back_a_ranged_txn(kv, ts):
    """Resolving a bulk prewrite as rolled back removes every lock and leaves rollback records,
    so a late prewrite of the same txn cannot land."""
    kv.store.prewrite(_bulk(kv, range(100)), kv.key(0), ts(1))
    assert kv.store.resolve_locks(ts(1), 0) == 100
    for k in (0, 50, 99):
        kv.must_unlocked(k)
        kv.must_get(k, ts(2), None)
    assert _index_entries(kv, "txn_ranges", ts(1)) == []
    must_err(TxnRolledBack, kv.store.prewrite, _bulk(kv, range(100)), kv.key(0), ts(1))
