"""commit: the second phase; makes a prewritten key visible at commit_ts."""

from __future__ import annotations

from kvstore.errors import TxnLockNotFound, TxnRolledBack
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import changes_key, txn_lock_key, versioned_key
from kvstore.mvcc.records import Lock, LockOp, WriteKind


def commit_key(ctx: WriteContext, key: bytes, start_ts: int, commit_ts: int) -> None:
    """Replace txn ``start_ts``'s lock on ``key`` by a write record at ``commit_ts``.

    Invariant: afterwards the key has Write(kind, start_ts) at commit_ts and no lock of start_ts.
    Idempotent: a key this txn already committed is left alone. Raises TxnRolledBack if the txn
    was rolled back on the key, TxnLockNotFound if there is neither lock nor record."""
    reader, buf = ctx.reader, ctx.buf
    raw = reader.get_lock_raw(key)  # checked intact: a damaged lock never becomes a write
    if raw is None or Lock.start_ts_of(raw) != start_ts:
        rec = reader.find_txn_write(key, start_ts)
        if rec is None:
            raise TxnLockNotFound(key, start_ts)
        if rec[1].kind is WriteKind.ROLLBACK:
            raise TxnRolledBack(key, start_ts)
        return
    # A hot path of large epochs: the write record is built from the lock's bytes directly
    # (same one-byte op flags), without parsing the lock into an object.
    buf.put("write", versioned_key(key, commit_ts), Lock.write_bytes(raw))
    buf.delete("lock", key)
    buf.delete("txn_locks", txn_lock_key(start_ts, key))
    if raw[:1] != LockOp.LOCK.value:
        buf.put("changes", changes_key(key, commit_ts), b"")


def commit(ctx: WriteContext, keys: list[bytes], start_ts: int, commit_ts: int) -> None:
    """Commit ``keys`` of txn ``start_ts`` at ``commit_ts``, all or none (see commit_key)."""
    for key in keys:
        commit_key(ctx, key, start_ts, commit_ts)
