"""GC in bounded steps, on a real LMDB store: for seeded random histories (puts, deletes,
rollbacks, values long enough for the data CF, live locks), collecting at a safepoint in steps of
any size leaves every read and change scan at or above the safepoint as it was, refuses those
below it, and actually removes history. The checker (``observe``) gets a self-test that plants
the fault it must catch."""

from __future__ import annotations

import random

import pytest

from kvstore.actions.gc import GcCursor
from kvstore.errors import SnapshotTooOld
from kvstore.testing import Kv

KEYS = 12


def history(kv: Kv, clock, seed: int) -> list[int]:
    """A random history over KEYS keys; returns every commit ts, in order."""
    rnd = random.Random(seed)
    commits = []
    for _ in range(120):
        k = rnd.randrange(KEYS)
        start = clock()
        roll = rnd.random()
        if roll < 0.15:  # a delete
            kv.must_prewrite_delete(k, k, start)
            commit = clock()
            kv.must_commit(k, start, commit)
        elif roll < 0.22:  # a transaction rolled back: a Rollback record
            kv.must_prewrite_put(k, "r", k, start)
            kv.must_rollback(k, start)
            continue
        else:
            v = ("L" * 1500 if rnd.random() < 0.2 else "v") + str(start)  # some in the data CF
            kv.must_prewrite_put(k, v, k, start)
            commit = clock()
            kv.must_commit(k, start, commit)
        commits.append(commit)
    return commits


def observe(kv: Kv, points: list[int], now: int) -> dict:
    """Every key's value at each point, and the net changes from each point to ``now``."""
    out: dict = {}
    for p in points:
        out[("get", p)] = [kv.value_of(kv.store.get(kv.key(k), p)) for k in range(KEYS)]
        if p < now:
            changes = kv.store.scan_changes("kv", p, now)
            out[("changes", p)] = sorted((c.key, c.old, c.new) for c in changes)
    return out


def records(kv: Kv) -> int:
    with kv.store.storage.read_txn() as r:
        return sum(1 for _ in r.walk("write")) + sum(1 for _ in r.walk("changes"))


@pytest.mark.parametrize("seed,budget", [(1, 1), (2, 3), (3, 7), (4, 2048)])
def test_stepwise_gc_keeps_every_read_at_or_above_the_safepoint(store, clock, seed, budget):
    kv = Kv(store)
    commits = history(kv, clock, seed)
    safepoint = commits[len(commits) // 2]
    now = clock()
    kv.must_prewrite_put(0, "pending", 0, clock())  # a live lock (after now): GC leaves locks
    points = [safepoint, *commits[len(commits) // 2 + 1 :: 7], now]
    before = observe(kv, points, now)
    n_before = records(kv)

    store.advance_safepoint(safepoint)
    cursor, steps, removed = GcCursor(), 0, 0
    while not cursor.done:
        step = store.gc_step(cursor, budget)
        assert step.examined <= 4 * budget or budget >= 2048
        cursor, steps, removed = step.next, steps + 1, removed + step.versions
    assert removed > 0 and records(kv) < n_before
    if budget <= 3:
        assert steps > 10  # really in steps
    assert observe(kv, points, now) == before
    kv.must_locked(0, kv.lock(0).start_ts)
    # A second pass at the same safepoint finds nothing more.
    assert store.gc(safepoint) == 0
    # Below the safepoint: refused, never answered from what is left.
    with pytest.raises(SnapshotTooOld, match="'kv'"):
        store.get(kv.key(1), safepoint - 1)
    with pytest.raises(SnapshotTooOld, match="change scan"):
        store.scan_changes("kv", safepoint - 1, now)
    with pytest.raises(SnapshotTooOld):
        list(store.scan(kv.info.prefix, b"", safepoint - 1))


def test_the_checker_catches_a_gc_that_removes_a_needed_version(store, clock):
    """Plant the fault GC must never make (drop the newest Put at or below the safepoint of a
    key that has newer versions too) and check that ``observe`` sees the difference."""
    kv = Kv(store)
    commits = history(kv, clock, 5)
    safepoint = commits[len(commits) // 2]
    now = clock()
    before = observe(kv, [safepoint, now], now)
    with store.storage.read_txn() as r:
        victim = None
        for k in range(KEYS):
            got = r.seek_write(kv.key(k), safepoint)
            if got is not None and got[1].kind.name == "PUT":
                victim = (kv.key(k), got[0])
                break
    assert victim is not None
    from kvstore.mvcc.keys import versioned_key

    store.run_write(lambda ctx: ctx.buf.delete("write", versioned_key(*victim)))
    assert observe(kv, [safepoint, now], now) != before


def test_a_pass_resumes_inside_a_key_with_many_versions(store, clock):
    """One key with far more versions than a step examines: the pass stops inside it and
    resumes with what it knew (the newest Put at or below the safepoint stays)."""
    kv = Kv(store)
    for i in range(200):
        kv.must_put(1, f"v{i}", clock(), clock())
    safepoint = clock()
    kv.must_put(1, "after", clock(), clock())
    store.advance_safepoint(safepoint)
    cursor, steps = GcCursor(), 0
    while not cursor.done:
        step = store.gc_step(cursor, 5)
        cursor, steps = step.next, steps + 1
    assert steps > 5
    kv.must_get(1, safepoint, "v199")
    kv.must_get(1, clock(), "after")
    with store.storage.read_txn() as r:
        assert sum(1 for _ in r.iter_prefix("write", kv.key(1))) == 2
