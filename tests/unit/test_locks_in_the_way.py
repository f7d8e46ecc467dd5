"""A read or a prewrite that meets the locks of a decided transaction resolves the locks in its
way, never the whole transaction (kvstore.lock_resolution), and the store's TxnFinisher
finishes the rest of a client's transaction in the background.

The shape is the one that failed: a load of many rows whose primary committed while its
secondaries were still locked (a view's first build at TPC-H SF 1 left 13.3M), read at once.
On a real LMDB store."""

from __future__ import annotations

import struct
import threading

import pytest

from kvstore import wire
from kvstore.actions.prewrite import RANGE_INDEX_MIN_KEYS
from kvstore.errors import KeyIsLocked
from kvstore.limits import RESOLVE_STEP
from kvstore.lock_resolution import resolve_lock
from kvstore.mvcc import LockOp
from kvstore.testing import Kv, must_err
from kvstore.txn_finisher import MAX_PENDING, TxnFinisher
from tests.conftest import wait_for

N = 3 * RESOLVE_STEP  # more locks than one step of resolution


@pytest.fixture
def kv(store) -> Kv:
    return Kv(store)


def _load(kv: Kv, n: int = N, value: str = "v") -> tuple[int, int]:
    """Prewrite keys 0..n-1 in bulk (key 0 the primary) and commit the primary alone, as a
    load's commit does before its secondaries are resolved. Returns (start_ts, commit_ts)."""
    start_ts = kv.store.clock()
    muts = [(LockOp.PUT, kv.key(k), kv.row(k, f"{value}{k}")) for k in range(n)]
    for i in range(0, n, 4096):
        kv.store.prewrite(muts[i : i + 4096], kv.key(0), start_ts)
    commit_ts = kv.store.clock()
    kv.must_commit(0, start_ts, commit_ts)
    return start_ts, commit_ts


def _locks_left(kv: Kv, start_ts: int) -> int:
    ts_be = struct.pack(">Q", start_ts)
    with kv.store.storage.read_txn() as r:
        return sum(
            1 for _, raw in r.iter_range("lock", kv.key(0), kv.key(10 * N)) if raw[1:9] == ts_be
        )


def _no_finisher(kv: Kv) -> None:
    """Stop the store's finisher, so what a read resolved is all that is resolved."""
    kv.store.finisher.close()


def test_point_reads_resolve_only_their_keys(kv):
    """A batch of point reads (scan_ranges) of 100 keys spread over the load returns the load's
    values and resolves those 100 locks, not the load's other 12k (the old rule resolved the
    whole transaction first: planted, this test fails on the count)."""
    _no_finisher(kv)
    start_ts, _ = _load(kv)
    wanted = list(range(7, N, N // 100))[:100]
    ranges = [(kv.key(k), kv.key(k) + b"\0") for k in wanted]
    got = [v for _, vs in kv.store.scan_ranges(ranges, kv.store.clock()) for v in vs]
    assert [kv.value_of(v) for v in got] == [f"v{k}" for k in wanted]
    assert _locks_left(kv, start_ts) == N - 1 - len(wanted)


def test_a_get_resolves_one_key(kv):
    _no_finisher(kv)
    start_ts, commit_ts = _load(kv)
    kv.must_get(N // 2, kv.store.clock(), f"v{N // 2}")
    assert _locks_left(kv, start_ts) == N - 2
    # A read below the commit resolves the same way and sees the key as it was (absent).
    kv.must_get(N // 3, commit_ts - 1, None)
    assert _locks_left(kv, start_ts) == N - 3


def test_a_scan_chunk_resolves_about_its_own_rows(kv):
    """A scan cut short by its limit resolves the locks up to its last row (a freshly loaded
    range: every lock is on a key with no version yet), not the range's thousands."""
    _no_finisher(kv)
    start_ts, _ = _load(kv)
    chunks = kv.store.scan(kv.key(0), kv.key(N), kv.store.clock(), limit=25)
    got = [kv.value_of(v) for _, vs in chunks for v in vs]
    assert got == [f"v{k}" for k in range(25)]
    assert N - 1 - 25 <= _locks_left(kv, start_ts) < N - 1


def test_a_whole_scan_still_sees_every_row(kv):
    """Chunk by chunk, a scan of the whole load resolves it all and returns every row once."""
    _no_finisher(kv)
    start_ts, _ = _load(kv)
    chunks = kv.store.scan(kv.key(0), kv.key(N), kv.store.clock(), chunk_rows=1000)
    got = [kv.value_of(v) for _, vs in chunks for v in vs]
    assert got == [f"v{k}" for k in range(N)]
    assert _locks_left(kv, start_ts) == 0


def test_a_change_scan_waits_for_every_lock_of_the_table(kv):
    """A change read needs the table's history final: it resolves every lock in the table
    (in steps of the keys in its way) before it answers, and sees the whole load."""
    _no_finisher(kv)
    start_ts, _ = _load(kv, n=RESOLVE_STEP + 500)
    changes = kv.store.scan_changes("kv", start_ts - 1, kv.store.clock())
    assert len(changes) == RESOLVE_STEP + 500
    assert _locks_left(kv, start_ts) == 0


def test_a_prewrite_over_the_load_names_and_resolves_the_keys_in_its_way(kv):
    """A prewrite of 50 keys the load still holds is refused naming all 50 (one resolution,
    not one retry per key); resolving them lets it through and leaves the rest locked."""
    _no_finisher(kv)
    start_ts, _ = _load(kv)
    keys = [kv.key(k) for k in range(1000, 1050)]
    muts = [(LockOp.PUT, k, kv.row(1000 + i, "new")) for i, k in enumerate(keys)]
    t2 = kv.store.clock()
    err = must_err(KeyIsLocked, kv.store.prewrite, muts, keys[0], t2)
    assert err.start_ts == start_ts and list(err.keys) == keys
    assert resolve_lock(kv.store, err)
    assert _locks_left(kv, start_ts) == N - 1 - 50
    kv.store.prewrite(muts, keys[0], t2)
    kv.must_commit(1000, t2, kv.store.clock())
    kv.must_get(1000, kv.store.clock(), "new")


def test_a_rolled_back_load_is_rolled_back_where_read(kv):
    """A load whose primary lock expired: a read rolls back the keys in its way and sees
    nothing there; a late commit of such a key is refused."""
    _no_finisher(kv)
    from kvstore.mvcc.timestamp import compose, physical_ms

    start_ts = compose(physical_ms(kv.store.clock()) - 60_000, 0)
    muts = [(LockOp.PUT, kv.key(k), kv.row(k, "x")) for k in range(RANGE_INDEX_MIN_KEYS * 4)]
    kv.store.prewrite(muts, kv.key(0), start_ts, ttl_ms=100)
    kv.must_get(5, kv.store.clock(), None)
    assert _locks_left(kv, start_ts) == RANGE_INDEX_MIN_KEYS * 4 - 2  # key 5 and the primary
    from kvstore.errors import TxnRolledBack

    must_err(TxnRolledBack, kv.store.commit, start_ts, kv.store.clock(), [kv.key(5)])


def test_the_finisher_finishes_a_client_load_a_reader_met(kv):
    """The client that loaded is gone: a reader resolves its key, and the store's finisher
    resolves the rest in the background, so the table's resolved_ts moves past the load."""
    start_ts, _ = _load(kv)
    assert kv.store.resolved_ts("kv") < start_ts
    kv.must_get(9, kv.store.clock(), "v9")
    wait_for(lambda: kv.store.finisher.finished == 1, 60, "the finisher to finish the load")
    assert _locks_left(kv, start_ts) == 0
    assert kv.store.resolved_ts("kv") > start_ts
    assert len(kv.store.scan_changes("kv", start_ts - 1, kv.store.clock())) == N


def test_finisher_queue_is_deduplicated_capped_and_closed(store):
    """One submission per transaction, at most MAX_PENDING waiting, none after close."""
    gate = threading.Event()

    class Blocked:  # holds the finisher's first step until the gate opens
        def run(self, fn, cost=1):
            gate.wait(10)
            return 0, False

    f = TxnFinisher(Blocked())  # type: ignore[arg-type]
    try:
        assert f.submit(1, 2)
        wait_for(lambda: f._active == 1, 10, "the finisher to take the first")
        assert not f.submit(1, 2)  # being finished
        assert all(f.submit(ts, ts + 1) for ts in range(10, 10 + MAX_PENDING))
        assert not f.submit(10, 11)  # queued already
        assert not f.submit(9_999, 10_000)  # the queue is full
        assert f.pending() == MAX_PENDING + 1
    finally:
        gate.set()
        f.close()
    assert not f.submit(5, 6)


def test_the_keys_in_the_way_cross_the_wire():
    err = KeyIsLocked(b"k1", b"p", 5, 100, 0, 7, keys=[b"k1", b"k2", b"k3"])
    back = wire.key_error_from_pb(wire.key_error_to_pb(err))
    assert isinstance(back, KeyIsLocked) and back.keys == (b"k1", b"k2", b"k3")
    assert KeyIsLocked(b"k", b"p", 5, 100).keys == (b"k",)


def _old_ts(kv: Kv, seconds: int) -> int:
    from kvstore.mvcc.timestamp import compose, physical_ms

    return compose(physical_ms(kv.store.clock()) - seconds * 1000, 0)


def _old_load(kv: Kv, ttl_ms: int, commit: bool) -> int:
    """A client's 200-key load started a minute ago (a bulk prewrite, key 0 the primary), with
    its primary committed or not, and the client gone. Nobody reads it."""
    start_ts = _old_ts(kv, 60)
    muts = [(LockOp.PUT, kv.key(k), kv.row(k, f"old{k}")) for k in range(200)]
    kv.store.prewrite(muts, kv.key(0), start_ts, ttl_ms=ttl_ms)
    if commit:
        kv.must_commit(0, start_ts, kv.store.clock())
    return start_ts


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "expired"])
def test_an_old_load_nobody_reads_stops_holding_resolved_ts(kv, commit):
    """resolved_ts itself looks at the table's oldest lock through its primary once it is old:
    the decided transaction (committed, or rolled back because its TTL ran out) is finished in
    the background, and the table's resolved_ts moves past it. Without this, nothing but a
    reader would ever have resolved it."""
    start_ts = _old_load(kv, ttl_ms=100, commit=commit)
    wait_for(lambda: kv.store.resolved_ts("kv") > start_ts, 30, "resolved_ts to pass the load")
    assert _locks_left(kv, start_ts) == 0
    kv.must_get(150, kv.store.clock(), "old150" if commit else None)


def test_a_live_old_transaction_is_left_alone(kv):
    """A transaction a minute old whose primary is still alive (its TTL not run out) is asked
    about and left as it is: its locks stay and resolved_ts stays below it."""
    start_ts = _old_load(kv, ttl_ms=600_000, commit=False)
    for _ in range(3):
        assert kv.store.resolved_ts("kv") < start_ts
    assert _locks_left(kv, start_ts) == 200
    assert kv.store.finisher.pending() == 0 and kv.store.finisher.finished == 0


def test_a_young_lock_is_not_taken_from_its_owner(kv):
    """A load committed a moment ago, its secondaries still locked: resolved_ts leaves it to
    its owner (it would have handed it to the finisher, synchronously, had it looked)."""
    start_ts, _ = _load(kv, n=100)
    assert kv.store.resolved_ts("kv") < start_ts
    assert kv.store.finisher.pending() == 0 and _locks_left(kv, start_ts) == 99


def test_an_admins_raw_resolve_of_a_few_keys_does_not_spread(kv):
    """An admin's raw keys-only rollback against a committed primary (a repair) touches those
    keys alone: the rest of the transaction is not handed on with the admin's verdict."""
    start_ts, _ = _load(kv, n=200)
    kv.store.resolve_locks(start_ts, 0, keys=[kv.key(5)], guard="raw")
    kv.must_unlocked(5)
    assert kv.store.finisher.pending() == 0 and _locks_left(kv, start_ts) == 198


def test_lock_in_way_stops_at_most_and_looks_at_a_bounded_run(kv):
    from kvstore.actions.get import lock_in_way

    a = kv.store.clock()
    b = kv.store.clock()
    kv.store.prewrite(
        [(LockOp.PUT, kv.key(k), kv.row(k, "a")) for k in range(0, 400, 2)], kv.key(0), a
    )
    kv.store.prewrite(
        [(LockOp.PUT, kv.key(k), kv.row(k, "b")) for k in range(1, 400, 2)], kv.key(1), b
    )
    with kv.store.storage.read_txn() as r:
        locks = list(r.iter_range("lock", kv.key(0), kv.key(400)))
        assert lock_in_way(r, locks, b, most=1).keys == (kv.key(0),)
        # Past the first, 4 * most locks are looked at: half of them are the other txn's.
        err = lock_in_way(r, locks, b, most=10)
        assert err.start_ts == a and len(err.keys) == 10
        err = lock_in_way(r, locks, b, most=100)
        assert err.keys == tuple(kv.key(k) for k in range(0, 400, 2))[:100]
        assert lock_in_way(r, locks, a - 1) is None  # nothing at or below the read blocks


def test_a_failing_look_at_the_oldest_lock_leaves_resolved_ts_standing(kv, monkeypatch):
    """Planted: looking at a stale lock fails (a damaged lock, a full disk). resolved_ts
    answers as before and says why in the log, rather than failing every barrier."""
    from kvstore.errors import DataLoss

    start_ts = _old_load(kv, ttl_ms=100, commit=True)

    def broken(start_ts, key):
        raise DataLoss("lock record fails its checksum")

    monkeypatch.setattr(kv.store.stale_locks, "settle", broken)
    assert kv.store.resolved_ts("kv") == start_ts - 1


def test_an_owned_transaction_is_taken_from_its_owner_only_when_very_old(kv):
    """A committed transaction whose primary is in the system table (an epoch's) is its
    owner's while young; one whose lock is older than STALE_OWNED_MS (the owner's resolution
    failed and nothing retries it before a restart) is finished by the finisher."""
    from kvstore import actions
    from kvstore.mvcc.keys import SYSTEM_TABLE_ID, table_prefix
    from kvstore.txn_finisher import STALE_OWNED_MS

    for age_s, taken in ((60, False), (STALE_OWNED_MS // 1000 + 60, True)):
        primary = table_prefix(SYSTEM_TABLE_ID) + b"epoch-%d" % age_s
        start_ts = _old_ts(kv, age_s)
        base = 1000 * age_s
        muts = [(LockOp.PUT, primary, b"p")] + [
            (LockOp.PUT, kv.key(base + k), kv.row(base + k, "e")) for k in range(100)
        ]
        commit_ts = kv.store.clock()
        # As the server writes an epoch: inside its own writes (no RPC may name the system table).
        kv.store.run_write(
            lambda ctx, m=muts, p=primary, t=start_ts: actions.prewrite(ctx, m, p, t, 3000, 0)
        )
        kv.store.run_write(
            lambda ctx, p=primary, t=start_ts, c=commit_ts: actions.commit_key(ctx, p, t, c)
        )
        kv.store.resolved_ts("kv")
        if taken:
            wait_for(lambda: kv.store.finisher.finished == 1, 30, "the finisher")
            assert kv.store.resolved_ts("kv") > start_ts
        else:
            assert kv.store.finisher.pending() == 0
            assert kv.store.resolved_ts("kv") < start_ts
