"""commit: the second phase; makes a prewritten key visible at commit_ts."""

from __future__ import annotations

from kvstore.errors import TxnLockNotFound, TxnRolledBack
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import changes_key, txn_lock_key, versioned_key
from kvstore.mvcc.records import LockOp, Write, WriteKind

_KIND = {LockOp.PUT: WriteKind.PUT, LockOp.DELETE: WriteKind.DELETE, LockOp.LOCK: WriteKind.LOCK}


def commit_key(ctx: WriteContext, key: bytes, start_ts: int, commit_ts: int) -> None:
    """Replace txn ``start_ts``'s lock on ``key`` by a write record at ``commit_ts``.

    Invariant: afterwards the key has Write(kind, start_ts) at commit_ts and no lock of start_ts.
    Idempotent: a key this txn already committed is left alone. Raises TxnRolledBack if the txn
    was rolled back on the key, TxnLockNotFound if there is neither lock nor record."""
    reader, buf = ctx.reader, ctx.buf
    lock = reader.get_lock(key)
    if lock is None or lock.start_ts != start_ts:
        rec = reader.find_txn_write(key, start_ts)
        if rec is None:
            raise TxnLockNotFound(key, start_ts)
        if rec[1].kind is WriteKind.ROLLBACK:
            raise TxnRolledBack(key, start_ts)
        return
    buf.put(
        "write",
        versioned_key(key, commit_ts),
        Write(_KIND[lock.op], start_ts, lock.short_value).to_bytes(),
    )
    buf.delete("lock", key)
    buf.delete("txn_locks", txn_lock_key(start_ts, key))
    if lock.op is not LockOp.LOCK:
        buf.put("changes", changes_key(key, commit_ts), b"")


def commit(ctx: WriteContext, keys: list[bytes], start_ts: int, commit_ts: int) -> None:
    """Commit ``keys`` of txn ``start_ts`` at ``commit_ts``, all or none (see commit_key)."""
    for key in keys:
        commit_key(ctx, key, start_ts, commit_ts)
