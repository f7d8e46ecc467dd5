"""get: a point read at a timestamp."""

from __future__ import annotations

from kvstore.errors import KeyIsLocked
from kvstore.mvcc.records import LockOp, WriteKind
from kvstore.storage import Reader


def get(reader: Reader, key: bytes, read_ts: int) -> bytes | None:
    """The value of ``key`` as of ``read_ts``: the newest Put at or below read_ts, or None if the
    newest Put/Delete at or below it is a Delete or there is none.

    Invariant: never reads through a lock. A Put/Delete lock with start_ts <= read_ts may commit
    below read_ts, so it raises KeyIsLocked and the caller resolves it through its primary.
    Rollback and Lock records are skipped."""
    return get_versioned(reader, key, read_ts)[0]


def get_versioned(reader: Reader, key: bytes, read_ts: int) -> tuple[bytes | None, int]:
    """``get``'s answer and the commit_ts of the Put/Delete that decided it (0: none)."""
    lock = reader.get_lock(key)
    if lock is not None and lock.start_ts <= read_ts and lock.op is not LockOp.LOCK:
        raise KeyIsLocked(key, lock.primary, lock.start_ts, lock.ttl_ms, 0, lock.txn_size)
    for commit_ts, w in reader.iter_writes(key, read_ts):
        if w.kind is WriteKind.PUT:
            value = w.short_value if w.short_value is not None else reader.get_data(key, w.start_ts)
            return value, commit_ts
        if w.kind is WriteKind.DELETE:
            return None, commit_ts
    return None, 0
