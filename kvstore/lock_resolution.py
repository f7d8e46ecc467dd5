"""Resolving the locks in the way, through their transaction's primary: one rule for every caller
(a read inside the server, a client's prewrite), over any store with the LocalStore interface."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvstore.errors import KeyIsLocked, TxnLockNotFound
from kvstore.mvcc.timestamp import lock_expired
from kvstore.results import COMMITTED, LOCKED

if TYPE_CHECKING:  # a client resolves locks without loading the engine
    from kvstore.remote import RemoteStore
    from kvstore.store import LocalStore


def resolve_lock(store: LocalStore | RemoteStore, err: KeyIsLocked) -> bool:
    """Finish the transaction behind ``err`` if its fate is decided; False if it is alive.

    Committed: its locks are committed. Rolled back, or its primary lock's TTL ran out: its
    locks are rolled back. A lock whose primary has no record yet (the primary's prewrite may
    still be in flight) counts as alive until the lock's own TTL runs out; only then is a
    rollback record written on the primary, so the late prewrite fails when it lands.

    TTLs run on ``store.lock_clock_ms()``: the TSO's physical clock inside the server (it never
    goes back), the caller's wall clock in a remote client."""
    expired = lock_expired(err.start_ts, err.ttl_ms, store.lock_clock_ms())
    try:
        st = store.check_txn_status(err.primary, err.start_ts, rollback_if_not_exist=expired)
    except TxnLockNotFound:
        return False
    if st.status == LOCKED:
        return False
    commit_ts = st.commit_ts if st.status == COMMITTED else 0
    store.resolve_locks(err.start_ts, commit_ts, keys=list(err.keys))
    return True
