"""Resolving the locks in the way, through their transaction's primary: one rule for every caller
(a read inside the server, a client's prewrite, the look at a table's stale locks), over any
store with the LocalStore interface."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvstore.errors import KeyIsLocked, TxnLockNotFound
from kvstore.mvcc.timestamp import lock_expired
from kvstore.results import COMMITTED, LOCKED

if TYPE_CHECKING:  # a client resolves locks without loading the engine
    from kvstore.remote import RemoteStore
    from kvstore.store import LocalStore


def txn_fate(
    store: LocalStore | RemoteStore, primary: bytes, start_ts: int, ttl_ms: int
) -> int | None:
    """The fate of txn ``start_ts`` as its ``primary`` records it: its commit_ts, 0 when it is
    rolled back, None while it is alive. A lock of it with ``ttl_ms`` whose TTL ran out lets a
    primary with no record yet be rolled back (a rollback record written on it), so the late
    prewrite fails when it lands; before that, such a primary counts as alive (its prewrite
    may still be in flight). A primary lock whose own TTL ran out is rolled back too.

    TTLs run on ``store.lock_clock_ms()``: the TSO's physical clock inside the server (it never
    goes back), the caller's wall clock in a remote client."""
    expired = lock_expired(start_ts, ttl_ms, store.lock_clock_ms())
    try:
        st = store.check_txn_status(primary, start_ts, rollback_if_not_exist=expired)
    except TxnLockNotFound:
        return None
    if st.status == LOCKED:
        return None
    return st.commit_ts if st.status == COMMITTED else 0


def resolve_lock(store: LocalStore | RemoteStore, err: KeyIsLocked) -> bool:
    """Resolve the locks of the transaction behind ``err`` that stand in the caller's way
    (``err.keys``) if its fate is decided (``txn_fate``); False if it is alive.

    Committed: those locks are committed. Rolled back, or its primary lock's TTL ran out: they
    are rolled back. Only the keys in the way, never the whole transaction: a view's first
    build commits millions of locks whose owner resolves them in the background, and a reader
    that finished them all first waited minutes (its call's deadline ran out). The store
    finishes the rest of a client's transaction in the background (``kvstore.txn_finisher``)."""
    commit_ts = txn_fate(store, err.primary, err.start_ts, err.ttl_ms)
    if commit_ts is None:
        return False
    store.resolve_locks(err.start_ts, commit_ts, keys=list(err.keys))
    return True
