"""resolved_ts read through the lock indexes (kvstore.actions.resolved_ts), against the plain
definition: min(tso_now, the smallest start_ts of a lock in the table - 1), found by scanning
every lock of the table. Real LMDB store; seeded random transactions over two tables, small
(per-key index) and bulk (one range entry) prewrites, commits and rollbacks of whole
transactions and of single keys (as a reader resolving one lock does)."""

from __future__ import annotations

import random

import pytest

from kvstore import actions
from kvstore.actions.prewrite import RANGE_INDEX_MIN_KEYS
from kvstore.mvcc import LockOp
from kvstore.mvcc.keys import table_prefix
from kvstore.mvcc.records import Lock

NOW = 1 << 62  # above every ts the tests use: the answer is then the locks' alone


def _by_scan(reader, table_id: int, tso_now: int) -> int:
    """The definition, by a scan of every lock of the table (the oracle)."""
    res = tso_now
    for _, raw in reader.iter_prefix("lock", table_prefix(table_id)):
        res = min(res, Lock.start_ts_of(raw) - 1)
    return res


class _Tables:
    def __init__(self, store) -> None:
        self.store = store
        self.infos = [store.create_table(n, "k BIGINT, v STRING", ["k"]) for n in ("a", "b")]

    def key(self, t: int, k: int) -> bytes:
        return self.infos[t].key_codec.encode({"k": k})

    def puts(self, t: int, ks) -> list:
        info = self.infos[t]
        return [(LockOp.PUT, self.key(t, k), info.row_codec.encode({"k": k, "v": "x"})) for k in ks]

    def both(self) -> tuple[list[int], list[int]]:
        with self.store.storage.read_txn() as r:
            got = [actions.resolved_ts(r, i.id, NOW) for i in self.infos]
            want = [_by_scan(r, i.id, NOW) for i in self.infos]
        return got, want


@pytest.fixture
def tables(store) -> _Tables:
    return _Tables(store)


def test_other_tables_locks_and_bulk_ranges(tables, clock):
    """A small txn in table a and a bulk one in b: each table is held by its own locks only,
    and by a bulk txn's until its last lock goes."""
    t1, t2 = clock(), clock()
    tables.store.prewrite(tables.puts(0, [1, 2]), tables.key(0, 1), t1)
    tables.store.prewrite(tables.puts(1, range(200)), tables.key(1, 0), t2)
    got, want = tables.both()
    assert got == want == [t1 - 1, t2 - 1]
    c = clock()
    tables.store.commit(t1, c, [tables.key(0, 1), tables.key(0, 2)])
    got, want = tables.both()
    assert got == want == [NOW, t2 - 1]
    tables.store.commit(t2, clock(), [tables.key(1, 0)])  # the primary, then the rest
    assert tables.both()[0] == [NOW, t2 - 1]
    tables.store.resolve_locks(t2, clock())
    assert tables.both() == ([NOW, NOW], [NOW, NOW])


def test_a_range_entry_whose_locks_were_resolved_alone_holds_nothing(tables, clock):
    """Every lock of a bulk prewrite committed key by key (readers resolving them one at a
    time) leaves its range entry behind: it no longer holds the table back."""
    t1 = clock()
    ks = list(range(RANGE_INDEX_MIN_KEYS))
    tables.store.prewrite(tables.puts(0, ks), tables.key(0, 0), t1)
    c = clock()
    for k in ks[:-1]:
        tables.store.commit(t1, c, [tables.key(0, k)])
        assert tables.both()[0][0] == t1 - 1  # one lock left: still held
    tables.store.commit(t1, c, [tables.key(0, ks[-1])])
    with tables.store.storage.read_txn() as r:
        assert r.items_between("txn_ranges", b"", b"\xff" * 8)  # the stale entry is there
    assert tables.both() == ([NOW, NOW], [NOW, NOW])


@pytest.mark.parametrize("seed", range(6))
def test_equals_a_scan_of_the_locks_through_random_transactions(tables, clock, seed):
    """Seeded: transactions of 1 to 150 keys over both tables (bulk or per-key indexed),
    decided whole, key by key, or left open; after every step the indexed answer equals the
    scan's for both tables."""
    rng = random.Random(seed)
    open_txns: list[tuple[int, list[bytes]]] = []
    locked: set[bytes] = set()
    for _ in range(60):
        step = rng.random()
        if step < 0.45 or not open_txns:
            t = rng.randrange(2)
            n = rng.choice([1, 3, 20, RANGE_INDEX_MIN_KEYS, 150])
            ks = [k for k in rng.sample(range(400), n) if tables.key(t, k) not in locked]
            if not ks:
                continue
            start = clock()
            muts = tables.puts(t, sorted(ks))
            for part in (muts[: len(muts) // 2], muts[len(muts) // 2 :]):  # two requests
                if part:
                    tables.store.prewrite(part, muts[0][1], start)
            keys = [m[1] for m in muts]
            locked.update(keys)
            open_txns.append((start, keys))
        else:
            start, keys = open_txns.pop(rng.randrange(len(open_txns)))
            how = rng.choice(["commit", "rollback", "keys"])
            if how == "commit":
                tables.store.commit(start, clock(), [keys[0]])
                tables.store.resolve_locks(start, clock())
            elif how == "rollback":
                tables.store.resolve_locks(start, 0)
            else:  # key by key, some of them now, as readers would
                c = clock()
                for k in rng.sample(keys, rng.randrange(1, len(keys) + 1)):
                    tables.store.commit(start, c, [k])
                    locked.discard(k)
                if any(k in locked for k in keys):
                    open_txns.append((start, [k for k in keys if k in locked]))
                continue
            locked.difference_update(keys)
        got, want = tables.both()
        assert got == want, f"seed {seed}: indexed {got}, scan {want}"


class _CountingReader:
    """A Reader that counts the records its range reads hand out."""

    def __init__(self, reader) -> None:
        self.r, self.items = reader, 0

    def iter_range(self, cf, start, end):
        for item in self.r.iter_range(cf, start, end):
            self.items += 1
            yield item

    def get_lock_raw(self, key):
        self.items += 1
        return self.r.get_lock_raw(key)


def test_cost_does_not_grow_with_the_locks_held(tables, clock):
    """A bulk transaction holding 20,000 locks in table b, and 300 per-key locks of one txn:
    the answer for either table reads a handful of records, not a record per lock."""
    big, small = clock(), clock()
    for i in range(0, 20_000, 5_000):  # four bulk requests: four range entries
        tables.store.prewrite(tables.puts(1, range(i, i + 5_000)), tables.key(1, 0), big)
    for i in range(0, 300, 30):  # per-key entries: below the bulk threshold per request
        tables.store.prewrite(tables.puts(0, range(i, i + 30)), tables.key(0, 0), small)
    with tables.store.storage.read_txn() as r:
        for info, want in ((tables.infos[0], small - 1), (tables.infos[1], big - 1)):
            cr = _CountingReader(r)
            assert actions.resolved_ts(cr, info.id, NOW) == want
            assert cr.items <= 10, f"{info.name}: {cr.items} records read"
