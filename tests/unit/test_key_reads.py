"""The server's per-key reads against what they replaced, over seeded random version histories
on a real LocalStore (Puts short and long, the data CF; Deletes; Rollbacks; keys rewritten many
times; locks in the way; damaged records):

- get_change (one lock check, one raw walk down the versions) against the two gets of every
  change scan;
- scan_ranges' point read of a range holding one key against scan of that range, one at a time
  and in batches (``_points``: a run of point ranges read with one lock fetch and one seek per
  key), with either end a client gives such a range (key + b"\\0", ``past_versions(key)``), under
  row and byte budgets that cut a batch short;
- scan_ranges' batches of short ranges (``_shorts``: one seek per range into each column family)
  against scan of each range, under the same budgets, with locks and damaged records."""

from __future__ import annotations

import importlib
import random

import pytest

from kvstore import actions
from kvstore.actions.get import get, get_change, get_changes, get_versioned
from kvstore.actions.scan import past_versions, scan, scan_ranges
from kvstore.errors import DataLoss, KeyIsLocked
from kvstore.mvcc.records import SHORT_VALUE_MAX
from kvstore.store import LocalStore
from kvstore.testing import Kv


@pytest.fixture
def kv(tmp_path):
    store = LocalStore(str(tmp_path / "lmdb"), sync=False)
    try:
        yield Kv(store)
    finally:
        store.close()


def _history(kv: Kv, rng: random.Random, keys: int) -> int:
    """Random committed Puts, Deletes and rolled-back Puts on keys 0..keys-1; returns the last
    ts used. Some keys get 20+ versions, some values go to the data CF."""
    ts = 10
    for _ in range(keys * 6):
        k = rng.randrange(keys) if rng.random() < 0.8 else 0  # key 0: many versions
        ts += 2
        r = rng.random()
        if r < 0.6:
            v = "x" * (SHORT_VALUE_MAX + 10) if rng.random() < 0.2 else f"v{ts}"
            kv.must_put(k, v, ts, ts + 1)
        elif r < 0.85:
            kv.must_prewrite_delete(k, k, ts)
            kv.must_commit(k, ts, ts + 1)
        else:
            kv.must_prewrite_put(k, "gone", k, ts)
            kv.must_rollback(k, ts)
    return ts + 2


@pytest.mark.parametrize("seed", range(4))
def test_get_change_equals_the_two_gets(kv, seed):
    rng = random.Random(seed)
    last = _history(kv, rng, 12)
    with kv.store.storage.read_txn() as r:
        for _ in range(300):
            k = kv.key(rng.randrange(13))  # key 12 has no version at all
            a, b = sorted(rng.sample(range(5, last + 3), 2))
            new, commit_ts = get_versioned(r, k, b)
            assert get_change(r, k, a, b) == (get(r, k, a), new, commit_ts)
        # key 0 has 20+ versions: from before its first one, the walk gives up and seeks
        new, commit_ts = get_versioned(r, kv.key(0), last)
        assert get_change(r, kv.key(0), 9, last) == (None, new, commit_ts)


@pytest.mark.parametrize("seed", range(4))
def test_get_changes_walks_as_the_two_gets_read(kv, seed):
    """The one-loop walk of many keys (change_records') gives the two gets' answers for each,
    in order: keys with no version, keys whose newest change is below the interval, and key 0's
    20+ versions (the walk gives up and seeks) among them."""
    rng = random.Random(seed)
    last = _history(kv, rng, 12)
    with kv.store.storage.read_txn() as r:

        def gets(k: bytes, a: int, b: int) -> tuple:
            return (k, get(r, k, a), *get_versioned(r, k, b))

        for _ in range(100):
            keys = [kv.key(rng.randrange(13)) for _ in range(rng.choice([1, 5, 20]))]
            a, b = sorted(rng.sample(range(5, last + 3), 2))
            assert list(get_changes(r, keys, a, b)) == [gets(k, a, b) for k in keys]
        keys = [kv.key(0), kv.key(12)]
        assert list(get_changes(r, keys, 9, last)) == [gets(k, 9, last) for k in keys]


@pytest.mark.parametrize("seed", range(4))
def test_change_records_and_counts_agree_with_the_gets(kv, seed):
    """Over random intervals and key sets (Rollback records and values in the data CF among
    them), change_records and count_changes give what the two gets of each key give."""
    rng = random.Random(seed)
    last = _history(kv, rng, 30)
    with kv.store.storage.read_txn() as r:
        for _ in range(40):
            keys = sorted({kv.key(rng.randrange(31)) for _ in range(rng.choice([3, 12, 40]))})
            a, b = sorted(rng.sample(range(5, last + 3), 2))
            want = [(k, get(r, k, a), get(r, k, b)) for k in keys if get(r, k, a) != get(r, k, b)]
            got = actions.change_records(r, keys, a, b)
            assert [(c.key, c.old, c.new) for c in got] == want
            assert [c.commit_ts for c in got] == [get_versioned(r, c.key, b)[1] for c in got]
            restored = sum(1 for _, old, _ in want if old is not None)
            assert actions.count_changes(r, keys, a, b) == (restored, len(want) - restored)


def test_change_records_are_blocked_by_a_lock_and_refuse_a_damaged_record(kv):
    for k in range(20):
        kv.must_put(k, f"v{k}", 10, 11)
        kv.must_put(k, f"w{k}", 12, 13)
    kv.must_prewrite_put(7, "new", 7, 20)
    keys = [kv.key(k) for k in range(20)]
    with kv.store.storage.read_txn() as r:
        with pytest.raises(KeyIsLocked) as e:
            actions.change_records(r, keys, 11, 25)
        assert e.value.key == kv.key(7)
        assert len(actions.change_records(r, keys, 11, 15)) == 20  # the lock is above 15
    _flip_to_delete(kv, 3, 13)
    with kv.store.storage.read_txn() as r, pytest.raises(DataLoss, match="checksum"):
        actions.change_records(r, keys, 11, 15)


def test_a_lock_in_the_interval_or_below_it_blocks(kv):
    kv.must_put(1, "a", 10, 11)
    kv.must_prewrite_put(1, "b", 1, 20)
    with kv.store.storage.read_txn() as r:
        a = get(r, kv.key(1), 12)
        assert a is not None and get_change(r, kv.key(1), 12, 19) == (a, a, 11)
        for a, b in ((12, 25), (5, 20)):
            with pytest.raises(KeyIsLocked):
                get_change(r, kv.key(1), a, b)


def test_a_damaged_write_record_is_data_loss(kv):
    """A flipped byte in a write record is refused, not read as another kind or value."""
    kv.must_put(1, "a", 10, 11)
    kv.must_put(1, "b", 12, 13)
    storage = kv.store.storage
    from kvstore.mvcc.keys import versioned_key

    vkey = versioned_key(kv.key(1), 13)
    with storage.env.begin(write=True) as txn:
        raw = bytearray(txn.get(vkey, db=storage.cf["write"]))
        raw[0] ^= 0x14  # 'P' -> 'D'
        txn.put(vkey, bytes(raw), db=storage.cf["write"])
    with storage.read_txn() as r, pytest.raises(DataLoss):
        get_change(r, kv.key(1), 11, 20)


def _scans(r, ks: list[bytes], ts: int) -> tuple[list[bytes], list[bytes]]:
    """One scan of each key's range, the answers joined: what scan_ranges must equal."""
    want_k: list[bytes] = []
    want_v: list[bytes] = []
    for k in ks:
        a, b = scan(r, k, k + b"\0", ts)
        want_k += a
        want_v += b
    return want_k, want_v


@pytest.mark.parametrize("seed", range(3))
def test_point_ranges_read_as_scan_reads_them(kv, seed):
    rng = random.Random(100 + seed)
    last = _history(kv, rng, 12)
    with kv.store.storage.read_txn() as r:
        for _ in range(100):
            ks = [kv.key(rng.randrange(13)) for _ in range(rng.randrange(1, 6))]
            ts = rng.randrange(5, last + 3)
            ranges = [(k, k + b"\0") for k in ks]
            want_k, want_v = _scans(r, ks, ts)
            got_k, got_v, done, resume = scan_ranges(r, ranges, ts, 100, 1 << 30)
            assert (got_k, got_v, done, resume) == (want_k, want_v, len(ranges), None)


def test_a_point_read_is_blocked_by_a_lock_and_refuses_a_lost_value(kv):
    kv.must_put(1, "x" * (SHORT_VALUE_MAX + 10), 10, 11)  # its value sits in the data CF
    kv.must_prewrite_put(2, "b", 2, 20)
    with kv.store.storage.read_txn() as r:
        with pytest.raises(KeyIsLocked):
            scan_ranges(r, [(kv.key(2), kv.key(2) + b"\0")], 25, 10, 1 << 30)
        assert scan_ranges(r, [(kv.key(2), kv.key(2) + b"\0")], 15, 10, 1 << 30)[0] == []
    storage = kv.store.storage
    from kvstore.mvcc.keys import versioned_key

    with storage.env.begin(write=True) as txn:
        assert txn.delete(versioned_key(kv.key(1), 10), db=storage.cf["data"])
    with storage.read_txn() as r, pytest.raises(DataLoss):
        scan_ranges(r, [(kv.key(1), kv.key(1) + b"\0")], 15, 10, 1 << 30)


def _read_all(r, ranges, ts, max_rows, max_bytes, one_pair_a_range=True):
    """scan_ranges over the ranges, called until every range is read, each call resuming
    where the last ended, each within its row and byte budgets (the bytes are checked after
    each range: with one pair a range, all but a call's last pair fit under them)."""
    keys: list[bytes] = []
    values: list[bytes] = []
    first, resume = 0, None
    calls = 0
    while first < len(ranges):
        k, v, first, resume = scan_ranges(r, ranges, ts, max_rows, max_bytes, first, resume)
        assert len(k) <= max_rows
        # a call stops once its values reach max_bytes: all but the last pair fit under it
        assert not one_pair_a_range or sum(map(len, v[:-1])) < max_bytes
        keys += k
        values += v
        calls += 1
        assert calls <= 10 * len(ranges) + 1, "no progress"
    return keys, values


@pytest.mark.parametrize("seed", range(4))
def test_point_batches_read_as_scan_reads_them_under_budgets(kv, seed):
    """Long runs of point ranges (repeats, absent keys, both end forms), read whole and under
    small row and byte budgets, give what one scan per range gives."""
    rng = random.Random(300 + seed)
    last = _history(kv, rng, 40)
    with kv.store.storage.read_txn() as r:
        for _ in range(40):
            ks = sorted(kv.key(rng.randrange(45)) for _ in range(rng.randrange(2, 60)))
            ts = rng.randrange(5, last + 3)
            ranges = [(k, k + b"\0" if rng.random() < 0.5 else past_versions(k)) for k in ks]
            want_k, want_v = _scans(r, ks, ts)
            assert scan_ranges(r, ranges, ts, 10_000, 1 << 30) == (
                want_k,
                want_v,
                len(ranges),
                None,
            )
            rows, size = rng.randrange(1, 8), rng.choice([1, 10, 200, 1 << 30])
            assert _read_all(r, ranges, ts, rows, size) == (want_k, want_v)


def test_a_lock_inside_a_batch_blocks_it_and_a_lock_above_the_read_does_not(kv):
    for k in range(10):
        kv.must_put(k, f"v{k}", 10, 11)
    kv.must_prewrite_put(6, "new", 6, 20)
    ranges = [(kv.key(k), past_versions(kv.key(k))) for k in range(10)]
    with kv.store.storage.read_txn() as r:
        with pytest.raises(KeyIsLocked) as e:
            scan_ranges(r, ranges, 25, 100, 1 << 30)
        assert e.value.key == kv.key(6)
        keys, values, done, _ = scan_ranges(r, ranges, 15, 100, 1 << 30)
        assert keys == [kv.key(k) for k in range(10)] and done == 10
        assert kv.value_of(values[6]) == "v6"


def _flip_to_delete(kv, k: int, commit_ts: int) -> None:
    """Key ``k``'s Put record at ``commit_ts`` damaged: its kind byte flipped 'P' -> 'D' (its
    CRC left), so that without the check the key would read as deleted."""
    from kvstore.mvcc.keys import versioned_key

    storage = kv.store.storage
    vkey = versioned_key(kv.key(k), commit_ts)
    with storage.env.begin(write=True) as txn:
        raw = bytearray(txn.get(vkey, db=storage.cf["write"]))
        raw[0] ^= 0x14
        txn.put(vkey, bytes(raw), db=storage.cf["write"])


def _ten_keys_one_put_read_as_a_delete(kv, bad: int):
    """Keys 0..9 put at 10/11, key ``bad``'s record damaged (``_flip_to_delete``)."""
    for k in range(10):
        kv.must_put(k, f"v{k}", 10, 11)
    _flip_to_delete(kv, bad, 11)


def test_a_damaged_record_in_a_batch_is_data_loss(kv):
    _ten_keys_one_put_read_as_a_delete(kv, 4)
    ranges = [(kv.key(k), past_versions(kv.key(k))) for k in range(10)]
    with kv.store.storage.read_txn() as r, pytest.raises(DataLoss, match="checksum"):
        scan_ranges(r, ranges, 15, 100, 1 << 30)


def _range_scans(r, ranges, ts: int) -> tuple[list[bytes], list[bytes]]:
    """One scan of each range, the answers joined: what scan_ranges must equal."""
    want_k: list[bytes] = []
    want_v: list[bytes] = []
    for start, end in ranges:
        a, b = scan(r, start, end, ts)
        want_k += a
        want_v += b
    return want_k, want_v


@pytest.mark.parametrize("seed", range(4))
def test_short_range_batches_read_as_scan_reads_them_under_budgets(kv, seed):
    """Runs of short ranges (a few keys each, empty ones, repeats, out of order, and long ones
    over key 0's many versions or most of the table, which the batch leaves to scan), read
    whole and under small row and byte budgets, give what one scan per range gives."""
    scan_mod = importlib.import_module("kvstore.actions.scan")  # (the package exports scan())

    rng = random.Random(500 + seed)
    last = _history(kv, rng, 40)
    with kv.store.storage.read_txn() as r:
        for _ in range(40):
            ranges = []
            for _ in range(rng.randrange(2, 40)):
                a = rng.randrange(45)
                b = a + (rng.randrange(0, 4) if rng.random() < 0.9 else rng.randrange(10, 45))
                ranges.append((kv.key(a), kv.key(b)) if b > a else (kv.key(a), kv.key(a + 1)))
            assert not any(scan_mod._is_point(*x) for x in ranges)
            ts = rng.randrange(5, last + 3)
            want_k, want_v = _range_scans(r, ranges, ts)
            assert scan_ranges(r, ranges, ts, 10_000, 1 << 30) == (
                want_k,
                want_v,
                len(ranges),
                None,
            )
            rows, size = rng.randrange(1, 8), rng.choice([1, 10, 200, 1 << 30])
            assert _read_all(r, ranges, ts, rows, size, False) == (want_k, want_v)


def test_short_ranges_take_the_batch(kv, monkeypatch):
    """The batch is the path a run of short ranges takes (scan is not called for them), and a
    range longer than the batch's bound still reads whole through scan."""
    scan_mod = importlib.import_module("kvstore.actions.scan")  # (the package exports scan())

    for k in range(200):
        kv.must_put(k, f"v{k}", 10, 11)
    calls = []
    real = scan_mod.scan
    monkeypatch.setattr(scan_mod, "scan", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    ranges = [(kv.key(k), kv.key(k + 2)) for k in range(0, 40, 4)]
    with kv.store.storage.read_txn() as r:
        keys, _, done, _ = scan_ranges(r, ranges, 15, 1000, 1 << 30)
        assert done == len(ranges) and len(keys) == 20 and calls == []
        ranges = [(kv.key(0), kv.key(2)), (kv.key(2), kv.key(150))]
        ranges += [(kv.key(150), kv.key(152)), (kv.key(152), kv.key(154))]
        keys, _, done, _ = scan_ranges(r, ranges, 15, 1000, 1 << 30)
        assert done == 4 and keys == [kv.key(k) for k in range(154)]
        assert calls == [kv.key(2)]  # the long range, and only it, left to scan


def test_a_lock_inside_a_short_batch_blocks_it_and_a_lock_past_the_budget_does_not(kv):
    for k in range(20):
        kv.must_put(k, f"v{k}", 10, 11)
    kv.must_prewrite_put(13, "new", 13, 20)
    ranges = [(kv.key(k), kv.key(k + 2)) for k in range(0, 20, 2)]
    with kv.store.storage.read_txn() as r:
        with pytest.raises(KeyIsLocked) as e:
            scan_ranges(r, ranges, 25, 100, 1 << 30)
        assert e.value.key == kv.key(13)
        keys, _, done, _ = scan_ranges(r, ranges, 15, 100, 1 << 30)  # the lock is above 15
        assert keys == [kv.key(k) for k in range(20)] and done == 10
        # a byte budget met before the locked range: the read stops there, unblocked
        keys, _, done, _ = scan_ranges(r, ranges, 25, 100, 1)
        assert keys == [kv.key(0), kv.key(1)] and done == 1


def test_a_damaged_record_in_a_short_batch_is_data_loss(kv):
    _ten_keys_one_put_read_as_a_delete(kv, 5)
    ranges = [(kv.key(k), kv.key(k + 2)) for k in range(0, 10, 2)]
    with kv.store.storage.read_txn() as r, pytest.raises(DataLoss, match="checksum"):
        scan_ranges(r, ranges, 15, 100, 1 << 30)
